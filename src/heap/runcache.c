/*
 * runcache.c - each thread's cache of freed big blocks (heap_runcache in
 * internal.h): large blocks of up to HEAP_RUNCACHE_SLICES slices, and one
 * bigger block, large or huge.  A block freed on a thread waits there for
 * that thread's next malloc of as many slices (about as many bytes, for
 * the bigger one), which takes it without the arena lock and without a
 * locked instruction.  Any thread may keep any big block: they have no
 * owner.
 *
 * Invariants:
 *   - a kept block is a large or huge page with used 0 (so a second free
 *     of it is caught, as for any such block); it asked no alignment past
 *     64 bytes (a large one in pg[]: past 16), and a take gives it a new
 *     cache colour in the room it has (a large one in pg[] keeps its own
 *     unless taken within the last HEAP_RUNCACHE_RECENT takes, or its room
 *     no longer allows it); it is still counted in the arena's
 *     in-use bytes (the stats subtract what the caches keep), and a huge
 *     one keeps its place in the segment map;
 *   - pg[0..n) is oldest first; slices is the sum of their slices, at most
 *     HEAP_RUNCACHE_MAX; big_bytes is the bigger block's usable bytes (0:
 *     none) and big_kind its kind; puts counts every block put in;
 *   - large_grew and huge_grew are written by the owner only, after a take,
 *     outside the lock (the scavenger never writes them).
 * Age: a put reads no clock.  The scavenger, which looks at every cache
 * holding blocks at least 4 times a decay period, notes the time it first
 * saw the current count of puts (seen_ms): a cache whose count stayed for
 * the decay period is due, between 1 and 1.25 decay periods after its last
 * put.  (A put read the clock until 2026-12-05: three calls deep, its
 * stores filled the store buffer behind a program's writes that missed the
 * cache, and a 32-64 KiB malloc/free loop that writes its blocks' ends ran
 * 25% slower for it.)
 *
 * Locking: the cache's asym lock (asym.h), never waited for: the owner
 * takes it for each take or put with no locked instruction; the scavenger
 * takes it to empty a cache that is due, and pays for both with a
 * membarrier.  Whoever finds it taken does without the cache (the owner
 * goes to the arena; the scavenger looks again later).  Emptying other threads' caches (the scavenger, any thread's
 * mote_mem_release) holds scav_lock while it takes blocks out, as the
 * asymmetric lock keeps the owner out but not another emptier; the blocks
 * go to the arena after it is left.  The arena lock is taken only after a
 * cache's lock is left.
 */
#include <string.h>

#include "heap/internal.h"
#include "os/os.h"

_Static_assert(HEAP_RUNCACHE_MAX / 2 >= HEAP_RUNCACHE_SLICES,
               "a cache emptied to half its slices has room for any block");

static inline bool runcache_lock(heap_tcache *h) { return heap_asym_enter(&h->asym); }

static inline void runcache_unlock(heap_tcache *h) { heap_asym_leave(&h->asym); }

static inline bool runcache_holds(heap_runcache *rc)
{
    return LOAD(&rc->slices, RELAXED) || LOAD(&rc->big_bytes, RELAXED);
}

/* Lock left, something stored in rc: if it held nothing, the scavenger
 * must hear of it to take it back at the decay period. */
static inline void runcache_kept(bool was_empty)
{
    if (was_empty)
        mote__scavenger_kick_kept();
}

/* Owner only: a single writer, so no locked instruction. */
static inline void count_grew(uint64_t *counter, uint64_t grew)
{
    STORE(counter, LOAD(counter, RELAXED) + grew, RELAXED);
}

heap_page *mote__runcache_take(heap_tcache *h, uint32_t slices, size_t size)
{
    heap_runcache *rc = &h->runs;
    if (!LOAD(&rc->slices, RELAXED) || !runcache_lock(h))
        return NULL;
    heap_page *pg = NULL;
    uint32_t seq = 0;
    bool again = false;
    for (uint32_t i = rc->n; i-- > 0;) { /* newest first: the warmest */
        if (rc->pg[i]->slices != slices)
            continue;
        pg = rc->pg[i];
        rc->n--;
        if (i != rc->n) /* (mostly the newest: no call) */
            memmove(&rc->pg[i], &rc->pg[i + 1], (rc->n - i) * sizeof rc->pg[0]);
        STORE(&rc->slices, LOAD(&rc->slices, RELAXED) - slices, RELAXED);
        seq = rc->colour++;
        for (unsigned k = 0; k < HEAP_RUNCACHE_RECENT; k++)
            again |= rc->recent[k] == pg;
        rc->recent[seq % HEAP_RUNCACHE_RECENT] = pg;
        break;
    }
    runcache_unlock(h);
    if (pg) {
        mote__assert(pg->kind == HEAP_PAGE_LARGE && !page_used(pg) && !pg->aligned);
        page_used_set(pg, 1);
        pg->zeroed = 0;
        /* A block taken again within a few takes (a loop's) starts at a
         * new line each time, as heap_colour spreads them; one that
         * rested while others were taken keeps its line, if heap_colour
         * could have given it that line for this room (see
         * HEAP_RUNCACHE_RECENT). */
        size_t run = (size_t)pg->slices << HEAP_SLICE_SHIFT;
        size_t colour = (size_t)(pg->first - pg->start);
        if (again || !heap_colour_allowed(colour, run - size))
            colour = heap_colour(seq, run - size);
        count_grew(&rc->large_grew, mote__arena_large_place_at(pg, size, colour));
    }
    return pg;
}

