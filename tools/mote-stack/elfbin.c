/*
 * elfbin.c - loading an x86-64 ELF for analysis (see elfbin.h).
 *
 * Checks come first and say exactly what is wrong: a file that is missing,
 * not ELF, built for another machine, or cut short is rejected before libelf
 * is trusted with it, because libelf maps the file and a truncated section
 * would otherwise surface as a crash or as garbage instructions.
 *
 * Functions come from .symtab; without one, from a separate debug file
 * (build-id or .gnu_debuglink, as gdb finds them), then from .dynsym
 * (exported functions only, with a warning), and with --eh-frame also from
 * the unwind table, unnamed.  PLT entries are decoded rather than assumed to
 * be 16 bytes apart: their layout differs between lazy, IBT (.plt.sec),
 * .plt.got and static (IRELATIVE) binaries, but each ends in one
 * `jmp *slot(%rip)` whose slot a relocation names.
 */
#include "elfbin.h"

#include <capstone/capstone.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *machine_name(unsigned m)
{
    switch (m) {
    case EM_386: return "i386";
    case EM_ARM: return "32-bit ARM";
    case EM_AARCH64: return "AArch64";
    case EM_RISCV: return "RISC-V";
    case EM_PPC64: return "PowerPC64";
    case EM_PPC: return "PowerPC";
    case EM_S390: return "s390";
    case EM_MIPS: return "MIPS";
    case EM_SPARCV9: return "SPARC V9";
    case EM_LOONGARCH: return "LoongArch";
    default: return NULL;
    }
}

/* Validates the raw header before libelf sees the file. */
static int check_header(const char *path, int fd, off_t fsize)
{
    unsigned char h[64];
    ssize_t n = pread(fd, h, sizeof h, 0);
    if (n < 4 || memcmp(h, ELFMAG, SELFMAG) != 0) {
        msg_error("%s: not an ELF file", path);
        return EXIT_INPUT;
    }
    if (n < (ssize_t)sizeof(Elf64_Ehdr)) {
        msg_error("%s: truncated ELF file (%zd bytes, shorter than its header)", path, n);
        return EXIT_INPUT;
    }
    if (h[EI_CLASS] != ELFCLASS32 && h[EI_CLASS] != ELFCLASS64) {
        msg_error("%s: invalid ELF class %u (corrupt header)", path, h[EI_CLASS]);
        return EXIT_INPUT;
    }
    if (h[EI_DATA] == ELFDATA2MSB) {
        msg_error("%s: big-endian ELF; only x86-64 is supported", path);
        return EXIT_INPUT;
    }
    if (h[EI_DATA] != ELFDATA2LSB || h[EI_VERSION] != EV_CURRENT) {
        msg_error("%s: invalid ELF data encoding %u or version %u (corrupt header)", path,
                  h[EI_DATA], h[EI_VERSION]);
        return EXIT_INPUT;
    }
    if (h[EI_CLASS] != ELFCLASS64) {
        Elf32_Ehdr e32;
        memcpy(&e32, h, sizeof e32);
        const char *m = machine_name(e32.e_machine);
        msg_error("%s: 32-bit ELF for %s; only x86-64 is supported", path,
                  m ? m : "another architecture");
        return EXIT_INPUT;
    }
    Elf64_Ehdr e;
    memcpy(&e, h, sizeof e);
    if (e.e_machine != EM_X86_64) {
        const char *m = machine_name(e.e_machine);
        if (m)
            msg_error("%s: ELF for %s; only x86-64 is supported", path, m);
        else
            msg_error("%s: ELF for machine %u; only x86-64 is supported", path,
                      e.e_machine);
        return EXIT_INPUT;
    }
    if (e.e_type == ET_REL) {
        msg_error("%s: a relocatable object (.o): link it first, call targets "
                  "are only known in a linked executable or shared object",
                  path);
        return EXIT_INPUT;
    }
    if (e.e_type != ET_EXEC && e.e_type != ET_DYN) {
        msg_error("%s: ELF type %u is neither an executable nor a shared object", path,
                  e.e_type);
        return EXIT_INPUT;
    }
    if (e.e_shoff == 0 || e.e_shnum == 0) {
        msg_error("%s: no section headers (stripped with sstrip, or a "
                  "truncated file?)",
                  path);
        return EXIT_INPUT;
    }
    if (e.e_shentsize != sizeof(Elf64_Shdr)) {
        msg_error("%s: section header entries of %u bytes, not %zu (corrupt header)",
                  path, e.e_shentsize, sizeof(Elf64_Shdr));
        return EXIT_INPUT;
    }
    if (e.e_shstrndx >= e.e_shnum && e.e_shstrndx != SHN_XINDEX) {
        msg_error("%s: section name table index %u out of range (%u sections)", path,
                  e.e_shstrndx, e.e_shnum);
        return EXIT_INPUT;
    }
    /* No wrap-around: e_shoff near 2^64 must not pass as small. */
    if (e.e_shoff > (uint64_t)fsize ||
        (uint64_t)e.e_shnum * e.e_shentsize > (uint64_t)fsize - e.e_shoff) {
        msg_error("%s: truncated ELF file: section headers (offset %llu, %u entries) "
                  "end beyond the file's %lld bytes",
                  path, (unsigned long long)e.e_shoff, e.e_shnum, (long long)fsize);
        return EXIT_INPUT;
    }
    return 0;
}

