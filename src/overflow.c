/*
 * overflow.c - turns a stack overflow into a clear message instead of silent
 * corruption (see overflow.h).  The handler runs on a per-worker alternate
 * signal stack, since the faulting stack is exhausted by definition.  It
 * only acts when the fault address lies in a task stack's guard; any other
 * fault goes to the handler that was installed before mote's, or to the
 * default action, exactly as if mote had no handler.
 */
#include "overflow.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "stack.h"
#include "task.h"

#define OVERFLOW_ALTSTACK (64u * 1024)

static struct sigaction overflow_prev;
static pthread_once_t overflow_once = PTHREAD_ONCE_INIT;
static __thread void *overflow_altstack;

static char *overflow_put(char *p, char *end, const char *s)
{
    while (*s && p < end)
        *p++ = *s++;
    return p;
}

static char *overflow_putu(char *p, char *end, unsigned long long v)
{
    char tmp[24];
    int n = 0;
    do
        tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) && n < 24);
    while (n && p < end)
        *p++ = tmp[--n];
    return p;
}

static void overflow_handler(int sig, siginfo_t *si, void *uc)
{
    void *owner;
    size_t size;
    if (mote__stack_guard_hit((uintptr_t)si->si_addr, &owner, &size) && owner) {
        const task *t = owner;
        char msg[256], nbuf[128], *p = msg, *end = msg + sizeof msg - 1;
        p = overflow_put(p, end, "mote: task ");
        p = overflow_putu(p, end, t->id);
        p = overflow_put(p, end, " (");
        p = overflow_put(p, end, mote__task_display_name(t, nbuf, sizeof nbuf));
        p = overflow_put(p, end, ") overflowed its ");
        if (size >= (1u << 20) && size % (1u << 20) == 0) {
            p = overflow_putu(p, end, size >> 20);
            p = overflow_put(p, end, " MiB stack\n");
        } else {
            p = overflow_putu(p, end, size >> 10);
            p = overflow_put(p, end, " KiB stack\n");
        }
        ssize_t w = write(STDERR_FILENO, msg, (size_t)(p - msg));
        (void)w;
        signal(SIGABRT, SIG_DFL);
        abort();
    }
    /* Not ours: behave as if mote had never installed a handler. */
    if (overflow_prev.sa_flags & SA_SIGINFO) {
        overflow_prev.sa_sigaction(sig, si, uc);
    } else if (overflow_prev.sa_handler == SIG_DFL ||
               overflow_prev.sa_handler == SIG_IGN) {
        /* Re-arm the old disposition; returning re-executes the faulting
         * instruction, which now gets the default action. */
        sigaction(sig, &overflow_prev, NULL);
    } else {
        overflow_prev.sa_handler(sig);
    }
}

static void overflow_do_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = overflow_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &overflow_prev);
}

void mote__overflow_install(void)
{
    pthread_once(&overflow_once, overflow_do_install);
}

void mote__overflow_thread_init(void)
{
    stack_t old;
    if (sigaltstack(NULL, &old) == 0 && !(old.ss_flags & SS_DISABLE))
        return; /* the thread has one already: keep it */
    void *p = mmap(NULL, OVERFLOW_ALTSTACK, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return;
    stack_t ss = {.ss_sp = p, .ss_size = OVERFLOW_ALTSTACK, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) == 0)
        overflow_altstack = p;
    else
        munmap(p, OVERFLOW_ALTSTACK);
}

void mote__overflow_thread_fini(void)
{
    if (!overflow_altstack)
        return;
    stack_t ss = {.ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE};
    sigaltstack(&ss, NULL);
    munmap(overflow_altstack, OVERFLOW_ALTSTACK);
    overflow_altstack = NULL;
}
