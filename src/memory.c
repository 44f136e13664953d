/*
 * memory.c - the runtime's memory policy: when a worker trims its stacks,
 * MOTE_MEMLIMIT (the process RSS, re-read at most every 10 ms; within 10% of
 * the limit everything free goes back, past it mote_go fails, and the
 * heap's limit is what the rest of the process leaves of it), and
 * mote_mem_release, which gives back the heap's free pages and asks every
 * worker to trim all its parked tasks and its whole stack pool.
 *
 * Each worker trims only its own stacks (only it may touch them), so a
 * release is a request: an epoch every worker compares at its next trim
 * check, with the sleepers woken to act at once.  So is the heap's part:
 * only a thread may write its own heap cache's pages.
 *
 * A block freed on one worker goes home to the heap cache of the worker
 * that allocated it, to be taken in at that worker's next malloc slow
 * path.  A worker that sleeps takes none: so before it sleeps it settles
 * its own frees in flight, and wakes the sleepers whose caches frees wait
 * for.  (A thawed task's stack image, allocated on the worker that froze
 * it and freed on another, kept 900 MB resident after 200,000 frozen
 * tasks exited, until the run ended; mote_mem_release did not reach it.)
 */
#include "heap/heap.h"
#include "os/os.h"
#include "runtime.h"

#define rt             mote__rt
#define MEMORY_POLL_NS (10 * 1000000)

uint64_t mote__memory_used(bool force)
{
    int64_t now = mote__os_now_ns(), last = LOAD(&rt.mem_checked, RELAXED);
    if (force || now - last > MEMORY_POLL_NS) {
        if (force || CAS(&rt.mem_checked, &last, now, RELAXED)) {
            uint64_t used = mote__os_rss_bytes();
            STORE(&rt.mem_used, used, RELAXED);
            uint64_t lim = LOAD(&rt.memlimit, RELAXED);
            /* The heap's share of the limit: what the rest holds is off
             * it (its committed bytes bound what it has resident). */
            if (lim) {
                uint64_t heap = mote__heap_committed_bytes();
                mote__heap_limit_share(lim, used > heap ? used - heap : 0);
            }
            int was = LOAD(&rt.pressure, RELAXED);
            int now_p = lim && used >= lim - lim / 10;
            STORE(&rt.pressure, now_p, RELAXED);
            if (now_p && !was)
                mote_mem_release(); /* once per episode */
            return used;
        }
    }
    return LOAD(&rt.mem_used, RELAXED);
}

/* (A mote_mem_release not yet acted on is due too: the scheduler's chores
 * check looks at the release epoch itself, at every pick.) */
bool mote__memory_trim_due(worker *w, int64_t now)
{
    if (rt.cfg.memlimit && (mote__memory_used(false), LOAD(&rt.pressure, RELAXED)))
        return true;
    return now >= w->trim.next || mote__trim_orphans_due(&w->trim);
}

void mote__memory_trim(worker *w, int64_t now)
{
    bool force = false;
    if (rt.cfg.memlimit) {
        mote__memory_used(false);
        force = LOAD(&rt.pressure, RELAXED);
    }
    uint32_t epoch = LOAD(&rt.release_epoch, ACQUIRE);
    if (epoch != w->release_seen) {
        w->release_seen = epoch;
        force = true;
        mote__heap_release_own();
    }
    if (force || now >= w->trim.next || mote__trim_orphans_due(&w->trim))
        mote__trim_run(&w->trim, &w->stacks, w->current, now, force);
}

void mote__memory_idle(worker *w)
{
    mote__heap_thread_idle();
    if (!LOAD(&w->heap_cache, RELAXED))
        STORE(&w->heap_cache, mote__heap_thread_cache(), RELAXED);
    for (int i = 0; i < rt.nworkers; i++) {
        worker *v = &rt.w[i];
        if (v != w && LOAD(&v->sleeping, RELAXED) &&
            mote__heap_frees_waiting(LOAD(&v->heap_cache, RELAXED)))
            mote__sched_wake(v);
    }
}

bool mote__memory_frees_waiting(worker *w)
{
    return mote__heap_frees_waiting(LOAD(&w->heap_cache, RELAXED));
}

void mote_mem_release(void)
{
    mote__heap_release_all();
    pthread_rwlock_rdlock(&rt.ext_lock);
    worker *ws = LOAD(&rt.w, ACQUIRE);
    if (ws) {
        FETCH_ADD(&rt.release_epoch, 1, SEQ_CST); /* (before the look at sleeping) */
        for (int i = 0; i < rt.nworkers; i++)
            mote__sched_wake(&ws[i]);
    }
    pthread_rwlock_unlock(&rt.ext_lock);
}