static int open_elf(const char *path, int *fdp, Elf **ep, bool quiet)
{
    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer;
     * it is refused below as not a regular file. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (!quiet)
            msg_error("cannot open %s: %s", path, strerror(errno));
        return EXIT_INPUT;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (!quiet)
            msg_error("%s: not a regular file", path);
        close(fd);
        return EXIT_INPUT;
    }
    int r = quiet ? 0 : check_header(path, fd, st.st_size);
    if (r) {
        close(fd);
        return r;
    }
    Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (!e || elf_kind(e) != ELF_K_ELF) {
        if (!quiet)
            msg_error("%s: libelf cannot read it: %s", path, elf_errmsg(-1));
        if (e)
            elf_end(e);
        close(fd);
        return EXIT_INPUT;
    }
    /* Every section's bytes must lie inside the file. */
    Elf_Scn *s = NULL;
    size_t shstr;
    if (elf_getshdrstrndx(e, &shstr) != 0) {
        if (!quiet)
            msg_error("%s: unreadable section header string table: %s", path,
                      elf_errmsg(-1));
        elf_end(e);
        close(fd);
        return EXIT_INPUT;
    }
    while ((s = elf_nextscn(e, s))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(s, &sh))
            continue;
        if (sh.sh_type != SHT_NOBITS &&
            (sh.sh_offset > (uint64_t)st.st_size ||
             sh.sh_size > (uint64_t)st.st_size - sh.sh_offset)) {
            if (!quiet) {
                const char *nm = elf_strptr(e, shstr, sh.sh_name);
                msg_error("%s: truncated ELF file: section %s (offset %llu, %llu bytes) "
                          "ends beyond the file's %lld bytes",
                          path, nm ? nm : "?", (unsigned long long)sh.sh_offset,
                          (unsigned long long)sh.sh_size, (long long)st.st_size);
            }
            elf_end(e);
            close(fd);
            return EXIT_INPUT;
        }
    }
    *fdp = fd;
    *ep = e;
    return 0;
}

static const char *scn_name(Elf *e, const GElf_Shdr *sh)
{
    size_t shstr;
    if (elf_getshdrstrndx(e, &shstr) != 0)
        return "";
    const char *n = elf_strptr(e, shstr, sh->sh_name);
    return n ? n : "";
}

static int cmp_range(const void *a, const void *b)
{
    const code_range *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static void load_code(elfbin *b)
{
    Elf_Scn *s = NULL;
    while ((s = elf_nextscn(b->elf, s))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(s, &sh) || sh.sh_type != SHT_PROGBITS ||
            !(sh.sh_flags & SHF_EXECINSTR) || sh.sh_size == 0)
            continue;
        Elf_Data *d = elf_rawdata(s, NULL);
        if (!d || !d->d_buf || d->d_size < sh.sh_size)
            continue;
        code_range *c = VEC_PUSH(b->code, b->ncode, b->capcode);
        c->addr = sh.sh_addr;
        c->size = sh.sh_size;
        c->data = d->d_buf;
        c->name = scn_name(b->elf, &sh);
    }
    if (b->ncode)
        qsort(b->code, b->ncode, sizeof *b->code, cmp_range);
}

static const code_range *code_range_at(const elfbin *b, uint64_t addr)
{
    size_t lo = 0, hi = b->ncode;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const code_range *c = &b->code[mid];
        if (addr < c->addr)
            hi = mid;
        else if (addr >= c->addr + c->size)
            lo = mid + 1;
        else
            return c;
    }
    return NULL;
}

