/*
 * arena.c - the process-wide page heap: segments and their slice runs,
 * large blocks (one block per run), huge blocks (their own mapping), the
 * segment map, decommit of old free slices, and the memory limit.
 *
 * Invariants (all under mote__heap_arena_lock unless noted):
 *   - a slice is either in a page (free bit clear, map[] set), free
 *     (free bit set), or in transit to the OS (both clear; only while the
 *     scavenger madvises it without the lock; arena_transit counts them);
 *   - dirty bit set on a free slice: it may be resident; clear: released;
 *     slices in pages always have the dirty bit set;
 *   - since[i] is when free dirty slice i was freed (ms);
 *   - a segment with any free slice is on arena_avail (in_avail = 1);
 *   - mote__heap_segmap[u] is 1 for a small segment's unit, 2 + k for the unit of
 *     a huge block whose header is k units lower, else 0.  Written under
 *     the lock (small) or by the mapping's only user (huge).
 * Counters are atomics so metrics can read them without the lock.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "heap/internal.h"

_Atomic uint8_t mote__heap_segmap[HEAP_SEGMAP_LEN];
heap_lock mote__heap_arena_lock = HEAP_LOCK_INIT;

static heap_segment *arena_avail; /* segments with free slices */
static heap_segment *arena_all;   /* every small segment */
static uint32_t arena_nsegs_made;
static int arena_transit; /* scavenger batches out of the lock */

static _Atomic uint64_t st_mapped, st_released, st_large_inuse, st_huge_inuse, st_segments,
    st_huge_count, st_decommits, st_released_total;
static _Atomic uint64_t arena_limit;

#define RELAXED memory_order_relaxed
#define ADD(c, v) atomic_fetch_add_explicit(&(c), (v), RELAXED)
#define SUB(c, v) atomic_fetch_sub_explicit(&(c), (v), RELAXED)
#define LOAD(c) atomic_load_explicit(&(c), RELAXED)

static inline uint64_t run_bits(unsigned i, unsigned n)
{
    return (n >= 64 ? ~0ULL : ((1ULL << n) - 1)) << i;
}

/* Bit i set in the result: mask has n set bits starting at i. */
static inline uint64_t run_starts(uint64_t mask, unsigned n)
{
    unsigned len = 1;
    while (len < n && mask) {
        unsigned s = len < n - len ? len : n - len;
        mask &= mask >> s;
        len += s;
    }
    return mask;
}

static void avail_push(heap_segment *seg)
{
    if (seg->in_avail)
        return;
    seg->in_avail = 1;
    seg->prev = NULL;
    seg->next = arena_avail;
    if (arena_avail)
        arena_avail->prev = seg;
    arena_avail = seg;
}

static void avail_remove(heap_segment *seg)
{
    if (!seg->in_avail)
        return;
    seg->in_avail = 0;
    if (seg->prev)
        seg->prev->next = seg->next;
    else
        arena_avail = seg->next;
    if (seg->next)
        seg->next->prev = seg->prev;
    seg->next = seg->prev = NULL;
}

uint64_t mote__arena_committed(void)
{
    uint64_t m = LOAD(st_mapped), r = LOAD(st_released);
    return m > r ? m - r : 0;
}

/* Lock held.  Returns every dirty free slice to the OS, synchronously. */
static void arena_release_locked(void)
{
    for (heap_segment *seg = arena_avail; seg; seg = seg->next) {
        uint64_t m = seg->free_mask & seg->dirty_mask;
        while (m) {
            unsigned i = (unsigned)__builtin_ctzll(m);
            unsigned n = (unsigned)__builtin_ctzll(~(m >> i));
            mote__heap_os_decommit((uint8_t *)seg + ((size_t)i << HEAP_SLICE_SHIFT),
                             (size_t)n << HEAP_SLICE_SHIFT);
            uint64_t b = run_bits(i, n);
            seg->dirty_mask &= ~b;
            m &= ~b;
            ADD(st_released, (uint64_t)n << HEAP_SLICE_SHIFT);
            ADD(st_released_total, (uint64_t)n << HEAP_SLICE_SHIFT);
            ADD(st_decommits, 1);
        }
    }
}

/* Lock held.  May `bytes` more become committed?  Near the limit, first
 * returns everything free; past it, no. */
static bool arena_reserve(uint64_t bytes)
{
    uint64_t limit = LOAD(arena_limit);
    if (!limit)
        return true;
    uint64_t c = mote__arena_committed();
    if (c + bytes > limit - limit / 10) {
        arena_release_locked();
        c = mote__arena_committed();
    }
    return c + bytes <= limit;
}

