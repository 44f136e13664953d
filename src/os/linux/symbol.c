/*
 * symbol.c - function names from ELF symbol tables (see os.h).  The
 * dynamic symbol table (dladdr) only holds exported names; the static one
 * (.symtab, kept unless the binary is stripped) has every function.
 *
 * Two ways in.  mote__os_symbol_name names one address: the file is mapped
 * read-only for the lookup and unmapped after (the rare path of a
 * diagnostic).  A symtab (mote__os_symtab_*) names many addresses of one
 * mapped file (the heap profile's locations): its functions sorted by
 * address once, in a mapping of its own, so each lookup is a binary
 * search.  Both map the file through elf_map, which checks its headers.
 * Neither allocates from the heap (the profile is written from
 * inside malloc's library, at exit too), and every offset read from the
 * file is checked against its size: a file replaced since it was mapped
 * gives wrong names, never a wild read.  No state.
 */
#include "os/os.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static bool symbol_copy(char *buf, size_t len, const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    if (!n || !len)
        return 0;
    if (n >= len)
        n = len - 1;
    memcpy(buf, s, n);
    buf[n] = 0;
    return 1;
}

/* The whole file at path, mapped read-only, when it is a regular file
 * holding a 64-bit little-endian ELF whose section and program header
 * tables lie inside it; its size in *size.  NULL otherwise. */
static const unsigned char *elf_map(const char *path, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (size_t)st.st_size < sizeof(Elf64_Ehdr)) {
        close(fd);
        return NULL;
    }
    size_t n = (size_t)st.st_size;
    const unsigned char *f = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f == MAP_FAILED)
        return NULL;
    const Elf64_Ehdr *eh = (const void *)f;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
        eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB ||
        eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_phentsize != sizeof(Elf64_Phdr) ||
        eh->e_shoff > n || (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > n - eh->e_shoff ||
        eh->e_phoff > n || (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) > n - eh->e_phoff) {
        munmap((void *)f, n);
        return NULL;
    }
    *size = n;
    return f;
}

static const Elf64_Shdr *symtab_section(const unsigned char *f, size_t size,
                                        const Elf64_Shdr **strs);

/* Looks off (the address minus the object's load bias) up in its symbol
 * table (symtab_section's). */
static bool symbol_from_file(const char *path, uintptr_t off, char *buf, size_t len)
{
    size_t size;
    const unsigned char *f = elf_map(path, &size);
    if (!f)
        return 0;
    bool found = 0;
    const Elf64_Shdr *strs = NULL, *sec = symtab_section(f, size, &strs);
    const Elf64_Sym *sym = sec ? (const void *)(f + sec->sh_offset) : NULL;
    size_t nsym = sec ? sec->sh_size / sizeof *sym : 0;
    for (size_t k = 0; k < nsym; k++) {
        if (ELF64_ST_TYPE(sym[k].st_info) != STT_FUNC || !sym[k].st_value)
            continue;
        if (off >= sym[k].st_value && off - sym[k].st_value < sym[k].st_size &&
            sym[k].st_name < strs->sh_size) {
            const char *name = (const char *)f + strs->sh_offset + sym[k].st_name;
            found = symbol_copy(buf, len, name, strs->sh_size - sym[k].st_name);
            break;
        }
    }
    munmap((void *)f, size);
    return found;
}

bool mote__os_symbol_name(const void *addr, char *buf, size_t len)
{
    Dl_info info;
    struct link_map *map = NULL;
    if (!dladdr1(addr, &info, (void **)&map, RTLD_DL_LINKMAP))
        return 0;
    if (info.dli_sname && info.dli_saddr)
        return symbol_copy(buf, len, info.dli_sname, 256);
    const char *path = info.dli_fname;
    /* The main program has an empty name in the link map. */
    if (!path || !*path || (map && (!map->l_name || !*map->l_name)))
        path = "/proc/self/exe";
    uintptr_t bias = map ? (uintptr_t)map->l_addr : (uintptr_t)info.dli_fbase;
    return symbol_from_file(path, (uintptr_t)addr - bias, buf, len);
}

/* ---- a file's function table, for many lookups ---- */

typedef struct symtab_fn {
    uint64_t value, size;
    uint32_t name; /* offset in strs */
    uint32_t rank; /* among aliases, the higher is the name shown */
    uint32_t id;   /* the caller's (mote__os_symtab_id) */
    uint32_t pad_;
} symtab_fn;

#define SYMTAB_LOADS 16

typedef struct symtab_load {
    uint64_t off, filesz, vaddr; /* a PT_LOAD: where its file bytes go */
} symtab_load;

