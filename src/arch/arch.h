/*
 * arch.h - the architecture layer: a saved execution context and the switch
 * between two of them; and the few instructions that walks of frame-pointer
 * chains decode (a function's entry, a call, a PLT stub, a jump thunk), and
 * the registers a signal handler finds interrupted.
 * Only x86-64 exists (src/arch/x86_64/switch.S); the build stops with a
 * clear message elsewhere.
 *
 * A context is just a saved stack pointer: mote__arch_switch pushes the callee-
 * saved registers, MXCSR and the x87 control word on the old stack, stores
 * rsp, loads the new one and pops the same set.  Caller-saved state is the
 * compiler's business, as for any call.
 */
#ifndef MOTE_ARCH_H
#define MOTE_ARCH_H

#include <stddef.h>
#include <stdint.h>
#include <ucontext.h>

#if !defined(__x86_64__)
#error "mote: unsupported architecture (only x86-64 has a context switch)"
#endif

typedef struct arch_ctx {
    void *sp;
} arch_ctx;

/* The registers of a thread a signal interrupted, from the handler's
 * ucontext_t (passed as void *: the caller needs no <ucontext.h>). */
typedef struct arch_interrupted {
    uintptr_t ip, sp, fp;
} arch_interrupted;

/* Bytes below the stack pointer a leaf function may use without moving it
 * (the System V ABI's red zone). */
#define ARCH_RED_ZONE 128

static inline arch_interrupted arch_interrupted_regs(const void *ucontext)
{
    const ucontext_t *uc = ucontext;
    return (arch_interrupted){.ip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP],
                              .sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP],
                              .fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP]};
}

/* Asks for the line holding p in a writable state (a request for
 * ownership), so a load then a store to a line another CPU wrote cost one
 * transfer, not two.  A hint: never faults.  gcc's __builtin_prefetch(p, 1)
 * gives PREFETCHW only under -mprfchw; x86-64 processors without it (older
 * Intel) execute this opcode (0F 0D /1) as a no-op. */
static inline void arch_prefetch_write(const void *p)
{
    __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
}

/* For a thread interrupted at ip: the offset from its stack pointer of the
 * return address when the interrupted function has no frame record of its
 * own at that instruction (at its entry, before or just after it pushed
 * the frame pointer; or at its return, after popping it), else -1.  A
 * frame-pointer walk from such a point would skip the caller.  ip must
 * point into mapped code (an interrupted thread's pc does). */
static inline int arch_frameless_ret_off(const uint8_t *ip)
{
    if (ip[0] == 0xf3 && ip[1] == 0x0f && ip[2] == 0x1e && ip[3] == 0xfa)
        return 0; /* endbr64, then push %rbp */
    if (ip[0] == 0x55 || ip[0] == 0xc3)
        return 0; /* push %rbp; ret */
    if (ip[0] == 0x48 && ip[1] == 0x89 && ip[2] == 0xe5)
        return 8; /* mov %rsp,%rbp, after the push */
    return -1;
}

/* The target of the direct call (E8 rel32) whose 5 bytes end at return
 * address ret, or 0 when they are no such call (an indirect call: its
 * target is not in the code).  The 5 bytes must be readable. */
static inline uintptr_t arch_call_target(uintptr_t ret)
{
    const uint8_t *c = (const uint8_t *)ret - 5;
    if (c[0] != 0xe8)
        return 0;
    int32_t rel;
    __builtin_memcpy(&rel, c + 1, sizeof rel);
    return ret + (uintptr_t)(intptr_t)rel;
}

/* If the code at fn is a PLT stub, the address of the slot it jumps
 * through (jmp *slot(%rip), after an optional endbr64 and bnd prefix: the
 * .plt, .plt.sec and .plt.got forms); else 0.  12 bytes at fn must be
 * readable. */
static inline uintptr_t arch_plt_slot(uintptr_t fn)
{
    const uint8_t *p = (const uint8_t *)fn;
    if (p[0] == 0xf3 && p[1] == 0x0f && p[2] == 0x1e && p[3] == 0xfa)
        p += 4; /* endbr64 */
    if (p[0] == 0xf2)
        p++; /* bnd */
    if (p[0] != 0xff || p[1] != 0x25)
        return 0;
    int32_t rel;
    __builtin_memcpy(&rel, p + 2, sizeof rel);
    return (uintptr_t)(p + 6) + (uintptr_t)(intptr_t)rel;
}

/* If the code at fn is a thunk that only jumps on (jmp rel32 after an
 * optional endbr64: operator new[] is operator new so), where it jumps;
 * else 0.  9 bytes at fn must be readable. */
static inline uintptr_t arch_thunk_target(uintptr_t fn)
{
    const uint8_t *p = (const uint8_t *)fn;
    if (p[0] == 0xf3 && p[1] == 0x0f && p[2] == 0x1e && p[3] == 0xfa)
        p += 4;
    if (p[0] != 0xe9)
        return 0;
    int32_t rel;
    __builtin_memcpy(&rel, p + 1, sizeof rel);
    return (uintptr_t)(p + 5) + (uintptr_t)(intptr_t)rel;
}

/* Saves the running context into from and resumes to. */
void mote__arch_switch(arch_ctx *from, arch_ctx *to);

/* Resumes to and saves nothing: for a context that will never run again.
 * Its only mark on the abandoned stack is the call's return address. */
_Noreturn void mote__arch_jump(arch_ctx *to);

/* Entry trampoline (assembly): calls arch_entry_fn(arch_entry_arg) with the
 * values arch_ctx_init stored, on a properly aligned stack. */
void mote__arch_task_trampoline(void);

/* Prepares ctx so that the first mote__arch_switch to it calls fn(arg) on the
 * stack whose highest usable address is top.  fn must never return. */
static inline void arch_ctx_init(arch_ctx *ctx, void *top, void (*fn)(void *), void *arg)
{
    /* Frame popped by mote__arch_switch, lowest address first:
     * [mxcsr|fpucw] r15 r14 r13 r12 rbx rbp ret(trampoline) pad */
    uintptr_t sp = ((uintptr_t)top & ~(uintptr_t)15) - 16;
    uint64_t *f = (uint64_t *)sp - 8;
    uint32_t mxcsr;
    uint16_t fpucw;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fpucw));
    f[0] = (uint64_t)mxcsr | ((uint64_t)fpucw << 32);
    f[1] = 0;             /* r15 */
    f[2] = 0;             /* r14 */
    f[3] = (uint64_t)arg; /* r13: argument */
    f[4] = (uint64_t)fn;  /* r12: entry */
    f[5] = 0;             /* rbx */
    f[6] = 0;             /* rbp: ends frame-pointer walks */
    f[7] = (uint64_t)mote__arch_task_trampoline;
    ctx->sp = f;
}

/* Where, above a parked context's saved sp, arch_switch left the frame
 * pointer and then the return address (f[6], f[7] above): the start of a
 * frame-pointer walk.  An offset, not a read, so that a caller can read
 * the pair from wherever the stack's bytes are (a frozen stack's image). */
#define ARCH_CTX_FRAME_OFF 48

#endif /* MOTE_ARCH_H */
