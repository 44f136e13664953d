/*
 * scavenger.c - the background thread that gives memory back to the OS.
 * Started lazily, the first time a page goes back to the arena.  It wakes
 * when the oldest dirty free slice reaches the decay period
 * (MOTE_MALLOC_DECAY_MS), releases everything that old with MADV_DONTNEED
 * and sleeps again on a futex.  With nothing dirty it sleeps without a
 * timeout (mote__scavenger_idle) until mote__arena_page_free() wakes it: an idle
 * process costs 0% CPU.  It also empties the caches of exited threads when a
 * remote free lands in one (mote__scavenger_kick).  Its signals are blocked, so
 * it never runs a program's signal handler.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>

#include "heap/internal.h"

uint64_t mote__scavenger_gen; /* arena lock */
int mote__scavenger_idle;     /* arena lock */
static _Atomic int scav_state; /* 0 not started, 1 running or starting,
                                  2 could not start: scavenge inline */
static _Atomic uint32_t scav_inline_last; /* ms, state 2 */
static _Atomic int scav_seq;   /* futex word: bumped to wake the thread */
static _Atomic int scav_dead;  /* dead caches have notified pages */

static void scavenger_wake(void)
{
    atomic_fetch_add_explicit(&scav_seq, 1, memory_order_release);
    mote__heap_futex_wake(&scav_seq, 1);
}

void mote__scavenger_note_dirty(void)
{
    mote__scavenger_gen++;
    if (mote__scavenger_idle) {
        mote__scavenger_idle = 0;
        scavenger_wake();
    }
}

void mote__scavenger_kick(void)
{
    atomic_store_explicit(&scav_dead, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&scav_state, memory_order_acquire) == 1)
        scavenger_wake();
    else
        mote__scavenger_ensure();
}

static void *scavenger_main(void *arg)
{
    (void)arg;
    prctl(PR_SET_NAME, "mote-scavenger", 0, 0, 0);
    for (;;) {
        int seq = atomic_load_explicit(&scav_seq, memory_order_acquire);
        if (atomic_exchange_explicit(&scav_dead, 0, memory_order_seq_cst))
            mote__tcache_collect_dead();
        long next = mote__arena_scavenge(mote__heap_cfg.decay_ms, true);
        if (next == 0)
            continue;
        /* Sleep at least 10 ms: releases are batched, not one slice each. */
        if (next > 0 && next < 10)
            next = 10;
        mote__heap_futex_wait(&scav_seq, seq, next);
    }
    return NULL;
}

/* No thread (pthread_create failed: thread limit, seccomp...): the frees
 * that give pages back do the scavenger's work, at most once per period. */
static void scavenger_inline(void)
{
    uint32_t now = mote__heap_now_ms(), last = atomic_load_explicit(&scav_inline_last, memory_order_relaxed);
    uint32_t period = mote__heap_cfg.decay_ms > 10 ? mote__heap_cfg.decay_ms / 2 : 5;
    if (now - last < period || !atomic_compare_exchange_strong_explicit(
                                   &scav_inline_last, &last, now, memory_order_relaxed,
                                   memory_order_relaxed))
        return;
    if (atomic_exchange_explicit(&scav_dead, 0, memory_order_seq_cst))
        mote__tcache_collect_dead();
    mote__arena_scavenge(mote__heap_cfg.decay_ms, false);
}

void mote__scavenger_ensure(void)
{
    int st = atomic_load_explicit(&scav_state, memory_order_relaxed);
    if (HEAP_LIKELY(st == 1))
        return;
    if (st == 2) {
        scavenger_inline();
        return;
    }
    int z = 0;
    if (!atomic_compare_exchange_strong_explicit(&scav_state, &z, 1, memory_order_acq_rel,
                                                 memory_order_relaxed))
        return;
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t t;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 128 * 1024);
    int r = pthread_create(&t, &attr, scavenger_main, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        mote__heap_write_err("mote: cannot start the heap scavenger thread; free pages are "
                       "returned on later frees instead\n");
        atomic_store_explicit(&scav_state, 2, memory_order_release);
    }
}

#if defined(__SANITIZE_THREAD__)
#define SCAV_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SCAV_TSAN 1
#endif
#endif

void mote__scavenger_fork_child(void)
{
    /* The thread did not survive the fork; the next freed page restarts it
     * (except under TSan, which cannot start threads in a fork child of a
     * threaded process: there the child goes without a scavenger). */
#ifndef SCAV_TSAN
    atomic_store_explicit(&scav_state, 0, memory_order_relaxed);
#endif
    mote__scavenger_idle = 0;
}