bool mote__runcache_put(heap_tcache *h, heap_page *pg)
{
    heap_runcache *rc = &h->runs;
    mote__assert(pg->kind == HEAP_PAGE_LARGE && page_used(pg) == 1);
    if (h == &mote__heap_tcache_empty || pg->slices > HEAP_RUNCACHE_SLICES ||
        pg->aligned || mote__arena_limited() || !runcache_lock(h))
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
    bool was_empty = held == 0 && !rc->big;
    page_used_set(pg, 0);
    rc->pg[rc->n++] = pg;
    STORE(&rc->slices, held + pg->slices, RELAXED);
    STORE(&rc->puts, LOAD(&rc->puts, RELAXED) + 1, RELAXED);
    runcache_unlock(h);
    if (nout)
        mote__arena_large_free_kept(out, nout, mote__os_coarse_ms());
    runcache_kept(was_empty);
    return true;
}

/* A block kept for a request it exceeds by a third or more would keep that
 * much resident for nothing: the arena splits such blocks. */
static inline bool big_fits(uint64_t room, size_t size)
{
    return room >= size && room - size < room / 3;
}

/* The room a big block may start and end in. */
static inline uint64_t big_room(const heap_page *pg)
{
    return pg->kind == HEAP_PAGE_LARGE ? (uint64_t)pg->slices << HEAP_SLICE_SHIFT
                                       : mote__arena_huge_room(pg);
}

static void big_give_back(heap_page *pg, uint32_t since)
{
    if (pg->kind == HEAP_PAGE_LARGE)
        mote__arena_large_free_kept(&pg, 1, since);
    else
        mote__arena_huge_free_kept(pg, since);
}

heap_page *mote__runcache_take_big(heap_tcache *h, size_t size, size_t align)
{
    heap_runcache *rc = &h->runs;
    if (!LOAD(&rc->big_bytes, RELAXED) || !runcache_lock(h))
        return NULL;
    heap_page *pg = rc->big; /* (the scavenger may have taken it since the look) */
    rc->big = NULL;
    STORE(&rc->big_bytes, 0, RELAXED);
    uint32_t seq = rc->colour++;
    runcache_unlock(h);
    if (!pg)
        return NULL;
    mote__assert(!page_used(pg) && !pg->aligned);
    bool huge = pg->kind == HEAP_PAGE_HUGE;
    if (align > 64 || huge != (size > HEAP_LARGE_MAX) || !big_fits(big_room(pg), size)) {
        /* No worse than had we never kept it: the arena may cut it to
         * this request or grow it into it. */
        big_give_back(pg, mote__os_coarse_ms());
        return NULL;
    }
    page_used_set(pg, 1);
    pg->zeroed = 0;
    if (huge)
        count_grew(&rc->huge_grew, mote__arena_huge_place(pg, size, seq));
    else
        count_grew(&rc->large_grew, mote__arena_large_place(pg, size, seq));
    return pg;
}

bool mote__runcache_put_big(heap_tcache *h, heap_page *pg)
{
    heap_runcache *rc = &h->runs;
    mote__assert(page_used(pg) == 1);
    if (h == &mote__heap_tcache_empty || pg->usable > HEAP_RUNCACHE_BIG_MAX ||
        pg->aligned || LOAD(&rc->big_bytes, RELAXED) || mote__arena_limited() ||
        !runcache_lock(h))
        return false;
    if (rc->big) { /* (refilled by no one but us: only a stale look) */
        runcache_unlock(h);
        return false;
    }
    bool was_empty = !LOAD(&rc->slices, RELAXED);
    page_used_set(pg, 0);
    rc->big = pg;
    STORE(&rc->big_kind, pg->kind, RELAXED);
    STORE(&rc->big_bytes, pg->usable, RELAXED);
    STORE(&rc->puts, LOAD(&rc->puts, RELAXED) + 1, RELAXED);
    runcache_unlock(h);
    runcache_kept(was_empty);
    return true;
}

/* Takes every kept block out of rc (lock held): pg[] into out (returns
 * how many), the big one into *big. */
static uint32_t runcache_empty(heap_runcache *rc, heap_page **out, heap_page **big)
{
    uint32_t n = rc->n;
    memcpy(out, rc->pg, n * sizeof rc->pg[0]);
    rc->n = 0;
    STORE(&rc->slices, 0, RELAXED);
    *big = rc->big;
    rc->big = NULL;
    STORE(&rc->big_bytes, 0, RELAXED);
    /* a run of these that comes back through the arena has rested */
    memset(rc->recent, 0, sizeof rc->recent);
    return n;
}

