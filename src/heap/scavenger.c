/*
 * scavenger.c - the background thread that gives memory back to the OS.
 * Started lazily, the first time a page or a big block goes back to the
 * arena.  Each round it takes in the inboxes of exited threads' caches and
 * frees the empty pages they kept once dead for the decay period
 * (tcache.c), then releases what the arena holds free for longer than the
 * decay period (MOTE_MALLOC_DECAY_MS: cached big blocks, dirty free slices)
 * with MADV_DONTNEED, and sleeps on a futex until the next of those is due.
 * With nothing waiting it sleeps without a timeout (scav_idle) until a
 * poke: an idle process costs 0% CPU.
 *
 * Pokes are cheap: an atomic increment of the futex word, and a wake only
 * when the thread sleeps without a timeout; a thread that sleeps with one
 * sees the work at its next round (at most the decay period later).  A
 * thread cache keeping a big block pokes only when the thread sleeps
 * without a timeout, which it does only after a heavy fence (asym.h) and a
 * last look at every cache.  The thread's signals are blocked, so it never
 * runs a program's signal handler.  It also writes the heap profiles
 * MOTE_HEAPPROFILE_SIGNAL asks for (profile.c): the handler sets a flag and
 * wakes it (mote__scavenger_wake_now), so no program thread stops for it.
 *
 * It must not keep the process alive: a process ends when its last thread
 * does, and a main thread that calls pthread_exit leaves the others to run
 * on.  Once the main thread has gone so, each thread exit wakes it, and it
 * looks (a few times, as the exiting thread finishes, then once a second)
 * whether it is the last live thread: then it ends the process as glibc's
 * last thread would, with exit(0).  Before, such a program never ended,
 * and the signals blocked here meant not even SIGTERM ended it.
 */

#include <stdlib.h>

#include "heap/internal.h"
#include "os/os.h"

static int scav_state;            /* 0 not started, 1 running or starting,
                                     2 could not start: scavenge inline */
static uint32_t scav_inline_last; /* ms, state 2 */
static int scav_seq;              /* futex word: bumped by every poke */
static int scav_idle;             /* 1 while sleeping with no timeout */
static int scav_leader_gone;      /* the main thread called pthread_exit */
static int scav_exits;            /* thread exits since then (atomic) */

/* Work appeared.  seq_cst with the thread's store of idle and load of seq:
 * either it sees the new seq and goes round again, or we see idle and
 * wake it. */
static void scavenger_poke(void)
{
    FETCH_ADD(&scav_seq, 1, SEQ_CST);
    if (LOAD(&scav_idle, SEQ_CST))
        mote__os_futex_wake(&scav_seq, 1);
}

void mote__scavenger_note_dirty(void) { scavenger_poke(); }

bool mote__scavenger_wake_now(void)
{
    if (LOAD(&scav_state, ACQUIRE) != 1)
        return false;
    FETCH_ADD(&scav_seq, 1, SEQ_CST);
    mote__os_futex_wake(&scav_seq, 1);
    return true;
}

void mote__scavenger_kick(void)
{
    if (LOAD(&scav_state, ACQUIRE) == 1)
        scavenger_poke();
    else
        mote__scavenger_ensure();
}

/* After the caller's store of what its cache keeps.  A thread that keeps
 * and reuses one big block would otherwise poke (a locked instruction) on
 * every free; the thread, before it sleeps for good, looks at every cache
 * after a heavy fence (asym.h): either it sees the block, or we see it
 * idle and wake it. */
void mote__scavenger_kick_kept(void)
{
    if (LOAD(&scav_state, ACQUIRE) != 1) {
        mote__scavenger_ensure();
        return;
    }
#ifdef HEAP_ASYM_STRICT
    scavenger_poke(); /* (a sanitizer models no fence: its seq_cst pair) */
#else
    heap_asym_light_fence();
    if (LOAD(&scav_idle, RELAXED))
        scavenger_poke();
#endif
}