const uint8_t *elfbin_code(const elfbin *b, uint64_t addr, size_t *avail)
{
    const code_range *c = code_range_at(b, addr);
    if (!c)
        return NULL;
    *avail = c->addr + c->size - addr;
    return c->data + (addr - c->addr);
}

/* ---- symbols ------------------------------------------------------------ */

typedef struct rawsym {
    uint64_t addr, size;
    const char *name;
    int bind, type;
} rawsym;

static int underscores(const char *s)
{
    int n = 0;
    while (s[n] == '_')
        n++;
    return n;
}

/* The name a function is shown by among its aliases: the plainest one
 * (malloc over __libc_malloc), then a global one, then the shortest. */
static int cmp_rawsym(const void *a, const void *b)
{
    const rawsym *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    int ux = underscores(x->name), uy = underscores(y->name);
    if (ux != uy)
        return ux - uy;
    int bx = x->bind == STB_GLOBAL ? 0 : x->bind == STB_WEAK ? 1 : 2;
    int by = y->bind == STB_GLOBAL ? 0 : y->bind == STB_WEAK ? 1 : 2;
    if (bx != by)
        return bx - by;
    size_t lx = strlen(x->name), ly = strlen(y->name);
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Function symbols of one symbol table whose address lies in our code. */
static size_t read_symtab(elfbin *b, Elf *e, Elf_Scn *scn, rawsym **out, size_t *n,
                          size_t *cap)
{
    GElf_Shdr sh;
    if (!gelf_getshdr(scn, &sh) || sh.sh_entsize == 0)
        return 0;
    Elf_Data *d = elf_getdata(scn, NULL);
    if (!d)
        return 0;
    size_t cnt = sh.sh_size / sh.sh_entsize, got = 0;
    for (size_t i = 0; i < cnt; i++) {
        GElf_Sym sym;
        if (!gelf_getsym(d, (int)i, &sym))
            continue;
        int type = GELF_ST_TYPE(sym.st_info);
        if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF ||
            sym.st_value == 0)
            continue;
        size_t avail;
        if (!elfbin_code(b, sym.st_value, &avail))
            continue;
        const char *name = elf_strptr(e, sh.sh_link, sym.st_name);
        if (!name || !*name)
            continue;
        rawsym *r = VEC_PUSH(*out, *n, *cap);
        r->addr = sym.st_value;
        r->size = sym.st_size;
        r->name = name;
        r->bind = GELF_ST_BIND(sym.st_info);
        r->type = type;
        got++;
    }
    return got;
}

static Elf_Scn *find_scn_type(Elf *e, unsigned type)
{
    Elf_Scn *s = NULL;
    while ((s = elf_nextscn(e, s))) {
        GElf_Shdr sh;
        if (gelf_getshdr(s, &sh) && sh.sh_type == type)
            return s;
    }
    return NULL;
}

static Elf_Scn *find_scn_named(Elf *e, const char *name)
{
    Elf_Scn *s = NULL;
    while ((s = elf_nextscn(e, s))) {
        GElf_Shdr sh;
        if (gelf_getshdr(s, &sh) && strcmp(scn_name(e, &sh), name) == 0)
            return s;
    }
    return NULL;
}

/* The GNU build-id as hex, or false. */
static bool build_id(Elf *e, char *hex, size_t hexlen)
{
    Elf_Scn *s = NULL;
    while ((s = elf_nextscn(e, s))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(s, &sh) || sh.sh_type != SHT_NOTE)
            continue;
        Elf_Data *d = elf_getdata(s, NULL);
        if (!d)
            continue;
        size_t off = 0, noff, doff;
        GElf_Nhdr nh;
        while ((off = gelf_getnote(d, off, &nh, &noff, &doff)) > 0) {
            if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
                memcmp((char *)d->d_buf + noff, "GNU", 4) == 0 &&
                nh.n_descsz * 2 + 1 <= hexlen && nh.n_descsz >= 2) {
                const unsigned char *p = (const unsigned char *)d->d_buf + doff;
                for (size_t i = 0; i < nh.n_descsz; i++)
                    sprintf(hex + 2 * i, "%02x", p[i]);
                return true;
            }
        }
    }
    return false;
}

