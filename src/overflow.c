/*
 * overflow.c - turns a stack overflow into a clear message instead of silent
 * corruption (see overflow.h).  The handler runs on a per-worker alternate
 * signal stack, since the faulting stack is exhausted by definition.  It
 * only acts when the fault address lies in a task stack's guard; any other
 * fault goes to the handler that was installed before mote's, or to the
 * default action, exactly as if mote had no handler.
 *
 * Blame: the task that overflowed is the one running on the faulting
 * thread.  A frame bigger than the guard can jump past its own guard and
 * land in the guard below the next stack down; the guard's owner is then
 * an innocent neighbour, so the handler names the running task and says
 * whose guard it hit.  One that lands on memory no stack owns is known by
 * the stack pointer, below the running task's stack.  (A jump that lands
 * in a neighbour's usable stack does not fault at all: code built with
 * -fstack-clash-protection, which `pkg-config --cflags mote` and the CMake
 * package add, probes every page of a big frame and always hits its own
 * guard first.)
 */
#include "overflow.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "arch/arch.h"
#include "os/os.h"
#include "stack.h"
#include "task.h"

#define OVERFLOW_ALTSTACK (64u * 1024)

static struct sigaction overflow_prev;
static pthread_once_t overflow_once = PTHREAD_ONCE_INIT;
static __thread void *overflow_altstack;

static char *put(char *p, char *end, const char *s)
{
    while (*s && p < end)
        *p++ = *s++;
    return p;
}

static char *put_u(char *p, char *end, unsigned long long v)
{
    char tmp[21];
    return put(p, end, mote__os_u64_str(v, tmp));
}

static char *put_task(char *p, char *end, const task *t)
{
    char nbuf[128];
    p = put(p, end, "task ");
    p = put_u(p, end, t->id);
    p = put(p, end, " (");
    p = put(p, end, mote__task_display_name(t, nbuf, sizeof nbuf));
    return put(p, end, ")");
}

static char *put_size(char *p, char *end, size_t size)
{
    if (size >= (1u << 20) && size % (1u << 20) == 0) {
        p = put_u(p, end, size >> 20);
        return put(p, end, " MiB");
    }
    p = put_u(p, end, size >> 10);
    return put(p, end, " KiB");
}

/* Names cur, the task that overflowed; jumped: by a frame bigger than the
 * guard, which landed in the guard of owner (if not NULL) or elsewhere. */
static _Noreturn void overflow_report(const task *cur, bool jumped, const task *owner)
{
    char msg[512], *p = msg, *end = msg + sizeof msg - 1;
    p = put(p, end, "mote: ");
    p = put_task(p, end, cur);
    p = put(p, end, " overflowed its ");
    p = put_size(p, end, stack_class_size(stack_cls(&cur->stack)));
    p = put(p, end, " stack");
    if (jumped) {
        p = put(p, end, ": a frame bigger than the guard jumped past it");
        if (owner) {
            p = put(p, end, " into the guard of ");
            p = put_task(p, end, owner);
        }
        p = put(p, end, " (build with -fstack-clash-protection)");
    }
    p = put(p, end, "\n");
    mote__os_write_all(STDERR_FILENO, msg, (size_t)(p - msg));
    signal(SIGABRT, SIG_DFL);
    abort();
}

/* How far below its stack a task's stack pointer may be and the fault
 * still be read as its overflow: a frame of up to this size. */
#define OVERFLOW_REACH (256u << 20)

static void overflow_handler(int sig, siginfo_t *si, void *uc)
{
    void *owner;
    size_t size;
    const task *cur = mote__current_task; /* initial-exec TLS: signal-safe */
    uintptr_t addr = (uintptr_t)si->si_addr;
    if (cur && cur->started) {
        if (mote__stack_guard_hit(addr, &owner, &size))
            overflow_report(cur, owner != cur, owner);
        /* A frame that jumped past the guard and faulted on memory that is
         * no stack's (built without -fstack-clash-protection): the stack
         * pointer is below the task's stack, the fault between the two (or
         * in the red zone below the stack pointer, a leaf's). */
        uintptr_t sp = arch_interrupted_regs(uc).sp, lo = stack_lo(&cur->stack);
        if (sp < lo && lo - sp <= OVERFLOW_REACH && addr + ARCH_RED_ZONE >= sp &&
            addr < lo)
            overflow_report(cur, true, NULL);
    }
    /* Not ours: behave as if mote had never installed a handler. */
    mote__os_signal_forward(sig, si, uc, &overflow_prev);
}

static void overflow_do_install(void)
{
    mote__os_signal_install(SIGSEGV, overflow_handler, &overflow_prev);
}

void mote__overflow_install(void) { pthread_once(&overflow_once, overflow_do_install); }

void mote__overflow_thread_init(void)
{
    if (!overflow_altstack)
        overflow_altstack = mote__os_altstack_init(OVERFLOW_ALTSTACK);
}

void mote__overflow_thread_fini(void)
{
    mote__os_altstack_fini(overflow_altstack, OVERFLOW_ALTSTACK);
    overflow_altstack = NULL;
}