static inline long min_wait(long a, long b)
{
    return a < 0 ? b : b < 0 ? a : a < b ? a : b;
}

void mote__scavenger_thread_exit(bool main_thread)
{
    if (main_thread)
        STORE(&scav_leader_gone, 1, SEQ_CST);
    if (LOAD(&scav_leader_gone, SEQ_CST)) {
        FETCH_ADD(&scav_exits, 1, SEQ_CST);
        mote__scavenger_wake_now();
    }
}

/* After the main thread's pthread_exit: ends the process if no other
 * thread lives; else how long until the next look (ms).  An exit wakes us
 * while its thread still runs (its cache's destructor), so each is
 * followed by looks 1, 2, 4 ... 512 ms apart; and a thread that never
 * allocated exits unseen, so one look a second follows for good (in such a
 * process only: a read of /proc, about 10 us). */
static long scavenger_last_thread(void)
{
    static int exits_seen, looks_left;
    int exits = LOAD(&scav_exits, SEQ_CST);
    if (exits != exits_seen) {
        exits_seen = exits;
        looks_left = 10;
    }
    if (mote__os_last_live_thread())
        exit(0);
    if (!looks_left)
        return 1000;
    return 1L << (10 - looks_left--);
}

static void *scavenger_main(void *arg)
{
    (void)arg;
    mote__os_thread_name("mote-scavenger");
    for (;;) {
        int seq = LOAD(&scav_seq, SEQ_CST);
        mote__prof_dump_pending(); /* MOTE_HEAPPROFILE_SIGNAL */
        uint32_t decay = mote__heap_cfg.decay_ms;
        long next = mote__tcache_collect_dead(false, decay);
        next = min_wait(next, mote__runcache_scavenge(decay));
        next = min_wait(next, mote__arena_scavenge(decay));
        if (next == 0)
            continue;
        /* At least 10 ms: releases are batched, not one slice each. */
        if (next > 0 && next < 10)
            next = 10;
        if (LOAD(&scav_leader_gone, RELAXED))
            next = min_wait(next, scavenger_last_thread());
        if (next > 0) {
            mote__os_futex_wait(&scav_seq, seq, next * 1000000);
            continue;
        }
        STORE(&scav_idle, 1, SEQ_CST);
        /* A cache may have kept a block after our look without poking
         * (mote__scavenger_kick_kept): the next round times it. */
        mote__heap_asym_heavy_fence();
        if (LOAD(&scav_seq, SEQ_CST) == seq && !mote__runcache_any())
            mote__os_futex_wait(&scav_seq, seq, -1);
        STORE(&scav_idle, 0, SEQ_CST);
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
    mote__prof_dump_pending(); /* (a signal that came while the start failed) */
    mote__tcache_collect_dead(false, mote__heap_cfg.decay_ms);
    mote__runcache_scavenge(mote__heap_cfg.decay_ms);
    mote__arena_scavenge(mote__heap_cfg.decay_ms);
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

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SCAV_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SCAV_SANITIZED 1
#endif
#endif

void mote__scavenger_fork_child(void)
{
    /* The thread did not survive the fork; the next freed page restarts it.
     * Under a sanitizer the child scavenges inline instead: TSan refuses
     * new threads in a fork child of a threaded process, and gcc 12's ASan
     * does not hold its own locks across a fork, so a child's thread could
     * wait for good on one a parent's thread held (its thread registry,
     * its allocator: 3 runs in 20 of test_heap_fork under load). */
#ifdef SCAV_SANITIZED
    STORE(&scav_state, 2, RELAXED);
#else
    STORE(&scav_state, 0, RELAXED);
#endif
    STORE(&scav_idle, 0, RELAXED);
    /* the thread that forked is the child's main thread, and alive */
    STORE(&scav_leader_gone, 0, RELAXED);
    /* the only thread: no cache is inside its lock (asym.h) */
    if (LOAD(&mote__heap_asym_light, RELAXED))
        mote__heap_asym_init();
}
