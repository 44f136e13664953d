/*
 * runcache.c - each thread's cache of freed large blocks of up to
 * HEAP_RUNCACHE_SLICES slices (heap_runcache in internal.h): a block freed
 * on a thread waits there for that thread's next malloc of as many slices,
 * which takes it without the arena lock.  Any thread may keep any large
 * block: they have no owner.
 *
 * Invariants:
 *   - a kept block is a large page with used 0 (so a second free of it is
 *     caught, as for any large block), that asked no alignment past 64
 *     bytes (a take gives it the cache colour of its new size), still
 *     counted in the arena's large in-use bytes (the stats subtract what
 *     the caches keep);
 *   - pg[0..n) is oldest first; slices is the sum of their slices, at most
 *     HEAP_RUNCACHE_MAX; put_ms is when the newest came in.
 * Locking: busy is a try-lock, never waited for.  The owner takes it for
 * each take or put; the scavenger takes it to empty a cache whose newest
 * block is as old as the decay period.  Whoever finds it taken does without
 * the cache (the owner goes to the arena; the scavenger looks again later).
 * The arena lock is taken only after busy is released.
 */
#include <string.h>

#include "heap/internal.h"
#include "os/os.h"

_Static_assert(HEAP_RUNCACHE_MAX / 2 >= HEAP_RUNCACHE_SLICES,
               "a cache emptied to half its slices has room for any block");

static inline bool runcache_lock(heap_runcache *rc)
{
    return XCHG(&rc->busy, 1, ACQUIRE) == 0;
}

static inline void runcache_unlock(heap_runcache *rc) { STORE(&rc->busy, 0, RELEASE); }

heap_page *mote__runcache_take(heap_tcache *h, uint32_t slices, size_t size)
{
    heap_runcache *rc = &h->runs;
    if (!LOAD(&rc->slices, RELAXED) || !runcache_lock(rc))
        return NULL;
    heap_page *pg = NULL;
    uint32_t seq = 0;
    for (uint32_t i = rc->n; i-- > 0;) { /* newest first: the warmest */
        if (rc->pg[i]->slices != slices)
            continue;
        pg = rc->pg[i];
        rc->n--;
        memmove(&rc->pg[i], &rc->pg[i + 1], (rc->n - i) * sizeof rc->pg[0]);
        STORE(&rc->slices, LOAD(&rc->slices, RELAXED) - slices, RELAXED);
        seq = rc->colour++;
        break;
    }
    runcache_unlock(rc);
    if (pg) {
        mote__assert(pg->kind == HEAP_PAGE_LARGE && !page_used(pg) && !pg->aligned);
        page_used_set(pg, 1);
        pg->zeroed = 0;
        mote__arena_large_place(pg, size, seq); /* its room may differ from the last */
    }
    return pg;
}

bool mote__runcache_put(heap_tcache *h, heap_page *pg)
{
    heap_runcache *rc = &h->runs;
    mote__assert(pg->kind == HEAP_PAGE_LARGE && page_used(pg) == 1);
    if (h == &mote__heap_tcache_empty || pg->slices > HEAP_RUNCACHE_SLICES ||
        pg->aligned || mote__arena_limited() || !runcache_lock(rc))
        return false;
    /* Room first: the oldest go back to the arena (after busy is dropped),
     * half the cache at a time, so a burst of frees takes the arena lock
     * once per few blocks, not for each (256 blocks of 100 KiB allocated,
     * then freed, 2,000 times: 0.051 s one at a time, 0.044 s so). */
    heap_page *out[HEAP_RUNCACHE_SLOTS];
    uint32_t nout = 0, held = LOAD(&rc->slices, RELAXED);
    bool full = rc->n == HEAP_RUNCACHE_SLOTS || held + pg->slices > HEAP_RUNCACHE_MAX;
    while (full && (rc->n > HEAP_RUNCACHE_SLOTS / 2 ||
                    held + pg->slices > HEAP_RUNCACHE_MAX / 2)) {
        out[nout] = rc->pg[nout];
        held -= out[nout++]->slices;
        rc->n--;
    }
    if (nout)
        memmove(&rc->pg[0], &rc->pg[nout], rc->n * sizeof rc->pg[0]);
    bool was_empty = held == 0;
    page_used_set(pg, 0);
    rc->pg[rc->n++] = pg;
    STORE(&rc->slices, held + pg->slices, RELAXED);
    uint32_t now = mote__os_coarse_ms();
    STORE(&rc->put_ms, now, RELAXED);
    runcache_unlock(rc);
    if (nout)
        mote__arena_large_free_kept(out, nout, now);
    if (was_empty) /* the scavenger takes them back at the decay period */
        mote__scavenger_kick();
    return true;
}

/* Takes every kept block out of rc (busy held); returns how many. */
static uint32_t runcache_empty(heap_runcache *rc, heap_page **out)
{
    uint32_t n = rc->n;
    memcpy(out, rc->pg, n * sizeof rc->pg[0]);
    rc->n = 0;
    STORE(&rc->slices, 0, RELAXED);
    return n;
}

void mote__runcache_flush(heap_tcache *h)
{
    heap_runcache *rc = &h->runs;
    heap_page *out[HEAP_RUNCACHE_SLOTS];
    if (!LOAD(&rc->slices, RELAXED) || !runcache_lock(rc))
        return; /* (the scavenger has it: it is emptying it) */
    uint32_t since = LOAD(&rc->put_ms, RELAXED), n = runcache_empty(rc, out);
    runcache_unlock(rc);
    if (n)
        mote__arena_large_free_kept(out, n, since);
}

long mote__runcache_scavenge(uint32_t decay_ms)
{
    long next = -1;
    uint32_t now = mote__os_coarse_ms();
    for (heap_tcache *h = mote__tcache_all(); h; h = h->all_next) {
        heap_runcache *rc = &h->runs;
        if (!LOAD(&rc->slices, RELAXED))
            continue;
        uint32_t age = now - LOAD(&rc->put_ms, RELAXED);
        long wait = age < decay_ms ? (long)(decay_ms - age) : 0;
        heap_page *out[HEAP_RUNCACHE_SLOTS];
        uint32_t n = 0, since = 0;
        if (wait == 0) {
            if (runcache_lock(rc)) {
                /* its owner may have put a block in since the look above */
                since = LOAD(&rc->put_ms, RELAXED);
                if (now - since >= decay_ms)
                    n = runcache_empty(rc, out);
                runcache_unlock(rc);
            }
            if (n) /* free since the newest came in: due in the arena too */
                mote__arena_large_free_kept(out, n, since);
            else
                wait = 10; /* busy, or refilled: look again soon */
        }
        if (wait && (next < 0 || wait < next))
            next = wait;
    }
    return next;
}

uint64_t mote__runcache_bytes(void)
{
    uint64_t slices = 0;
    for (heap_tcache *h = mote__tcache_all(); h; h = h->all_next)
        slices += LOAD(&h->runs.slices, RELAXED);
    return slices << HEAP_SLICE_SHIFT;
}
