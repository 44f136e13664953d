/*
 * frames.h - the stack frame of every function, from its machine code.
 *
 * A depth is counted in bytes below the caller's %rsp just before its
 * `call`, so every frame includes its own return address (8 bytes): a
 * function that touches no stack has frame 8.  This is GCC's -fstack-usage
 * convention; clang's .stack_sizes leaves the return address out.
 *
 * Invariants: frame >= 8 for every analysed function; depth >= frame
 * (depth adds the red zone below %rsp); a function's call sites are the
 * contiguous slice calls[first_call, first_call + ncalls) and are in the
 * order the analysis met them.
 */
#ifndef MOTE_STACK_FRAMES_H
#define MOTE_STACK_FRAMES_H

#include "elfbin.h"

enum callsite_kind {
    CS_CALL,   /* call to a direct target (a function, a PLT entry) */
    CS_TAIL,   /* jmp/jcc to another function's start: reuses the frame */
    CS_ICALL,  /* call through a register or memory */
    CS_IJMP,   /* jmp through a register or memory that is no jump table */
    CS_BADJMP, /* direct jump into the middle of something we cannot follow */
};

typedef struct callsite {
    uint64_t at;     /* the call or jump instruction */
    uint64_t next;   /* the address after it: a call's return address */
    uint64_t target; /* direct target, 0 when indirect */
    const char *ext; /* the shared-library (PLT/GOT/IFUNC) name, or NULL */
    uint64_t arg0;   /* %rdi at the call when it is a known constant */
    int32_t depth;   /* depth at the transfer; -1 when %rsp is unknown */
    uint8_t kind;
    uint8_t arg0_known;
} callsite;

enum frame_flags {
    FR_DYNAMIC = 1 << 0,  /* alloca/VLA: %rsp moved by a run-time amount */
    FR_PROBE = 1 << 1,    /* stack-clash probes (loop or unrolled) */
    FR_LEAF = 1 << 2,     /* calls nothing */
    FR_REDZONE = 1 << 3,  /* touches bytes below %rsp (the 128-byte red zone) */
    FR_UNKNOWN = 1 << 4,  /* undecodable code or an %rsp write not followed */
    FR_SWITCH = 1 << 5,   /* loads %rsp from memory: a stack switch */
    FR_ALIGN = 1 << 6,    /* realigns %rsp (and rsp,-N) */
    FR_INDIRECT = 1 << 7, /* has indirect calls or jumps */
    FR_COLD = 1 << 8,     /* owns a .cold part */
    FR_GAPS = 1 << 9,     /* code reached only by a linear sweep (jump
                             tables, landing pads) was analysed with an
                             assumed %rsp */
};

typedef struct frame {
    int func;        /* index in elfbin.funcs */
    int cold;        /* index of its .cold part, or -1 */
    int32_t frame;   /* deepest %rsp, return address included */
    int32_t depth;   /* deepest byte touched, red zone included */
    int32_t redzone; /* bytes used below %rsp */
    int32_t align;   /* N of the largest and rsp,-N; 0 */
    uint32_t flags;
    uint32_t first_call, ncalls;
    uint32_t ninsns;
    uint64_t bad_at; /* first address behind FR_UNKNOWN, 0 */
} frame;

typedef struct analyzer analyzer;

analyzer *analyzer_new(elfbin *b);
void analyzer_free(analyzer *a);
/* The frame of function fi, analysed on first use; NULL for a .cold part
 * (it belongs to its parent's frame). */
const frame *frame_of(analyzer *a, int fi);
/* Analyses every function (for `frames`, and to find every spawn). */
void frames_all(analyzer *a);
const callsite *frame_calls(const analyzer *a, const frame *f);
/* True for functions that never return (abort, exit, __stack_chk_fail...). */
bool noreturn_name(const char *name);

#endif