int mote__arena_set_limit(uint64_t bytes)
{
    atomic_store_explicit(&arena_limit, bytes, RELAXED);
    if (bytes) {
        heap_lock_acquire(&mote__heap_arena_lock);
        arena_reserve(0);
        heap_lock_release(&mote__heap_arena_lock);
    }
    return 0;
}

static heap_segment *segment_new(void)
{
    if (!arena_reserve(HEAP_SLICE_SIZE))
        return NULL;
    heap_segment *seg = mote__heap_os_map(HEAP_SEG_SIZE, HEAP_SEG_SIZE, true);
    if (!seg)
        return NULL;
    /* Small blocks of many threads share a segment: a transparent huge page
     * here would make RSS jump by 2 MiB for one touched block. */
    madvise(seg, HEAP_SEG_SIZE, MADV_NOHUGEPAGE);
    _Static_assert(sizeof(heap_segment) <= HEAP_SLICE_SIZE, "segment header > slice");
    seg->magic = HEAP_SEG_MAGIC;
    seg->kind = HEAP_SEG_SMALL;
    seg->index = arena_nsegs_made++;
    seg->free_mask = ~1ULL;
    seg->dirty_mask = 1ULL;
    heap_segmap_set((uintptr_t)seg >> HEAP_SEG_SHIFT, 1);
    ADD(st_mapped, HEAP_SEG_SIZE);
    ADD(st_released, HEAP_SEG_SIZE - HEAP_SLICE_SIZE);
    ADD(st_segments, 1);
    avail_push(seg);
    seg->all_next = arena_all;
    if (arena_all)
        arena_all->all_prev = seg;
    arena_all = seg;
    return seg;
}

static void segment_unmap(heap_segment *seg)
{
    avail_remove(seg);
    if (seg->all_prev)
        seg->all_prev->all_next = seg->all_next;
    else
        arena_all = seg->all_next;
    if (seg->all_next)
        seg->all_next->all_prev = seg->all_prev;
    heap_segmap_set((uintptr_t)seg >> HEAP_SEG_SHIFT, 0);
    SUB(st_mapped, HEAP_SEG_SIZE);
    SUB(st_released, HEAP_SEG_SIZE - HEAP_SLICE_SIZE);
    SUB(st_segments, 1);
    seg->magic = 0;
    mote__heap_os_unmap(seg, HEAP_SEG_SIZE);
}

heap_page *mote__arena_page_alloc(uint32_t n, bool *zero)
{
    heap_segment *seg;
    uint64_t starts = 0;
    /* Warm (dirty) slices first: they cost no page faults. */
    for (seg = arena_avail; seg; seg = seg->next)
        if ((starts = run_starts(seg->free_mask & seg->dirty_mask, n)))
            break;
    if (!seg)
        for (seg = arena_avail; seg; seg = seg->next)
            if ((starts = run_starts(seg->free_mask, n)))
                break;
    if (!seg) {
        seg = segment_new();
        if (!seg)
            return NULL;
        starts = run_starts(seg->free_mask, n);
    }
    unsigned i = (unsigned)__builtin_ctzll(starts);
    uint64_t bits = run_bits(i, n);
    uint64_t clean = bits & ~seg->dirty_mask;
    if (clean) {
        uint64_t bytes = (uint64_t)__builtin_popcountll(clean) << HEAP_SLICE_SHIFT;
        if (!arena_reserve(bytes))
            return NULL;
        clean = bits & ~seg->dirty_mask; /* arena_reserve may have released */
        SUB(st_released, (uint64_t)__builtin_popcountll(clean) << HEAP_SLICE_SHIFT);
    }
    *zero = clean == bits;
    seg->free_mask &= ~bits;
    seg->dirty_mask |= bits;
    if (!seg->free_mask)
        avail_remove(seg);
    heap_page *pg = &seg->pages[i];
    memset(pg, 0, sizeof *pg);
    pg->start = (uint8_t *)seg + ((size_t)i << HEAP_SLICE_SHIFT);
    pg->slices = n;
    for (unsigned k = i; k < i + n; k++)
        seg->map[k] = pg;
    return pg;
}

void mote__arena_page_free(heap_page *pg)
{
    heap_segment *seg = heap_segment_of(pg->start);
    unsigned i = (unsigned)(((uintptr_t)pg->start >> HEAP_SLICE_SHIFT) & (HEAP_SLICES - 1));
    unsigned n = pg->slices;
    uint32_t now = mote__heap_now_ms();
    for (unsigned k = i; k < i + n; k++) {
        seg->map[k] = NULL;
        seg->since[k] = now;
    }
    pg->kind = HEAP_PAGE_FREE;
    seg->free_mask |= run_bits(i, n);
    avail_push(seg);
    mote__scavenger_note_dirty();
}

