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

#include "heap/internal.h"
#include "os/os.h"

uint64_t mote__scavenger_gen;     /* arena lock */
int mote__scavenger_idle;         /* arena lock */
static int scav_state;            /* 0 not started, 1 running or starting,
                                  2 could not start: scavenge inline */
static uint32_t scav_inline_last; /* ms, state 2 */
static int scav_seq;              /* futex word: bumped to wake the thread */
static int scav_dead;             /* dead caches have notified pages */

static void scavenger_wake(void)
{
    FETCH_ADD(&scav_seq, 1, RELEASE);
    mote__os_futex_wake(&scav_seq, 1);
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
    STORE(&scav_dead, 1, SEQ_CST);
    if (LOAD(&scav_state, ACQUIRE) == 1)
        scavenger_wake();
    else
        mote__scavenger_ensure();
}

static void *scavenger_main(void *arg)
{
    (void)arg;
    mote__os_thread_name("mote-scavenger");
    for (;;) {
        int seq = LOAD(&scav_seq, ACQUIRE);
        if (XCHG(&scav_dead, 0, SEQ_CST))
            mote__tcache_collect_dead();
        long next = mote__arena_scavenge(mote__heap_cfg.decay_ms, true);
        if (next == 0)
            continue;
        /* Sleep at least 10 ms: releases are batched, not one slice each. */
        if (next > 0 && next < 10)
            next = 10;
        mote__os_futex_wait(&scav_seq, seq, next < 0 ? -1 : next * 1000000);
    }
    return NULL;
}

/* No thread (pthread_create failed: thread limit, seccomp...): the frees
 * that give pages back do the scavenger's work, at most once per period. */
static void scavenger_inline(void)
{
    uint32_t now = mote__os_coarse_ms(), last = LOAD(&scav_inline_last, RELAXED);
    uint32_t period = mote__heap_cfg.decay_ms > 10 ? mote__heap_cfg.decay_ms / 2 : 5;
    if (now - last < period || !CAS(&scav_inline_last, &last, now, RELAXED))
        return;
    if (XCHG(&scav_dead, 0, SEQ_CST))
        mote__tcache_collect_dead();
    mote__arena_scavenge(mote__heap_cfg.decay_ms, false);
}

void mote__scavenger_ensure(void)
{
    int st = LOAD(&scav_state, RELAXED);
    if (HEAP_LIKELY(st == 1))
        return;
    if (st == 2) {
        scavenger_inline();
        return;
    }
    int z = 0;
    if (!CAS(&scav_state, &z, 1, ACQ_REL))
        return;
    int r = mote__os_thread_start(scavenger_main, NULL, 128 * 1024);
    if (r != 0) {
        mote__os_write_err("mote: cannot start the heap scavenger thread; free pages are "
                           "returned on later frees instead\n");
        STORE(&scav_state, 2, RELEASE);
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
    STORE(&scav_state, 0, RELAXED);
#endif
    mote__scavenger_idle = 0;
}
