/*
 * signal.c - signal handlers, alternate signal stacks and helper threads
 * (see os.h).  No state: callers keep what they install.
 */
#include "os/os.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* SA_RESTART for both: a signal mote sends itself (stall reports), or one
 * the program asked it to answer, must not turn a blocking system call
 * into EINTR. */
static int signal_install(int sig, void (*handler)(int, siginfo_t *, void *), int flags,
                          struct sigaction *prev)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART | flags;
    sigemptyset(&sa.sa_mask);
    return sigaction(sig, &sa, prev) == 0 ? 0 : -errno;
}

int mote__os_signal_install(int sig, void (*handler)(int, siginfo_t *, void *),
                            struct sigaction *prev)
{
    return signal_install(sig, handler, SA_ONSTACK | SA_NODEFER, prev);
}

int mote__os_signal_install_plain(int sig, void (*handler)(int, siginfo_t *, void *))
{
    return signal_install(sig, handler, 0, NULL);
}

void mote__os_signal_forward(int sig, siginfo_t *si, void *uc,
                             const struct sigaction *prev)
{
    if (prev->sa_flags & SA_SIGINFO) {
        prev->sa_sigaction(sig, si, uc);
    } else if (prev->sa_handler == SIG_DFL || prev->sa_handler == SIG_IGN) {
        /* Re-arm the old disposition; returning re-executes the faulting
         * instruction, which now gets the default action. */
        sigaction(sig, prev, NULL);
    } else {
        prev->sa_handler(sig);
    }
}

void mote__os_signal_restore(int sig, const struct sigaction *prev)
{
    sigaction(sig, prev, NULL);
}

void *mote__os_altstack_init(size_t size)
{
    stack_t old;
    if (sigaltstack(NULL, &old) == 0 && !(old.ss_flags & SS_DISABLE))
        return NULL; /* the thread has one already: keep it */
    void *p =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    stack_t ss = {.ss_sp = p, .ss_size = size, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
        munmap(p, size);
        return NULL;
    }
    return p;
}

void mote__os_altstack_fini(void *mem, size_t size)
{
    if (!mem)
        return;
    stack_t ss = {.ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE};
    sigaltstack(&ss, NULL);
    munmap(mem, size);
}

void mote__os_async_signals_block(sigset_t *old)
{
    sigset_t set;
    sigfillset(&set);
    sigdelset(&set, SIGSEGV);
    sigdelset(&set, SIGBUS);
    sigdelset(&set, SIGILL);
    sigdelset(&set, SIGFPE);
    sigdelset(&set, SIGTRAP);
    pthread_sigmask(SIG_BLOCK, &set, old);
}

void mote__os_sigpipe_block(sigset_t *old)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, old);
}

void mote__os_sigpipe_restore(const sigset_t *old)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    struct timespec zero = {0, 0};
    while (sigtimedwait(&set, NULL, &zero) == SIGPIPE)
        ;
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

int mote__os_thread_start(void *(*fn)(void *), void *arg, size_t stack_size)
{
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t t;
    sigfillset(&all);
    /* The new thread inherits this mask: it never runs a program's
     * handler, and a SIGSEGV in it is still delivered (synchronous faults
     * ignore the mask). */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (stack_size)
        pthread_attr_setstacksize(&attr, stack_size);
    int r = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return -r;
}

void mote__os_thread_name(const char *name)
{
    prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
}

int mote__os_gettid(void) { return (int)syscall(SYS_gettid); }