static void runcache_give_back(heap_page **out, uint32_t n, heap_page *big,
                               uint32_t since)
{
    if (n)
        mote__arena_large_free_kept(out, n, since);
    if (big)
        big_give_back(big, since);
}

void mote__runcache_flush(heap_tcache *h)
{
    heap_runcache *rc = &h->runs;
    heap_page *out[HEAP_RUNCACHE_SLOTS], *big;
    if (!runcache_holds(rc) || !runcache_lock(h))
        return; /* (the scavenger has it: it is emptying it) */
    uint32_t n = runcache_empty(rc, out, &big);
    runcache_unlock(h);
    runcache_give_back(out, n, big, mote__os_coarse_ms());
}

/* Caches due, locked at once with one heavy fence. */
#define SCAV_BATCH 16

static heap_lock scav_lock = HEAP_LOCK_INIT;

void mote__runcache_fork_prepare(void) { heap_lock_acquire(&scav_lock); }
void mote__runcache_fork_parent(void) { heap_lock_release(&scav_lock); }
void mote__runcache_fork_child(void) { STORE(&scav_lock.v, 0, RELEASE); }

/* What one batch took out of the caches it emptied, given back to the
 * arena once scav_lock is left (the arena may call the scavenger's inline
 * pass, which empties caches too). */
typedef struct scav_out {
    heap_page *pg[HEAP_RUNCACHE_SLOTS], *big;
    uint32_t n, since;
} scav_out;

long mote__runcache_scavenge(uint32_t decay_ms)
{
    long next = -1;
    heap_tcache *h = mote__tcache_all();
    while (h) {
        heap_tcache *due[SCAV_BATCH];
        scav_out out[SCAV_BATCH];
        unsigned nd = 0;
        heap_lock_acquire(&scav_lock);
        uint32_t now = mote__os_coarse_ms();
        for (; h && nd < SCAV_BATCH; h = h->all_next) {
            heap_runcache *rc = &h->runs;
            if (!runcache_holds(rc))
                continue;
            uint32_t puts = LOAD(&rc->puts, RELAXED);
            long quarter = decay_ms >= 4 ? (long)(decay_ms / 4) : 1, wait;
            if (puts != rc->seen_puts && decay_ms) { /* put to since the last look */
                rc->seen_puts = puts;
                rc->seen_ms = now;
                wait = quarter; /* (see the top) */
            } else if (!decay_ms || now - rc->seen_ms >= decay_ms) {
                heap_asym_close(&h->asym);
                due[nd++] = h;
                continue;
            } else {
                wait = (long)(decay_ms - (now - rc->seen_ms));
                if (wait > quarter)
                    wait = quarter;
            }
            if (next < 0 || wait < next)
                next = wait;
        }
        if (nd)
            mote__heap_asym_heavy_fence();
        for (unsigned i = 0; i < nd; i++) {
            heap_runcache *rc = &due[i]->runs;
            scav_out *o = &out[i];
            o->n = 0;
            o->big = NULL;
            o->since = 0;
            if (heap_asym_won(&due[i]->asym)) {
                /* its owner may have put a block in since the look above;
                 * the blocks are free since it saw the count last change */
                o->since = decay_ms ? rc->seen_ms : now;
                if (!decay_ms || LOAD(&rc->puts, RELAXED) == rc->seen_puts)
                    o->n = runcache_empty(rc, o->pg, &o->big);
            }
            heap_asym_open(&due[i]->asym);
            if (!o->n && !o->big && (next < 0 || next > 10))
                next = 10; /* busy, or refilled: look again soon */
        }
        heap_lock_release(&scav_lock);
        /* free since the newest came in: due in the arena too */
        for (unsigned i = 0; i < nd; i++)
            runcache_give_back(out[i].pg, out[i].n, out[i].big, out[i].since);
    }
    return next;
}

bool mote__runcache_any(void)
{
    for (heap_tcache *h = mote__tcache_all(); h; h = h->all_next)
        if (runcache_holds(&h->runs))
            return true;
    return false;
}

void mote__runcache_totals(heap_runcache_totals *t)
{
    *t = (heap_runcache_totals){0};
    for (heap_tcache *h = mote__tcache_all(); h; h = h->all_next) {
        heap_runcache *rc = &h->runs;
        t->kept_large += (uint64_t)LOAD(&rc->slices, RELAXED) << HEAP_SLICE_SHIFT;
        uint64_t b = LOAD(&rc->big_bytes, RELAXED);
        if (LOAD(&rc->big_kind, RELAXED) == HEAP_PAGE_HUGE) {
            t->kept_huge += b;
            t->kept_huge_n += b != 0;
        } else {
            t->kept_large += b;
        }
        t->grew_large += LOAD(&rc->large_grew, RELAXED);
        t->grew_huge += LOAD(&rc->huge_grew, RELAXED);
    }
}
