/*
 * monitor.c - the monitor thread of a run (monitor.h).
 *
 * Every MONITOR_PERIOD_NS while some worker is busy it samples each
 * worker's switch counter: a worker running a task (running != NULL) whose
 * counter has not moved for MONITOR_STALL_NS is stalled, by a task that
 * does not park or by a blocking system call (the thread's state in /proc
 * says which).  A stall is counted once; with MOTE_DEBUG=stalls it is
 * reported with the task's name and backtrace (taken on the stalled thread
 * by a SIGURG handler when it is on the CPU; a thread in the kernel is not
 * interrupted, its system call is named instead).  Idle workers are woken
 * so they take the stuck worker's unstarted tasks.
 *
 * When every worker has slept for MONITOR_DEEP_NS the monitor sleeps too,
 * until a worker wakes (mote__monitor_poke) or SIGQUIT asks for a dump: an
 * idle runtime costs no CPU.
 *
 * Reading a running task: the hazard protocol.  The monitor publishes the
 * task it is about to read in w->hazard, then re-reads w->running; if the
 * task is still there it cannot be freed before the hazard is cleared
 * (sched.c's sched_release_dead waits for it).
 */
#include "monitor.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backtrace.h"
#include "os/os.h"
#include "runtime.h"

#define rt                mote__rt
#define MONITOR_PERIOD_NS (2 * 1000000LL)
#define MONITOR_STALL_NS  (10 * 1000000LL)
#define MONITOR_DEEP_NS   (100 * 1000000LL)
#define MONITOR_SIGNAL    SIGURG

static struct {
    pthread_t thread;
    int started;
    int stop;        /* atomic */
    int word;        /* futex: bumped to wake the monitor */
    int deep;        /* atomic: sleeping until poked */
    int quit;        /* atomic: SIGQUIT asked for a dump */
    uint64_t stalls; /* atomic, all runs */
    struct sigaction prev_quit, prev_urg;
    bool urg_installed, quit_installed;
} mon;

uint64_t mote__monitor_stalls(void) { return LOAD(&mon.stalls, RELAXED); }

static void monitor_wake(void)
{
    FETCH_ADD(&mon.word, 1, SEQ_CST);
    mote__os_futex_wake(&mon.word, 1);
}

void mote__monitor_poke(void)
{
    if (__builtin_expect(LOAD(&mon.deep, RELAXED), 0) && XCHG(&mon.deep, 0, SEQ_CST))
        monitor_wake();
}

void mote__monitor_thread_init(worker *w) { w->tid = mote__os_gettid(); }

/* SIGURG on a stalled worker: take the running task's backtrace. */
static void monitor_urg(int sig, siginfo_t *si, void *ucv)
{
    worker *w = mote__worker_self;
    task *t = mote__current_task;
    if (!w || !t || si->si_code != SI_TKILL) {
        if (mon.prev_urg.sa_handler != SIG_DFL && mon.prev_urg.sa_handler != SIG_IGN)
            mote__os_signal_forward(sig, si, ucv, &mon.prev_urg);
        return;
    }
    arch_interrupted r = arch_interrupted_regs(ucv);
    w->stall_npcs = mote__backtrace_interrupted(t, r.ip, r.sp, r.fp, w->stall_pcs, 24);
    FETCH_ADD(&w->stall_seq, 1, RELEASE);
}

static void monitor_quit(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)si, (void)uc;
    STORE(&mon.quit, 1, SEQ_CST);
    monitor_wake(); /* a futex system call: async-signal-safe */
}

static void monitor_report(worker *w, int64_t for_ns)
{
    long nr;
    char st = mote__os_thread_state(w->tid, &nr);
    /* A thread stuck in blocking calls is runnable between them, and on a
     * loaded machine for milliseconds after each wake-up: one look can
     * land there (seen: a worker in 20 ms sleeps reported as running, in a
     * TSan suite beside a busy one).  A task that does not park is never
     * anything else, so look again for up to MONITOR_STALL_NS. */
    for (int64_t t0 = mote__os_now_ns();
         st == 'R' && mote__os_now_ns() - t0 < MONITOR_STALL_NS;) {
        usleep(500);
        st = mote__os_thread_state(w->tid, &nr);
    }
    task *t = LOAD(&w->running, SEQ_CST);
    if (!t)
        return;
    STORE(&w->hazard, t, SEQ_CST);
    if (LOAD(&w->running, SEQ_CST) != t) {
        STORE(&w->hazard, NULL, SEQ_CST);
        return;
    }
    char name[128], sym[128];
    uint64_t id = t->id;
    snprintf(name, sizeof name, "%s", mote__task_display_name(t, sym, sizeof sym));
    int npcs = 0;
    uintptr_t pcs[24];
    if (st == 'R') {
        uint32_t seq = LOAD(&w->stall_seq, ACQUIRE);
        pthread_kill(w->thread, MONITOR_SIGNAL);
        /* The handler runs when the thread next gets a CPU, which on a
         * loaded machine can take tens of ms (seen: 10 ms was not enough
         * in 1 of 5000 runs beside a busy suite); stop early once the task
         * has moved on, since then it was not stalled any more. */
        for (int i = 0; i < 1000 && LOAD(&w->stall_seq, ACQUIRE) == seq &&
                        LOAD(&w->running, SEQ_CST) == t;
             i++)
            usleep(200);
        if (LOAD(&w->stall_seq, ACQUIRE) != seq) {
            npcs = w->stall_npcs;
            memcpy(pcs, w->stall_pcs, sizeof pcs);
        }
    }
    STORE(&w->hazard, NULL, SEQ_CST);
    if (st == 'R')
        fprintf(stderr,
                "mote: stall: task %llu (%s) has run %lld ms without parking, on worker "
                "%d\n",
                (unsigned long long)id, name, (long long)(for_ns / 1000000), w->index);
    else
        fprintf(stderr,
                "mote: stall: task %llu (%s) has been in a blocking system call (#%ld) "
                "for %lld ms, blocking worker %d\n",
                (unsigned long long)id, name, nr, (long long)(for_ns / 1000000),
                w->index);
    if (npcs)
        mote__backtrace_print_pcs(stderr, pcs, npcs, "      ");
    else if (st == 'R')
        fprintf(stderr, "      (no backtrace: the task moved on)\n");
    fflush(stderr);
}

