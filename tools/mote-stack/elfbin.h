/*
 * elfbin.h - one x86-64 ELF executable or shared object as mote-stack sees
 * it: its functions (from symbols), the bytes of its code, the names behind
 * its PLT and GOT slots, and source lines from DWARF when present.
 *
 * Invariants: funcs[] is sorted by address with one entry per address
 * (aliases are folded into the name map); names point into libelf's string
 * tables or into memory owned by the elfbin, and live until elfbin_close.
 * Addresses are the ELF's own virtual addresses (st_value), never the
 * run-time ones of a loaded PIE.
 */
#ifndef MOTE_STACK_ELFBIN_H
#define MOTE_STACK_ELFBIN_H

#include "util.h"

#include <elfutils/libdw.h>
#include <gelf.h>
#include <libelf.h>

enum {
    FN_COLD = 1,   /* gcc's foo.cold split part: analysed with its parent */
    FN_IFUNC = 2,  /* STT_GNU_IFUNC: the code is the resolver */
    FN_NONAME = 4, /* found from .eh_frame only (--eh-frame) */
    FN_GLOBAL = 8,
};

typedef struct mfunc {
    uint64_t addr, size;
    const char *name;
    unsigned flags;
    int fi; /* index of its frame analysis (frames.h); -1 before */
} mfunc;

typedef struct code_range {
    uint64_t addr, size;
    const uint8_t *data;
    const char *name;
} code_range;

typedef struct addr_name {
    uint64_t addr;
    const char *name;
} addr_name;

typedef struct cu_range {
    uint64_t lo, hi;
    Dwarf_Off off;
} cu_range;

typedef struct elfbin {
    char *path;
    int fd, dbg_fd;
    Elf *elf, *dbg_elf; /* dbg_elf: a separate debug file, or NULL */
    char *dbg_path;
    uint16_t type;      /* ET_EXEC or ET_DYN */
    uint64_t entry;     /* e_entry: _start of an executable */
    bool dynamic;       /* has PT_DYNAMIC: calls may go through a PLT */
    bool bind_now;      /* no lazy binding (DF_BIND_NOW / DF_1_NOW) */
    const char *symsrc; /* ".symtab", ".dynsym", "separate debug file"... */

    mfunc *funcs;
    size_t nfuncs, capfuncs;
    strmap byname; /* every symbol name (aliases too) -> funcs index */

    code_range *code;
    size_t ncode, capcode;

    addr_name *plt; /* PLT entry address -> target name, sorted */
    size_t nplt, capplt;
    addr_name *slots; /* GOT slot address -> symbol name, sorted */
    size_t nslots, capslots;

    Dwarf *dw;
    bool dw_tried;
    cu_range *cus;
    size_t ncus, capcus;

    char **owned; /* strings this elfbin allocated (unnamed functions) */
    size_t nowned, capowned;
} elfbin;

typedef struct elfbin_opts {
    bool eh_frame; /* add functions found only through .eh_frame */
} elfbin_opts;

/* 0, or EXIT_INPUT after printing why (missing, not ELF, wrong machine,
 * truncated, stripped...). */
int elfbin_open(elfbin *b, const char *path, const elfbin_opts *o);
void elfbin_close(elfbin *b);

/* The code bytes at addr and how many follow in the same section. */
const uint8_t *elfbin_code(const elfbin *b, uint64_t addr, size_t *avail);
/* Index of the function whose range holds addr, or -1. */
int elfbin_func_at(const elfbin *b, uint64_t addr);
/* Index of the function starting exactly at addr, or -1. */
int elfbin_func_start(const elfbin *b, uint64_t addr);
/* By any of its symbol names; -1 when absent. */
int elfbin_func_named(const elfbin *b, const char *name, size_t len);
/* Name of the shared-library (or IFUNC) function a PLT entry at addr
 * jumps to, or NULL when addr is no PLT entry. */
const char *elfbin_plt_name(const elfbin *b, uint64_t addr);
bool elfbin_is_plt(const elfbin *b, uint64_t addr);
/* Name bound to a GOT slot (call *slot(%rip) with -fno-plt), or NULL. */
const char *elfbin_slot_name(const elfbin *b, uint64_t slot);
/* Source file and line of addr from DWARF; false without. */
bool elfbin_srcline(elfbin *b, uint64_t addr, const char **file, int *line);

#endif