void *mote__arena_large_alloc(size_t size, size_t align)
{
    size_t extra = align > HEAP_SLICE_SIZE ? align - HEAP_SLICE_SIZE : 0;
    uint32_t n = (uint32_t)((size + extra + HEAP_SLICE_SIZE - 1) >> HEAP_SLICE_SHIFT);
    bool zero;
    heap_lock_acquire(&mote__heap_arena_lock);
    heap_page *pg = mote__arena_page_alloc(n, &zero);
    if (!pg) {
        heap_lock_release(&mote__heap_arena_lock);
        errno = ENOMEM;
        return NULL;
    }
    pg->kind = HEAP_PAGE_LARGE;
    page_used_set(pg, 1);
    pg->zeroed = zero;
    uintptr_t a = align > 16 ? align : 16;
    pg->first = (uint8_t *)(((uintptr_t)pg->start + a - 1) & ~(a - 1));
    pg->usable = (size_t)(pg->start + ((size_t)n << HEAP_SLICE_SHIFT) - pg->first);
    ADD(st_large_inuse, pg->usable);
    heap_lock_release(&mote__heap_arena_lock);
    return pg->first;
}

void mote__arena_large_free(heap_page *pg)
{
    heap_lock_acquire(&mote__heap_arena_lock);
    SUB(st_large_inuse, pg->usable);
    page_used_set(pg, 0);
    mote__arena_page_free(pg);
    heap_lock_release(&mote__heap_arena_lock);
    mote__scavenger_ensure();
}

void *mote__arena_huge_alloc(size_t size, size_t align)
{
    size_t a = align > HEAP_OS_PAGE ? align : HEAP_OS_PAGE;
    size_t hdr = (sizeof(heap_segment) + a - 1) & ~(a - 1);
    size_t total = hdr + size + HEAP_OS_PAGE - 1;
    if (total < size || (hdr >> HEAP_SEG_SHIFT) > 253) {
        errno = ENOMEM;
        return NULL;
    }
    total &= ~(HEAP_OS_PAGE - 1);
    if (LOAD(arena_limit)) {
        heap_lock_acquire(&mote__heap_arena_lock);
        bool ok = arena_reserve(total);
        heap_lock_release(&mote__heap_arena_lock);
        if (!ok) {
            errno = ENOMEM;
            return NULL;
        }
    }
    uint8_t *base = mote__heap_os_map(total, a > HEAP_SEG_SIZE ? a : HEAP_SEG_SIZE, false);
    if (!base) {
        errno = ENOMEM;
        return NULL;
    }
    heap_segment *seg = (heap_segment *)base;
    seg->magic = HEAP_SEG_MAGIC;
    seg->kind = HEAP_SEG_HUGE;
    seg->map_size = total;
    seg->map_base = base;
    heap_page *pg = &seg->pages[0];
    pg->kind = HEAP_PAGE_HUGE;
    page_used_set(pg, 1);
    pg->zeroed = 1;
    pg->start = base;
    pg->first = base + hdr;
    pg->usable = total - hdr;
    ADD(st_mapped, total);
    ADD(st_huge_inuse, pg->usable);
    ADD(st_huge_count, 1);
    heap_segmap_set((uintptr_t)pg->first >> HEAP_SEG_SHIFT, (uint8_t)(2 + (hdr >> HEAP_SEG_SHIFT)));
    return pg->first;
}

void mote__arena_huge_free(heap_segment *seg, const void *p)
{
    heap_page *pg = &seg->pages[0];
    if (seg->magic != HEAP_SEG_MAGIC || seg->kind != HEAP_SEG_HUGE || pg->first != p ||
        page_used(pg) != 1)
        mote__heap_invalid_free(p, "free");
    page_used_set(pg, 0);
    heap_segmap_set((uintptr_t)p >> HEAP_SEG_SHIFT, 0);
    SUB(st_mapped, seg->map_size);
    SUB(st_huge_inuse, pg->usable);
    SUB(st_huge_count, 1);
    seg->magic = 0;
    mote__heap_os_unmap(seg->map_base, seg->map_size);
}