struct mote__os_symtab {
    size_t map_len, file_len;
    const unsigned char *file;
    const char *strs;
    uint64_t strs_len;
    uint32_t nloads, nfns;
    symtab_load load[SYMTAB_LOADS];
    symtab_fn fn[]; /* by value, then rank */
};

/* A global name without leading underscores reads best (strdup, not
 * __strdup; a function, not its local alias). */
static uint32_t symtab_rank(const Elf64_Sym *sym, const char *name)
{
    uint32_t r = ELF64_ST_BIND(sym->st_info) == STB_LOCAL ? 0 : 8;
    for (int i = 0; i < 4 && name[i] == '_'; i++)
        r--;
    return r + 4;
}

static bool symtab_before(const symtab_fn *a, const symtab_fn *b)
{
    return a->value < b->value || (a->value == b->value && a->rank < b->rank);
}

/* Heapsort: in place, no allocation, n log n on any input. */
static void symtab_sift(symtab_fn *v, size_t i, size_t n)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && symtab_before(&v[c], &v[c + 1]))
            c++;
        if (!symtab_before(&v[i], &v[c]))
            return;
        symtab_fn t = v[i];
        v[i] = v[c];
        v[c] = t;
        i = c;
    }
}

static void symtab_sort(symtab_fn *v, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        symtab_sift(v, i, n);
    for (size_t k = n; k-- > 1;) {
        symtab_fn t = v[0];
        v[0] = v[k];
        v[k] = t;
        symtab_sift(v, 0, k);
    }
}

/* The symbol table to read: .symtab, else .dynsym (a stripped library
 * keeps its exported names there); NULL if neither is sound. */
static const Elf64_Shdr *symtab_section(const unsigned char *f, size_t size,
                                        const Elf64_Shdr **strs)
{
    const Elf64_Ehdr *eh = (const void *)f;
    const Elf64_Shdr *sh = (const void *)(f + eh->e_shoff), *best = NULL;
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        if ((sh[i].sh_type != SHT_SYMTAB && sh[i].sh_type != SHT_DYNSYM) ||
            sh[i].sh_link >= eh->e_shnum)
            continue;
        const Elf64_Shdr *st = &sh[sh[i].sh_link];
        if (sh[i].sh_offset > size || sh[i].sh_size > size - sh[i].sh_offset ||
            st->sh_type != SHT_STRTAB || st->sh_offset > size ||
            st->sh_size > size - st->sh_offset || !st->sh_size)
            continue;
        if (!best || sh[i].sh_type == SHT_SYMTAB) {
            best = &sh[i];
            *strs = st;
        }
    }
    return best;
}

mote__os_symtab *mote__os_symtab_open(const char *path)
{
    size_t size;
    const unsigned char *f = elf_map(path, &size);
    if (!f)
        return NULL;
    const Elf64_Ehdr *eh = (const void *)f;
    const Elf64_Shdr *strs = NULL, *sec = symtab_section(f, size, &strs);
    size_t nsym = sec ? sec->sh_size / sizeof(Elf64_Sym) : 0;
    size_t len = sizeof(mote__os_symtab) + nsym * sizeof(symtab_fn);
    mote__os_symtab *t =
        nsym ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
             : MAP_FAILED;
    if (t == MAP_FAILED) {
        munmap((void *)f, size);
        return NULL;
    }
    t->map_len = len;
    t->file = f;
    t->file_len = size;
    t->strs = (const char *)f + strs->sh_offset;
    t->strs_len = strs->sh_size;
    const Elf64_Phdr *ph = (const void *)(f + eh->e_phoff);
    for (unsigned i = 0; i < eh->e_phnum && t->nloads < SYMTAB_LOADS; i++)
        if (ph[i].p_type == PT_LOAD)
            t->load[t->nloads++] =
                (symtab_load){ph[i].p_offset, ph[i].p_filesz, ph[i].p_vaddr};
    const Elf64_Sym *sym = (const void *)(f + sec->sh_offset);
    for (size_t k = 0; k < nsym; k++) {
        unsigned type = ELF64_ST_TYPE(sym[k].st_info);
        if ((type != STT_FUNC && type != STT_GNU_IFUNC) || !sym[k].st_value ||
            !sym[k].st_size || sym[k].st_shndx == SHN_UNDEF ||
            sym[k].st_name >= t->strs_len || !t->strs[sym[k].st_name])
            continue;
        const char *name = t->strs + sym[k].st_name;
        if (!memchr(name, 0, t->strs_len - sym[k].st_name))
            continue; /* (runs off the table's end) */
        t->fn[t->nfns++] = (symtab_fn){sym[k].st_value,
                                       sym[k].st_size,
                                       sym[k].st_name,
                                       symtab_rank(&sym[k], name),
                                       0,
                                       0};
    }
    symtab_sort(t->fn, t->nfns);
    return t;
}