/* The CRC32 (gdb's gnu_debuglink_crc32, zlib's polynomial) of a file. */
static uint32_t file_crc32(int fd)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    uint32_t crc = 0xffffffffu;
    unsigned char buf[65536];
    ssize_t n;
    off_t off = 0;
    while ((n = pread(fd, buf, sizeof buf, off)) > 0) {
        for (ssize_t i = 0; i < n; i++)
            crc = table[(crc ^ buf[i]) & 0xff] ^ (crc >> 8);
        off += n;
    }
    return crc ^ 0xffffffffu;
}

/* A separate debug file holding the .symtab (and DWARF) of a stripped
 * binary, where gdb would look for it. */
static void find_debug_file(elfbin *b)
{
    const char *root = getenv("MOTE_STACK_DEBUG_ROOT");
    if (!root || !*root)
        root = "/usr/lib/debug";
    char cand[5][PATH_MAX];
    int nc = 0;
    char hex[130];
    bool bid = build_id(b->elf, hex, sizeof hex);
    if (bid)
        snprintf(cand[nc++], PATH_MAX, "%s/.build-id/%.2s/%s.debug", root, hex, hex + 2);
    Elf_Scn *dl = find_scn_named(b->elf, ".gnu_debuglink");
    Elf_Data *d = dl ? elf_getdata(dl, NULL) : NULL;
    char real[PATH_MAX];
    uint32_t want_crc = 0;
    bool have_crc = false;
    const char *nul =
        d && d->d_buf && d->d_size > 1 ? memchr(d->d_buf, 0, d->d_size) : NULL;
    if (nul && realpath(b->path, real)) {
        const char *link = d->d_buf;
        /* The CRC32 follows the name, 4-byte aligned (as gdb checks it). */
        size_t crc_off = ((size_t)(nul - link) + 4) & ~(size_t)3;
        if (crc_off + 4 <= d->d_size) {
            memcpy(&want_crc, link + crc_off, 4);
            have_crc = true;
        }
        char *dir = dirname(real);
        snprintf(cand[nc++], PATH_MAX, "%s/%s", dir, link); /* gdb looks here first */
        snprintf(cand[nc++], PATH_MAX, "%s/.debug/%s", dir, link);
        snprintf(cand[nc++], PATH_MAX, "%s%s/%s", root, dir, link);
    }
    for (int i = 0; i < nc; i++) {
        int fd;
        Elf *e;
        if (access(cand[i], R_OK) != 0 || strcmp(cand[i], b->path) == 0 ||
            open_elf(cand[i], &fd, &e, true))
            continue;
        /* A stale debug file names other functions at these addresses:
         * the build-id path is exact; a debuglink candidate must match
         * its CRC. */
        if (i > 0 || !bid) {
            if (have_crc && file_crc32(fd) != want_crc) {
                msg_warn("%s: %s does not match (CRC mismatch): ignored", b->path,
                         cand[i]);
                elf_end(e);
                close(fd);
                continue;
            }
        }
        GElf_Ehdr eh;
        if (gelf_getehdr(e, &eh) && eh.e_machine == EM_X86_64 &&
            find_scn_type(e, SHT_SYMTAB)) {
            b->dbg_fd = fd;
            b->dbg_elf = e;
            b->dbg_path = xstrdup(cand[i]);
            return;
        }
        elf_end(e);
        close(fd);
    }
}

static char *own(elfbin *b, char *s)
{
    *VEC_PUSH(b->owned, b->nowned, b->capowned) = s;
    return s;
}

/* Functions the symbol tables do not name, from .eh_frame_hdr's sorted
 * table of FDEs: each FDE gives a function's start and length.  (libdw's
 * dwarf_frame_info only gives the range of one CFI row, not the FDE's.) */