long mote__arena_scavenge(uint32_t decay_ms, bool may_idle)
{
    enum { BATCH = 64 };
    heap_segment *segs[BATCH];
    uint64_t masks[BATCH];
    int nb = 0;
    long next = -1;
    bool more = false;

    heap_lock_acquire(&mote__heap_arena_lock);
    uint64_t gen0 = mote__scavenger_gen;
    uint32_t now = mote__heap_now_ms();
    for (heap_segment *seg = arena_avail; seg; seg = seg->next) {
        uint64_t m = seg->free_mask & seg->dirty_mask, rel = 0;
        while (m) {
            unsigned i = (unsigned)__builtin_ctzll(m);
            m &= m - 1;
            uint32_t age = now - seg->since[i];
            if (age >= decay_ms) {
                rel |= 1ULL << i;
            } else {
                long wait = (long)(decay_ms - age);
                if (next < 0 || wait < next)
                    next = wait;
            }
        }
        if (!rel)
            continue;
        if (nb == BATCH) {
            more = true;
            break;
        }
        seg->free_mask &= ~rel; /* in transit: nobody else may use them */
        segs[nb] = seg;
        masks[nb++] = rel;
    }
    arena_transit += nb;
    heap_lock_release(&mote__heap_arena_lock);

    uint64_t runs = 0;
    for (int k = 0; k < nb; k++) {
        uint64_t m = masks[k];
        while (m) {
            unsigned i = (unsigned)__builtin_ctzll(m);
            unsigned n = (unsigned)__builtin_ctzll(~(m >> i));
            mote__heap_os_decommit((uint8_t *)segs[k] + ((size_t)i << HEAP_SLICE_SHIFT),
                             (size_t)n << HEAP_SLICE_SHIFT);
            m &= ~run_bits(i, n);
            runs++;
        }
    }

    heap_lock_acquire(&mote__heap_arena_lock);
    arena_transit -= nb;
    for (int k = 0; k < nb; k++) {
        heap_segment *seg = segs[k];
        uint64_t bytes = (uint64_t)__builtin_popcountll(masks[k]) << HEAP_SLICE_SHIFT;
        seg->free_mask |= masks[k];
        seg->dirty_mask &= ~masks[k];
        ADD(st_released, bytes);
        ADD(st_released_total, bytes);
        /* A wholly free, wholly released segment goes back to the OS. */
        if (seg->free_mask == ~1ULL && !(seg->dirty_mask & ~1ULL))
            segment_unmap(seg);
    }
    ADD(st_decommits, runs);
    if (!more && next < 0 && may_idle) {
        if (mote__scavenger_gen == gen0)
            mote__scavenger_idle = 1; /* the next freed slice wakes us */
        else
            next = decay_ms;
    }
    heap_lock_release(&mote__heap_arena_lock);
    return more ? 0 : next;
}

void mote__arena_small_usage(heap_small_usage *u)
{
    memset(u, 0, sizeof *u);
    heap_lock_acquire(&mote__heap_arena_lock);
    for (heap_segment *seg = arena_all; seg; seg = seg->all_next) {
        uint64_t inpage = ~seg->free_mask & ~1ULL;
        while (inpage) {
            unsigned i = (unsigned)__builtin_ctzll(inpage);
            heap_page *pg = seg->map[i];
            if (pg && pg == &seg->pages[i]) {
                if (pg->kind == HEAP_PAGE_SMALL) {
                    uint32_t n = page_used(pg);
                    u->blocks[pg->cls] += n;
                    u->bytes[pg->cls] += (uint64_t)n * pg->bsize;
                    u->pages[pg->cls]++;
                }
                inpage &= ~(pg->slices >= 64 ? ~0ULL : (((1ULL << pg->slices) - 1) << i));
            } else {
                inpage &= inpage - 1; /* in transit to the OS, or inside a page */
            }
        }
    }
    heap_lock_release(&mote__heap_arena_lock);
}

void mote__arena_stats(heap_arena_stats *st)
{
    st->mapped = LOAD(st_mapped);
    st->released = LOAD(st_released);
    st->large_inuse = LOAD(st_large_inuse);
    st->huge_inuse = LOAD(st_huge_inuse);
    st->segments = LOAD(st_segments);
    st->huge_count = LOAD(st_huge_count);
    st->decommits = LOAD(st_decommits);
    st->released_total = LOAD(st_released_total);
}

void mote__arena_fork_prepare(void)
{
    heap_lock_acquire(&mote__heap_arena_lock);
    /* Slices the scavenger is madvising must be back before the fork, or
     * the child would never see them free again. */
    while (arena_transit) {
        heap_lock_release(&mote__heap_arena_lock);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        heap_lock_acquire(&mote__heap_arena_lock);
    }
}

void mote__arena_fork_parent(void)
{
    heap_lock_release(&mote__heap_arena_lock);
}

void mote__arena_fork_child(void)
{
    atomic_store_explicit(&mote__heap_arena_lock.v, 0, memory_order_release);
}