typedef struct sample {
    uint64_t switches;
    int64_t since;
    bool reported;
} sample;

static void *monitor_main(void *arg)
{
    (void)arg;
    mote__os_thread_name("mote-monitor");
    int n = rt.nworkers;
    sample smp[n]; /* n <= 1024 */
    memset(smp, 0, sizeof smp);
    int64_t idle_since = 0;
    while (!LOAD(&mon.stop, ACQUIRE)) {
        int seq = LOAD(&mon.word, SEQ_CST);
        if (XCHG(&mon.quit, 0, SEQ_CST))
            mote_tasks_dump(2);
        int64_t now = mote__os_now_ns();
        bool busy = false;
        for (int i = 0; i < n; i++) {
            worker *w = &rt.w[i];
            uint64_t sw = LOAD(&w->switches, RELAXED);
            bool on_task = LOAD(&w->running, RELAXED) != NULL;
            if (LOAD(&w->sleeping, RELAXED) == 0)
                busy = true;
            if (!on_task || sw != smp[i].switches) {
                smp[i] = (sample){sw, now, false};
                continue;
            }
            if (!smp[i].reported && now - smp[i].since >= MONITOR_STALL_NS) {
                smp[i].reported = true;
                FETCH_ADD(&mon.stalls, 1, RELAXED);
                /* Its unstarted tasks can run elsewhere: wake a thief. */
                mote__sched_wake_idle(w);
                if (rt.cfg.debug_stalls)
                    monitor_report(w, now - smp[i].since);
            }
        }
        int64_t wait = MONITOR_PERIOD_NS;
        if (busy) {
            idle_since = 0;
        } else if (!idle_since) {
            idle_since = now;
        } else if (now - idle_since >= MONITOR_DEEP_NS) {
            STORE(&mon.deep, 1, SEQ_CST);
            /* a worker that woke in between has no reason to poke: look */
            bool all_asleep = true;
            for (int i = 0; i < n; i++)
                all_asleep &= LOAD(&rt.w[i].sleeping, SEQ_CST) != 0;
            if (all_asleep)
                wait = -1;
            else
                STORE(&mon.deep, 0, SEQ_CST);
        }
        mote__os_futex_wait(&mon.word, seq, wait);
        STORE(&mon.deep, 0, SEQ_CST);
    }
    return NULL;
}

int mote__monitor_start(void)
{
    STORE(&mon.stop, 0, RELAXED);
    STORE(&mon.deep, 0, RELAXED);
    if (rt.cfg.debug_stalls && !mon.urg_installed)
        mon.urg_installed =
            mote__os_signal_install(MONITOR_SIGNAL, monitor_urg, &mon.prev_urg) == 0;
    if (rt.cfg.sigquit_dump && !mon.quit_installed)
        mon.quit_installed =
            mote__os_signal_install(SIGQUIT, monitor_quit, &mon.prev_quit) == 0;
    /* The monitor must never run a program's signal handler. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pthread_create(&mon.thread, NULL, monitor_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    mon.started = r == 0;
    return -r;
}

void mote__monitor_stop(void)
{
    if (mon.started) {
        STORE(&mon.stop, 1, RELEASE);
        monitor_wake();
        pthread_join(mon.thread, NULL);
        mon.started = 0;
    }
    if (mon.quit_installed) {
        mote__os_signal_restore(SIGQUIT, &mon.prev_quit);
        mon.quit_installed = false;
    }
    if (mon.urg_installed) {
        mote__os_signal_restore(MONITOR_SIGNAL, &mon.prev_urg);
        mon.urg_installed = false;
    }
}