static size_t add_eh_frame_funcs(elfbin *b, rawsym **syms, size_t *n, size_t *cap)
{
    Elf_Scn *hs = find_scn_named(b->elf, ".eh_frame_hdr");
    Elf_Scn *es = find_scn_named(b->elf, ".eh_frame");
    GElf_Shdr hsh, esh;
    Elf_Data *hd = hs ? elf_getdata(hs, NULL) : NULL;
    Elf_Data *ed = es ? elf_getdata(es, NULL) : NULL;
    if (!hd || !ed || !hd->d_buf || !ed->d_buf || !gelf_getshdr(hs, &hsh) ||
        !gelf_getshdr(es, &esh) || hd->d_size < 12) {
        msg_warn("%s: no .eh_frame_hdr: --eh-frame finds no functions", b->path);
        return 0;
    }
    const uint8_t *p = hd->d_buf, *e = ed->d_buf;
    /* Only the encodings every x86-64 toolchain emits: eh_frame_ptr
     * sdata4|pcrel, fde_count udata4, table sdata4|datarel, and FDE
     * addresses as 4-byte values. */
    if (p[0] != 1 || (p[1] & 0x0f) != 0x0b || p[2] != 0x03 || p[3] != 0x3b) {
        msg_warn("%s: .eh_frame_hdr uses an unusual encoding; --eh-frame "
                 "ignored",
                 b->path);
        return 0;
    }
    uint32_t count;
    memcpy(&count, p + 8, 4);
    if (12 + (uint64_t)count * 8 > hd->d_size)
        count = (uint32_t)((hd->d_size - 12) / 8);
    size_t got = 0, nsym = *n;
    for (uint32_t i = 0; i < count; i++) {
        int32_t rel, frel;
        memcpy(&rel, p + 12 + 8 * i, 4);
        memcpy(&frel, p + 12 + 8 * i + 4, 4);
        uint64_t lo = hsh.sh_addr + (int64_t)rel;
        uint64_t fde = hsh.sh_addr + (int64_t)frel;
        if (fde < esh.sh_addr || fde + 16 > esh.sh_addr + ed->d_size)
            continue;
        const uint8_t *f = e + (fde - esh.sh_addr);
        uint32_t len, range;
        memcpy(&len, f, 4);
        if (len == 0xffffffffu || len < 12)
            continue; /* 64-bit DWARF length: not emitted for x86-64 code */
        memcpy(&range, f + 12, 4);
        size_t avail;
        if (range == 0 || !elfbin_code(b, lo, &avail))
            continue;
        /* Covered by a symbol already?  syms[0..nsym) is sorted. */
        size_t a = 0, z = nsym;
        bool covered = false;
        while (a < z) {
            size_t m = (a + z) / 2;
            const rawsym *r = &(*syms)[m];
            if (lo < r->addr)
                z = m;
            else if (lo >= r->addr + (r->size ? r->size : 1))
                a = m + 1;
            else {
                covered = true;
                break;
            }
        }
        if (covered)
            continue;
        char buf[32];
        snprintf(buf, sizeof buf, "fn_%llx", (unsigned long long)lo);
        rawsym *r = VEC_PUSH(*syms, *n, *cap);
        r->addr = lo;
        r->size = range;
        r->name = own(b, xstrdup(buf));
        r->bind = STB_LOCAL;
        r->type = STT_FUNC;
        got++;
    }
    return got;
}

