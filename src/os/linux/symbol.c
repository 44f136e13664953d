/*
 * symbol.c - function names from ELF symbol tables (see os.h).  The
 * dynamic symbol table (dladdr) only holds exported names; the static one
 * (.symtab, kept unless the binary is stripped) has every function.  The
 * file is mapped read-only for the lookup and unmapped after: this runs
 * on the rare path of a diagnostic, never on a hot one.  No state.
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

/* Looks off (the address minus the object's load bias) up in .symtab. */
static bool symbol_from_file(const char *path, uintptr_t off, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(Elf64_Ehdr)) {
        close(fd);
        return 0;
    }
    size_t size = (size_t)st.st_size;
    const unsigned char *f = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f == MAP_FAILED)
        return 0;
    bool found = 0;
    const Elf64_Ehdr *eh = (const void *)f;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
        eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_shentsize != sizeof(Elf64_Shdr) ||
        eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > size)
        goto out;
    const Elf64_Shdr *sh = (const void *)(f + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum && !found; i++) {
        if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum)
            continue;
        const Elf64_Shdr *strs = &sh[sh[i].sh_link];
        if (sh[i].sh_offset + sh[i].sh_size > size ||
            strs->sh_offset + strs->sh_size > size)
            continue;
        const Elf64_Sym *sym = (const void *)(f + sh[i].sh_offset);
        size_t nsym = sh[i].sh_size / sizeof *sym;
        for (size_t k = 0; k < nsym; k++) {
            if (ELF64_ST_TYPE(sym[k].st_info) != STT_FUNC || !sym[k].st_value)
                continue;
            if (off >= sym[k].st_value && off < sym[k].st_value + sym[k].st_size &&
                sym[k].st_name < strs->sh_size) {
                const char *name = (const char *)f + strs->sh_offset + sym[k].st_name;
                found = symbol_copy(buf, len, name, strs->sh_size - sym[k].st_name);
                break;
            }
        }
    }
out:
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