void mote__os_symtab_close(mote__os_symtab *t)
{
    if (!t)
        return;
    munmap((void *)t->file, t->file_len);
    munmap(t, t->map_len);
}

int64_t mote__os_symtab_find(const mote__os_symtab *t, uint64_t file_off)
{
    uint64_t va = 0;
    bool in = false;
    for (uint32_t i = 0; i < t->nloads && !in; i++) {
        if (file_off >= t->load[i].off && file_off - t->load[i].off < t->load[i].filesz) {
            va = t->load[i].vaddr + (file_off - t->load[i].off);
            in = true;
        }
    }
    if (!in)
        return -1;
    /* the last function starting at or before va: of a run of aliases,
     * the one ranked highest (sorted last) */
    size_t lo = 0, hi = t->nfns;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->fn[mid].value <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* Nested or overlapping sizes: look back a little for one that covers
     * va (an alias's size may differ). */
    for (size_t k = lo, back = 0; k-- > 0 && back < 8; back++)
        if (va - t->fn[k].value < t->fn[k].size)
            return (int64_t)k;
    return -1;
}

const char *mote__os_symtab_name(const mote__os_symtab *t, int64_t fn)
{
    return t->strs + t->fn[fn].name;
}

uint32_t *mote__os_symtab_id(mote__os_symtab *t, int64_t fn) { return &t->fn[fn].id; }

/* ---- the segment holding an address ---- */

bool mote__os_segment_of(uintptr_t a, uintptr_t *lo, uintptr_t *hi, bool *exec)
{
#if defined(DLFO_STRUCT_HAS_EH_DBASE)
    struct dl_find_object fo;
    if (_dl_find_object((void *)a, &fo) != 0 || !fo.dlfo_link_map)
        return 0;
    /* The object's first mapped byte is its ELF header (its first PT_LOAD
     * maps the file from offset 0), and its program headers follow within
     * the first page: read only that much of it. */
    uintptr_t base = (uintptr_t)fo.dlfo_map_start;
    const Elf64_Ehdr *eh = (const void *)base;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
        eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_phentsize != sizeof(Elf64_Phdr) ||
        eh->e_phoff + (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) > 4096)
        return 0;
    const Elf64_Phdr *ph = (const void *)(base + eh->e_phoff);
    uintptr_t bias = (uintptr_t)fo.dlfo_link_map->l_addr;
    for (unsigned i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type != PT_LOAD)
            continue;
        uintptr_t s = bias + ph[i].p_vaddr;
        if (a >= s && a - s < ph[i].p_memsz) {
            *lo = s;
            *hi = s + ph[i].p_memsz;
            *exec = (ph[i].p_flags & PF_X) != 0;
            return 1;
        }
    }
#else
    (void)a, (void)lo, (void)hi, (void)exec;
#endif
    return 0;
}

/* .eh_frame_hdr in its usual encoding: version 1, the pointer to .eh_frame
 * pc-relative (0x1b), the count a plain 4-byte number (0x03), the table
 * pairs of 4-byte offsets from the header's start (0x3b), sorted by the
 * first: where each function starts, where its FDE is. */
uintptr_t mote__os_function_start(uintptr_t pc)
{
#if defined(DLFO_STRUCT_HAS_EH_DBASE)
    struct dl_find_object fo;
    if (_dl_find_object((void *)pc, &fo) != 0 || !fo.dlfo_eh_frame)
        return 0;
    const uint8_t *h = fo.dlfo_eh_frame;
    uintptr_t lo, hi;
    bool x;
    if (!mote__os_segment_of((uintptr_t)h, &lo, &hi, &x) || hi - (uintptr_t)h < 12 ||
        h[0] != 1 || h[1] != 0x1b || h[2] != 0x03 || h[3] != 0x3b)
        return 0;
    uint32_t n;
    memcpy(&n, h + 8, 4);
    const uint8_t *table = h + 12;
    if (n == 0 || (hi - (uintptr_t)table) / 8 < n)
        return 0;
    int64_t want = (int64_t)(pc - (uintptr_t)h);
    uint32_t a = 0, b = n; /* the last entry starting at or before pc */
    while (a < b) {
        uint32_t mid = a + (b - a) / 2;
        int32_t start;
        memcpy(&start, table + 8 * (size_t)mid, 4);
        if ((int64_t)start <= want)
            a = mid + 1;
        else
            b = mid;
    }
    if (!a)
        return 0;
    int32_t start;
    memcpy(&start, table + 8 * (size_t)(a - 1), 4);
    return (uintptr_t)h + (uintptr_t)(intptr_t)start;
#else
    (void)pc;
    return 0;
#endif
}