static int load_functions(elfbin *b, const elfbin_opts *o)
{
    rawsym *syms = NULL;
    size_t n = 0, cap = 0;
    Elf_Scn *st = find_scn_type(b->elf, SHT_SYMTAB);
    if (st && read_symtab(b, b->elf, st, &syms, &n, &cap))
        b->symsrc = ".symtab";
    if (!n) {
        find_debug_file(b);
        if (b->dbg_elf) {
            Elf_Scn *ds = find_scn_type(b->dbg_elf, SHT_SYMTAB);
            if (ds && read_symtab(b, b->dbg_elf, ds, &syms, &n, &cap))
                b->symsrc = b->dbg_path;
        }
    }
    if (!n) {
        Elf_Scn *dyn = find_scn_type(b->elf, SHT_DYNSYM);
        size_t got = dyn ? read_symtab(b, b->elf, dyn, &syms, &n, &cap) : 0;
        if (got) {
            b->symsrc = ".dynsym";
            if (!o->eh_frame)
                msg_warn("%s has no .symtab (stripped): only its %zu exported "
                         "functions (.dynsym) are seen; --eh-frame adds the "
                         "others, unnamed",
                         b->path, got);
        }
    }
    if (n) /* (no symbols at all: syms may be NULL) */
        qsort(syms, n, sizeof *syms, cmp_rawsym);
    if (o->eh_frame) {
        size_t got = add_eh_frame_funcs(b, &syms, &n, &cap);
        if (got) {
            b->symsrc = b->symsrc ? b->symsrc : ".eh_frame";
            qsort(syms, n, sizeof *syms, cmp_rawsym);
        }
    }
    if (!n) {
        msg_error("%s: no function symbols (stripped binary?): mote-stack "
                  "needs .symtab, .dynsym or a separate debug file; "
                  "--eh-frame analyses the functions of the unwind table, "
                  "unnamed",
                  b->path);
        free(syms);
        return EXIT_INPUT;
    }
    /* One function per address: the first symbol (the preferred name) wins,
     * the largest size of its aliases is kept. */
    for (size_t i = 0; i < n; i++) {
        if (b->nfuncs && b->funcs[b->nfuncs - 1].addr == syms[i].addr) {
            mfunc *f = &b->funcs[b->nfuncs - 1];
            if (syms[i].size > f->size)
                f->size = syms[i].size;
            continue;
        }
        mfunc *f = VEC_PUSH(b->funcs, b->nfuncs, b->capfuncs);
        f->addr = syms[i].addr;
        f->size = syms[i].size;
        f->name = syms[i].name;
        f->fi = -1;
        f->flags = (syms[i].type == STT_GNU_IFUNC ? FN_IFUNC : 0) |
                   (syms[i].bind != STB_LOCAL ? FN_GLOBAL : 0);
        if (strstr(f->name, ".cold"))
            f->flags |= FN_COLD;
    }
    /* Symbols of hand-written assembly often have no size: the function
     * then ends where the next one (or its section) does. */
    for (size_t i = 0; i < b->nfuncs; i++) {
        mfunc *f = &b->funcs[i];
        size_t avail = 0; /* every symbol kept lies in code (see above) */
        if (!elfbin_code(b, f->addr, &avail))
            continue;
        uint64_t end = f->addr + avail;
        if (i + 1 < b->nfuncs && b->funcs[i + 1].addr < end)
            end = b->funcs[i + 1].addr;
        if (f->size == 0 || f->size > avail)
            f->size = end - f->addr;
    }
    for (size_t i = 0; i < n; i++) {
        int fi = elfbin_func_start(b, syms[i].addr);
        if (fi >= 0)
            strmap_put(&b->byname, syms[i].name, fi);
    }
    for (size_t i = 0; i < b->nowned; i++) {
        int fi = elfbin_func_named(b, b->owned[i], strlen(b->owned[i]));
        if (fi >= 0)
            b->funcs[fi].flags |= FN_NONAME;
    }
    free(syms);
    return 0;
}

int elfbin_func_start(const elfbin *b, uint64_t addr)
{
    size_t lo = 0, hi = b->nfuncs;
    while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (b->funcs[m].addr < addr)
            lo = m + 1;
        else
            hi = m;
    }
    return lo < b->nfuncs && b->funcs[lo].addr == addr ? (int)lo : -1;
}

int elfbin_func_at(const elfbin *b, uint64_t addr)
{
    size_t lo = 0, hi = b->nfuncs;
    while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (b->funcs[m].addr <= addr)
            lo = m + 1;
        else
            hi = m;
    }
    if (lo == 0)
        return -1;
    const mfunc *f = &b->funcs[lo - 1];
    return addr < f->addr + f->size ? (int)(lo - 1) : -1;
}

int elfbin_func_named(const elfbin *b, const char *name, size_t len)
{
    return strmap_get(&b->byname, name, len);
}

/* ---- PLT and GOT ---------------------------------------------------------- */

static int cmp_an(const void *a, const void *b)
{
    const addr_name *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static const char *an_find(const addr_name *v, size_t n, uint64_t addr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (v[m].addr < addr)
            lo = m + 1;
        else
            hi = m;
    }
    return lo < n && v[lo].addr == addr ? v[lo].name : NULL;
}

static void load_slots(elfbin *b)
{
    Elf_Scn *s = NULL;
    while ((s = elf_nextscn(b->elf, s))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(s, &sh) || sh.sh_type != SHT_RELA || sh.sh_entsize == 0)
            continue;
        Elf_Data *d = elf_getdata(s, NULL);
        if (!d)
            continue;
        /* The symbol table the relocations index (normally .dynsym). */
        Elf_Scn *symscn = sh.sh_link ? elf_getscn(b->elf, sh.sh_link) : NULL;
        GElf_Shdr ssh;
        Elf_Data *sd = NULL;
        if (symscn && gelf_getshdr(symscn, &ssh) &&
            (ssh.sh_type == SHT_DYNSYM || ssh.sh_type == SHT_SYMTAB))
            sd = elf_getdata(symscn, NULL);
        size_t cnt = sh.sh_size / sh.sh_entsize;
        for (size_t i = 0; i < cnt; i++) {
            GElf_Rela r;
            if (!gelf_getrela(d, (int)i, &r))
                continue;
            unsigned type = GELF_R_TYPE(r.r_info);
            const char *name = NULL;
            if (type == R_X86_64_JUMP_SLOT || type == R_X86_64_GLOB_DAT) {
                GElf_Sym sym;
                if (!sd || !gelf_getsym(sd, (int)GELF_R_SYM(r.r_info), &sym))
                    continue;
                name = elf_strptr(b->elf, ssh.sh_link, sym.st_name);
            } else if (type == R_X86_64_IRELATIVE) {
                /* A static binary's call to an IFUNC (memcpy...): the addend
                 * is the resolver, whose symbol carries the public name. */
                int fi = elfbin_func_start(b, (uint64_t)r.r_addend);
                if (fi >= 0)
                    name = b->funcs[fi].name;
            }
            if (name && *name) {
                addr_name *a = VEC_PUSH(b->slots, b->nslots, b->capslots);
                a->addr = r.r_offset;
                a->name = name;
            }
        }
    }
    if (b->nslots) /* qsort(NULL, 0, ...) is undefined */
        qsort(b->slots, b->nslots, sizeof *b->slots, cmp_an);
}

static void load_plt(elfbin *b)
{
    csh cs;
    if (cs_open(CS_ARCH_X86, CS_MODE_64, &cs) != CS_ERR_OK)
        return;
    cs_option(cs, CS_OPT_DETAIL, CS_OPT_ON);
    cs_insn *in = cs_malloc(cs);
    static const char *const names[] = {".plt", ".plt.sec", ".plt.got", ".iplt"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        Elf_Scn *s = find_scn_named(b->elf, names[k]);
        GElf_Shdr sh;
        if (!s || !gelf_getshdr(s, &sh))
            continue;
        size_t size;
        const uint8_t *p = elfbin_code(b, sh.sh_addr, &size);
        if (!p)
            continue;
        if (size > sh.sh_size)
            size = sh.sh_size;
        uint64_t addr = sh.sh_addr, prev = 0;
        bool prev_endbr = false;
        while (size) {
            if (!cs_disasm_iter(cs, &p, &size, &addr, in)) {
                p++, size--, addr++;
                prev_endbr = false;
                continue;
            }
            const cs_x86 *x = &in->detail->x86;
            if (in->id == X86_INS_JMP && x->op_count == 1 &&
                x->operands[0].type == X86_OP_MEM &&
                x->operands[0].mem.base == X86_REG_RIP &&
                x->operands[0].mem.index == X86_REG_INVALID) {
                uint64_t slot = in->address + in->size + x->operands[0].mem.disp;
                const char *name = elfbin_slot_name(b, slot);
                if (name) {
                    addr_name *a = VEC_PUSH(b->plt, b->nplt, b->capplt);
                    a->addr = in->address;
                    a->name = name;
                    if (prev_endbr) {
                        a = VEC_PUSH(b->plt, b->nplt, b->capplt);
                        a->addr = prev;
                        a->name = name;
                    }
                }
            }
            prev_endbr = in->id == X86_INS_ENDBR64;
            prev = in->address;
        }
    }
    cs_free(in, 1);
    cs_close(&cs);
    if (b->nplt)
        qsort(b->plt, b->nplt, sizeof *b->plt, cmp_an);
}

const char *elfbin_plt_name(const elfbin *b, uint64_t addr)
{
    return an_find(b->plt, b->nplt, addr);
}

bool elfbin_is_plt(const elfbin *b, uint64_t addr)
{
    const code_range *c = code_range_at(b, addr);
    return c && strncmp(c->name, ".plt", 4) == 0;
}

const char *elfbin_slot_name(const elfbin *b, uint64_t slot)
{
    return an_find(b->slots, b->nslots, slot);
}

static void load_dynamic(elfbin *b)
{
    size_t nph;
    if (elf_getphdrnum(b->elf, &nph) != 0)
        return;
    for (size_t i = 0; i < nph; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(b->elf, (int)i, &ph) && ph.p_type == PT_DYNAMIC)
            b->dynamic = true;
    }
    Elf_Scn *s = find_scn_type(b->elf, SHT_DYNAMIC);
    GElf_Shdr sh;
    Elf_Data *d = s ? elf_getdata(s, NULL) : NULL;
    if (!d || !gelf_getshdr(s, &sh) || !sh.sh_entsize)
        return;
    for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
        GElf_Dyn dyn;
        if (!gelf_getdyn(d, (int)i, &dyn))
            break;
        if (dyn.d_tag == DT_BIND_NOW ||
            (dyn.d_tag == DT_FLAGS && (dyn.d_un.d_val & DF_BIND_NOW)) ||
            (dyn.d_tag == DT_FLAGS_1 && (dyn.d_un.d_val & DF_1_NOW)))
            b->bind_now = true;
    }
}

int elfbin_open(elfbin *b, const char *path, const elfbin_opts *o)
{
    memset(b, 0, sizeof *b);
    b->fd = b->dbg_fd = -1;
    b->path = xstrdup(path);
    elf_version(EV_CURRENT);
    int r = open_elf(path, &b->fd, &b->elf, false);
    if (r)
        return r;
    GElf_Ehdr eh;
    gelf_getehdr(b->elf, &eh);
    b->type = eh.e_type;
    b->entry = eh.e_entry;
    load_code(b);
    if (!b->ncode) {
        msg_error("%s: no executable code sections", path);
        return EXIT_INPUT;
    }
    r = load_functions(b, o);
    if (r)
        return r;
    load_dynamic(b);
    load_slots(b);
    load_plt(b);
    return 0;
}

/* ---- DWARF lines ------------------------------------------------------------ */

static int cmp_cu(const void *a, const void *b)
{
    const cu_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* An address -> CU index of our own: clang emits no .debug_aranges, which
 * is all dwarf_addrdie looks at. */
static void load_cus(elfbin *b)
{
    b->dw_tried = true;
    Elf *cands[2] = {b->dbg_elf, b->elf};
    for (int i = 0; i < 2 && !b->dw; i++)
        if (cands[i])
            b->dw = dwarf_begin_elf(cands[i], DWARF_C_READ, NULL);
    if (!b->dw)
        return;
    Dwarf_Off off = 0, next;
    size_t hsize;
    while (dwarf_nextcu(b->dw, off, &next, &hsize, NULL, NULL, NULL) == 0) {
        Dwarf_Die cu;
        if (dwarf_offdie(b->dw, off + hsize, &cu)) {
            Dwarf_Addr base, lo, hi;
            ptrdiff_t p = 0;
            while ((p = dwarf_ranges(&cu, p, &base, &lo, &hi)) > 0) {
                cu_range *c = VEC_PUSH(b->cus, b->ncus, b->capcus);
                c->lo = lo;
                c->hi = hi;
                c->off = off + hsize;
            }
        }
        off = next;
    }
    if (b->ncus)
        qsort(b->cus, b->ncus, sizeof *b->cus, cmp_cu);
}

bool elfbin_srcline(elfbin *b, uint64_t addr, const char **file, int *line)
{
    if (!b->dw_tried)
        load_cus(b);
    if (!b->ncus)
        return false;
    size_t lo = 0, hi = b->ncus;
    while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (b->cus[m].lo <= addr)
            lo = m + 1;
        else
            hi = m;
    }
    /* Ranges may nest or overlap a little: look back a few. */
    for (size_t k = lo; k-- > 0 && k + 8 >= lo;) {
        if (addr < b->cus[k].lo || addr >= b->cus[k].hi)
            continue;
        Dwarf_Die cu;
        if (!dwarf_offdie(b->dw, b->cus[k].off, &cu))
            continue;
        Dwarf_Line *l = dwarf_getsrc_die(&cu, addr);
        if (!l)
            continue;
        const char *f = dwarf_linesrc(l, NULL, NULL);
        if (!f || dwarf_lineno(l, line) != 0)
            continue;
        *file = f;
        return true;
    }
    return false;
}

void elfbin_close(elfbin *b)
{
    if (b->dw)
        dwarf_end(b->dw);
    if (b->dbg_elf)
        elf_end(b->dbg_elf);
    if (b->dbg_fd >= 0)
        close(b->dbg_fd);
    if (b->elf)
        elf_end(b->elf);
    if (b->fd >= 0)
        close(b->fd);
    for (size_t i = 0; i < b->nowned; i++)
        free(b->owned[i]);
    free(b->owned);
    free(b->funcs);
    free(b->code);
    free(b->plt);
    free(b->slots);
    free(b->cus);
    free(b->dbg_path);
    free(b->path);
    strmap_free(&b->byname);
    memset(b, 0, sizeof *b);
    b->fd = b->dbg_fd = -1;
}
