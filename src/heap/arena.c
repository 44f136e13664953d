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
 *   - uses: a small segment serves pages of blocks (small and bitmap) or
 *     large blocks, never both, unless slices ran out (page_alloc); a wholly
 *     free segment may change its use.  Mixed, one-slice pages split the
 *     runs freed large blocks left, and the next large block took fresh
 *     slices beside as many warm ones in pieces (bench/malloc/churn, 8
 *     threads: peak RSS 28.6 -> 25.2 MiB, page faults 7.4k -> 6.6k);
 *   - mote__heap_segmap[u] is 1 for a small segment's unit, 2 + k for the unit of
 *     a huge block in use whose header is k units lower, else 0.  Written
 *     under the lock (small) or by the mapping's only user (huge);
 *   - guards: guard bit i set says slice i was the first slice of a large
 *     block freed since slice i was last released to the OS.  No page of
 *     blocks (small or bitmap) takes a guarded slice, nor a large page whose
 *     block may start past its first slice, so a second free of the large
 *     block finds a free slice, the inside of a large block, or a large
 *     block at its very address (as in any allocator), and never a small
 *     block that happens to start there (the defect the guards close: the
 *     freed run's first slice taken at once by glibc's calloc of a new
 *     thread's DTV).  A guard goes when a page starts at its slice, when
 *     the slice is released (the decay period), or when slices run out
 *     (guards_drop);
 *   - the cache (arena_cache, most recently freed first) holds freed huge
 *     mappings (segment-map entry cleared, used is 0), each stamped with
 *     cached_ms.  An entry leaves it when a request it can serve takes it,
 *     when it is older than the decay period (scavenger), when the cache is
 *     over its bounds (the oldest go first), or when the memory limit nears;
 *     leaving without reuse, it is unmapped.  Freed large blocks are not
 *     cached: their slices are free at once (guarded), so they merge with
 *     their free neighbours and serve any page; cached whole, they served
 *     only requests they held and their bytes pushed huge mappings out of
 *     the cache (bench/malloc/churn, 32 threads: 120-200 MiB unmapped and
 *     mapped afresh per run);
 *   - a cached mapping is split at a segment boundary when a hit needs less
 *     than it holds (cache_take_huge), and joins the cached mappings right
 *     below and above it when freed (cache_put): no two cached mappings
 *     touch.  So a mapping may span several VMAs (joined ones the kernel
 *     placed side by side) or share one with its neighbour, which mremap
 *     cannot resize: it shrinks by an munmap of its tail, grows in place
 *     only where the address space after it is free, and otherwise moves
 *     whole into a new mapping (huge_remap);
 *   - a large or huge block that asked no alignment past 64 bytes starts at
 *     a cache colour (heap_colour) in its run's first page, the colour_seq-th;
 *     its descriptor's first and usable say where, and aligned marks a large
 *     one that asked more.
 * Counters are atomics so metrics can read them without the lock.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "heap/internal.h"
#include "os/os.h"

uint8_t mote__heap_segmap[HEAP_SEGMAP_LEN];
heap_lock mote__heap_arena_lock = HEAP_LOCK_INIT;

static list arena_avail;    /* segments with free slices (avail_link) */
static list arena_all;      /* every small segment (all_link) */
static uint32_t colour_seq; /* coloured big blocks handed out (heap_colour) */

static inline heap_segment *avail_first(void)
{
    return arena_avail.head ? list_entry(arena_avail.head, heap_segment, avail_link)
                            : NULL;
}
static inline heap_segment *avail_next(const heap_segment *seg)
{
    return seg->avail_link.next
               ? list_entry(seg->avail_link.next, heap_segment, avail_link)
               : NULL;
}
static uint32_t arena_nsegs_made;
static int arena_transit; /* scavenger batches out of the lock */

static uint64_t st_mapped, st_released, st_large_inuse, st_huge_inuse, st_segments,
    st_huge_count, st_decommits, st_released_total;
static uint64_t arena_limit;

/* The cache of freed huge blocks (see above).  Bounds: at most
 * CACHE_MAX entries, and at most max(CACHE_MIN_BYTES, a quarter of the rest
 * of the heap's committed bytes). */
#define CACHE_MAX       64
#define CACHE_MIN_BYTES (64UL << 20)
static list arena_cache; /* heap_page.qlink, most recent first */
static uint32_t cache_count;
static uint64_t st_cache_bytes, st_cache_hits, st_cache_misses;
static uint64_t st_purged_total, st_purge_calls;
typedef struct cache_drop cache_drop;
static inline heap_page *cache_entry(list_node *n);
static void cache_evict(heap_page *pg, cache_drop *d);

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

/* Lock held.  A run of n free slices (dirty ones only if dirty_only; no
 * guarded one if avoid) in a segment of this use (any if HEAP_USE_ANY): the
 * shortest such run among the first FIT_SEGMENTS segments that have one,
 * its segment returned and its first slice's bit put in *start; NULL if no
 * segment has one.  First fit let one-slice pages split the long warm runs
 * that freed large blocks left, and the next large block took clean slices
 * (page faults, RSS) beside as many warm ones in pieces (bench/malloc/churn,
 * 8 threads, with exiting threads' empty bitmap pages freed: peak RSS 44 ->
 * 28 MiB, page faults 11.5k -> 7.2k).  The bound keeps a big heap's page
 * allocation from walking every segment. */
#define FIT_SEGMENTS 8
static heap_segment *fit_find(unsigned n, bool dirty_only, bool avoid, uint32_t use,
                              uint64_t *start)
{
    heap_segment *best = NULL;
    unsigned best_len = HEAP_SLICES + 1, best_at = 0, seen = 0;
    for (heap_segment *seg = avail_first(); seg && seen < FIT_SEGMENTS;
         seg = avail_next(seg)) {
        if (use != HEAP_USE_ANY && seg->use != use)
            continue;
        uint64_t m = seg->free_mask & (dirty_only ? seg->dirty_mask : ~0ULL);
        if (avoid)
            m &= ~seg->guard_mask;
        bool fits = false;
        while (m) {
            unsigned at = (unsigned)__builtin_ctzll(m);
            uint64_t past = ~(m >> at);
            unsigned len = past ? (unsigned)__builtin_ctzll(past) : 64 - at;
            if (len >= n) {
                fits = true;
                if (len < best_len) {
                    best = seg, best_len = len, best_at = at;
                    if (len == n)
                        goto done;
                }
            }
            m = at + len >= 64 ? 0 : m & (~0ULL << (at + len));
        }
        seen += fits;
    }
done:
    if (best)
        *start = 1ULL << best_at;
    return best;
}

/* Lock held.  The invariants of the file comment, for one segment (a
 * whole-structure check: MOTE_DEBUG 2). */
__attribute__((unused)) static bool segment_valid(const heap_segment *seg)
{
    if (seg->magic != HEAP_SEG_MAGIC || seg->kind != HEAP_SEG_SMALL ||
        (seg->use != HEAP_USE_PAGES && seg->use != HEAP_USE_LARGE) ||
        (seg->free_mask & 1))
        return false;
    for (unsigned i = 1; i < HEAP_SLICES;) {
        const heap_page *pg = seg->map[i];
        if ((seg->free_mask >> i & 1) || !pg) { /* free, or in transit */
            if (pg)
                return false;
            i++;
            continue;
        }
        if (pg != &seg->pages[i] || !pg->slices || i + pg->slices > HEAP_SLICES)
            return false;
        uint64_t run = run_bits(i, pg->slices);
        if ((seg->free_mask & run) || (seg->dirty_mask & run) != run)
            return false;
        if ((pg->kind == HEAP_PAGE_SMALL || pg->kind == HEAP_PAGE_BITMAP) &&
            (seg->guard_mask & run))
            return false;
        for (unsigned k = i; k < i + pg->slices; k++)
            if (seg->map[k] != pg)
                return false;
        i += pg->slices;
    }
    return true;
}

static void avail_push(heap_segment *seg)
{
    if (seg->in_avail)
        return;
    seg->in_avail = 1;
    list_push_front(&arena_avail, &seg->avail_link);
}

static void avail_remove(heap_segment *seg)
{
    if (!seg->in_avail)
        return;
    seg->in_avail = 0;
    list_remove(&arena_avail, &seg->avail_link);
}

uint64_t mote__arena_committed(void)
{
    uint64_t m = LOAD(&st_mapped, RELAXED), r = LOAD(&st_released, RELAXED);
    return m > r ? m - r : 0;
}

/* Lock held.  Returns every dirty free slice to the OS, synchronously. */
static void arena_release_locked(void)
{
    heap_page *pg;
    while ((pg = cache_entry(arena_cache.head)))
        cache_evict(pg, NULL);
    for (heap_segment *seg = avail_first(); seg; seg = avail_next(seg)) {
        uint64_t m = seg->free_mask & seg->dirty_mask;
        while (m) {
            unsigned i = (unsigned)__builtin_ctzll(m);
            unsigned n = (unsigned)__builtin_ctzll(~(m >> i));
            mote__os_decommit((uint8_t *)seg + ((size_t)i << HEAP_SLICE_SHIFT),
                              (size_t)n << HEAP_SLICE_SHIFT);
            uint64_t b = run_bits(i, n);
            seg->dirty_mask &= ~b;
            seg->guard_mask &= ~b;
            m &= ~b;
            FETCH_ADD(&st_released, (uint64_t)n << HEAP_SLICE_SHIFT, RELAXED);
            FETCH_ADD(&st_released_total, (uint64_t)n << HEAP_SLICE_SHIFT, RELAXED);
            FETCH_ADD(&st_decommits, 1, RELAXED);
        }
    }
}

static void segment_unmap(heap_segment *seg);

/* Lock held.  A mapping failed (the address space is out: RLIMIT_AS, or the
 * kernel's overcommit): everything free goes back to the OS now, not at
 * its decay, wholly free segments unmapped; true if any address space was
 * given back, for one more try.  (Without it, a program that freed all its
 * memory got ENOMEM for every big block until the decay period passed.) */
static bool arena_unmap_free(void)
{
    uint64_t mapped = LOAD(&st_mapped, RELAXED);
    arena_release_locked();
    heap_segment *next;
    for (heap_segment *seg = avail_first(); seg; seg = next) {
        next = avail_next(seg);
        if (seg->free_mask == ~1ULL) /* (slices in transit are not in it) */
            segment_unmap(seg);
    }
    return LOAD(&st_mapped, RELAXED) < mapped;
}

/* Lock held.  May `bytes` more become committed?  Near the limit, first
 * returns everything free; past it, no. */
static bool arena_reserve(uint64_t bytes)
{
    uint64_t limit = LOAD(&arena_limit, RELAXED);
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
    STORE(&arena_limit, bytes, RELAXED);
    if (bytes) {
        heap_lock_acquire(&mote__heap_arena_lock);
        arena_reserve(0);
        heap_lock_release(&mote__heap_arena_lock);
    }
    return 0;
}

static heap_segment *segment_new(uint32_t use)
{
    if (!arena_reserve(HEAP_SLICE_SIZE))
        return NULL;
    heap_segment *seg = mote__os_map_aligned(HEAP_SEG_SIZE, HEAP_SEG_SIZE, true);
    if (!seg)
        return NULL;
    /* Small blocks of many threads share a segment: a transparent huge page
     * here would make RSS jump by 2 MiB for one touched block. */
    mote__os_no_hugepages(seg, HEAP_SEG_SIZE);
    _Static_assert(sizeof(heap_segment) <= HEAP_SLICE_SIZE, "segment header > slice");
    seg->magic = HEAP_SEG_MAGIC;
    seg->kind = HEAP_SEG_SMALL;
    seg->use = use;
    seg->index = arena_nsegs_made++;
    seg->free_mask = ~1ULL;
    seg->dirty_mask = 1ULL;
    seg->guard_mask = 0;
    heap_segmap_set((uintptr_t)seg >> HEAP_SEG_SHIFT, 1);
    FETCH_ADD(&st_mapped, HEAP_SEG_SIZE, RELAXED);
    FETCH_ADD(&st_released, HEAP_SEG_SIZE - HEAP_SLICE_SIZE, RELAXED);
    FETCH_ADD(&st_segments, 1, RELAXED);
    avail_push(seg);
    list_push_front(&arena_all, &seg->all_link);
    return seg;
}

static void segment_unmap(heap_segment *seg)
{
    avail_remove(seg);
    list_remove(&arena_all, &seg->all_link);
    heap_segmap_set((uintptr_t)seg >> HEAP_SEG_SHIFT, 0);
    FETCH_SUB(&st_mapped, HEAP_SEG_SIZE, RELAXED);
    FETCH_SUB(&st_released, HEAP_SEG_SIZE - HEAP_SLICE_SIZE, RELAXED);
    FETCH_SUB(&st_segments, 1, RELAXED);
    seg->magic = 0;
    mote__os_release(seg, HEAP_SEG_SIZE);
}

/* Lock held.  Every guard goes: when nothing else is left, a guarded slice
 * is better used than an allocation that fails. */
static bool guards_drop(void)
{
    bool any = false;
    for (heap_segment *seg = avail_first(); seg; seg = avail_next(seg)) {
        any |= (seg->guard_mask & seg->free_mask) != 0;
        seg->guard_mask = 0;
    }
    return any;
}

/* Lock held.  A wholly free segment of another use, now of this one. */
static heap_segment *segment_reuse(uint32_t use)
{
    for (heap_segment *seg = avail_first(); seg; seg = avail_next(seg))
        if (seg->use != use && seg->free_mask == ~1ULL) {
            seg->use = use;
            return seg;
        }
    return NULL;
}

/* Lock held.  A page of n slices in a segment of this use; on no guarded
 * slice if avoid. */
static heap_page *page_alloc(uint32_t n, bool *zero, bool clean_first, bool avoid,
                             uint32_t use)
{
    heap_segment *seg = NULL;
    uint64_t starts = 0;
    /* Warm (dirty) slices first: they cost no page faults.  A page that
     * will touch little of its run (the profiler's) leaves them to others. */
    if (!clean_first)
        seg = fit_find(n, true, avoid, use, &starts);
    if (!seg)
        seg = fit_find(n, false, avoid, use, &starts);
    if (!seg && (seg = segment_reuse(use)))
        seg = fit_find(n, false, avoid, use, &starts);
    if (!seg && (seg = segment_new(use)))
        starts = run_starts(seg->free_mask, n);
    /* Out of address space or near the memory limit: any free slices. */
    if (!seg)
        seg = fit_find(n, false, avoid, HEAP_USE_ANY, &starts);
    if (!seg && avoid && guards_drop())
        seg = fit_find(n, false, false, HEAP_USE_ANY, &starts);
    if (!seg) {
        if (!arena_unmap_free() || !(seg = segment_new(use)))
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
        FETCH_SUB(&st_released, (uint64_t)__builtin_popcountll(clean) << HEAP_SLICE_SHIFT,
                  RELAXED);
    }
    *zero = clean == bits;
    mote__assert(!avoid || !(seg->guard_mask & bits));
    seg->guard_mask &= ~starts;
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
    mote__assert_expensive(segment_valid(seg));
    return pg;
}

heap_page *mote__arena_page_alloc(uint32_t n, bool *zero, bool clean_first)
{
    return page_alloc(n, zero, clean_first, true, HEAP_USE_PAGES);
}

/* Lock held.  Slices [i, i+n) of seg become free and dirty, freed at since. */
static void run_free(heap_segment *seg, unsigned i, unsigned n, uint32_t since)
{
    mote__assert(n >= 1 && i >= 1 && i + n <= HEAP_SLICES);
    mote__assert(!(seg->free_mask & run_bits(i, n)));
    mote__assert((seg->dirty_mask & run_bits(i, n)) == run_bits(i, n));
    for (unsigned k = i; k < i + n; k++) {
        seg->map[k] = NULL;
        seg->since[k] = since;
    }
    seg->pages[i].kind = HEAP_PAGE_FREE;
    seg->free_mask |= run_bits(i, n);
    avail_push(seg);
    mote__assert_expensive(segment_valid(seg));
}

static inline unsigned page_index(const heap_page *pg)
{
    return (unsigned)(((uintptr_t)pg->start >> HEAP_SLICE_SHIFT) & (HEAP_SLICES - 1));
}

void mote__arena_page_free(heap_page *pg)
{
    run_free(heap_segment_of(pg->start), page_index(pg), pg->slices,
             mote__os_coarse_ms());
    mote__scavenger_note_dirty();
}

/* ---- the cache of freed huge blocks ---- */

static inline uint64_t cache_entry_bytes(const heap_page *pg)
{
    return heap_segment_of(pg)->map_size;
}

static inline heap_page *cache_entry(list_node *n)
{
    return n ? list_entry(n, heap_page, qlink) : NULL;
}

/* Gives a huge mapping back (no lock needed: nobody else can reach it). */
static void huge_unmap(heap_segment *seg)
{
    FETCH_SUB(&st_mapped, seg->map_size, RELAXED);
    seg->magic = 0;
    mote__os_release(seg->map_base, seg->map_size);
}

/* Huge mappings taken out of the cache under the lock, unmapped after it. */
struct cache_drop {
    heap_segment *seg[CACHE_MAX + 1];
    int n;
};

static void cache_drop_run(cache_drop *d)
{
    for (int i = 0; i < d->n; i++)
        huge_unmap(d->seg[i]);
    d->n = 0;
}

static void cache_unlink(heap_page *pg)
{
    mote__assert_expensive(list_contains(&arena_cache, &pg->qlink));
    list_remove(&arena_cache, &pg->qlink);
    COUNT(&cache_count, -1);
    FETCH_SUB(&st_cache_bytes, cache_entry_bytes(pg), RELAXED);
    pg->cached_ms = 0;
}

/* Lock held.  Takes pg out of the cache without reuse: its mapping goes to
 * d (or is unmapped here, under the lock, when d is NULL: memory-limit
 * path). */
static void cache_evict(heap_page *pg, cache_drop *d)
{
    cache_unlink(pg);
    if (d)
        d->seg[d->n++] = heap_segment_of(pg);
    else
        huge_unmap(heap_segment_of(pg));
}

/* Lock held.  Puts pg (used already 0), free since that ms clock, in the
 * cache, evicting the oldest entries to stay in bounds; false if it
 * should not be cached.  A
 * cached mapping right below or above it joins it (no two cached mappings
 * touch): the pieces cache_take_huge split come back together. */
static bool cache_put(heap_page *pg, uint32_t since, cache_drop *d)
{
    uint64_t b = cache_entry_bytes(pg);
    uint64_t cached = LOAD(&st_cache_bytes, RELAXED);
    uint64_t committed = mote__arena_committed();
    uint64_t rest = committed > cached + b ? committed - cached - b : 0;
    uint64_t allow = rest / 4 > CACHE_MIN_BYTES ? rest / 4 : CACHE_MIN_BYTES;
    uint64_t limit = LOAD(&arena_limit, RELAXED);
    if (b > allow || (limit && committed > limit - limit / 4))
        return false;
    heap_segment *seg = heap_segment_of(pg);
    for (list_node *n = arena_cache.head, *next; n; n = next) {
        next = n->next;
        heap_page *q = cache_entry(n);
        heap_segment *qs = heap_segment_of(q);
        if (qs->map_base == seg->map_base + seg->map_size) {
            cache_unlink(q);
            seg->map_size += qs->map_size;
            qs->magic = 0;
        } else if (qs->map_base + qs->map_size == seg->map_base) {
            cache_unlink(q);
            qs->map_size += seg->map_size;
            seg->magic = 0;
            seg = qs;
            pg = q;
        }
    }
    pg->usable = (size_t)(seg->map_base + seg->map_size - pg->first);
    b = cache_entry_bytes(pg);
    heap_page *old;
    while ((cache_count >= CACHE_MAX || LOAD(&st_cache_bytes, RELAXED) + b > allow) &&
           (old = cache_entry(arena_cache.tail)))
        cache_evict(old, d);
    pg->cached_ms = since ? since : 1;
    list_push_front(&arena_cache, &pg->qlink);
    COUNT(&cache_count, 1);
    FETCH_ADD(&st_cache_bytes, b, RELAXED);
    mote__scavenger_note_dirty();
    return true;
}

/* A huge mapping's header at base (segment-aligned), its block hdr bytes
 * above.  reused: the bytes there were a block's, cleared first (a fresh
 * mapping is zero, and its header pages past the first stay untouched). */
static heap_segment *huge_header(uint8_t *base, size_t map_size, size_t hdr, bool reused)
{
    heap_segment *seg = (heap_segment *)base;
    if (reused)
        memset(seg, 0, sizeof *seg);
    seg->magic = HEAP_SEG_MAGIC;
    seg->kind = HEAP_SEG_HUGE;
    seg->map_size = map_size;
    seg->map_base = base;
    heap_page *pg = &seg->pages[0];
    pg->kind = HEAP_PAGE_HUGE;
    pg->start = base;
    pg->first = base + hdr;
    pg->usable = map_size - hdr;
    return seg;
}

/* Lock held.  The smallest cached huge mapping whose block is aligned to a
 * and holds size bytes, or NULL.  What lies a segment or more past the
 * request (segments from its start) is split off and stays cached as a
 * mapping of its own: kept whole, a cached 1 GiB block would pin its pages
 * under a 3 MiB one; unmapped past twice the request, blocks of random
 * sizes shrank at each hit and faulted again at each miss (and each munmap
 * costs, on a VM that shadows page tables, the first touch of the pages
 * it flushed: mimalloc-bench's malloc-large pattern took 2.2x tcmalloc's
 * time).  The split costs no system call; cache_put joins the pieces again.
 * Under a memory limit the slack would count against it: *trim then gets
 * the bytes past the request, to unmap. */
static heap_segment *cache_take_huge(size_t size, uintptr_t a, size_t *trim)
{
    heap_page *best = NULL;
    for (list_node *n = arena_cache.head; n; n = n->next) {
        heap_page *pg = cache_entry(n);
        if (((uintptr_t)pg->first & (a - 1)) || pg->usable < size ||
            (best && pg->usable >= best->usable))
            continue;
        best = pg;
    }
    *trim = 0;
    if (!best)
        return NULL;
    cache_unlink(best);
    heap_segment *seg = heap_segment_of(best);
    size_t keep = (size + HEAP_OS_PAGE - 1) & ~(HEAP_OS_PAGE - 1);
    if (!LOAD(&arena_limit, RELAXED)) {
        size_t hdr = (size_t)(best->first - seg->map_base);
        size_t end = (hdr + keep + HEAP_SEG_SIZE - 1) & ~(HEAP_SEG_SIZE - 1);
        if (end + HEAP_SEG_SIZE <= seg->map_size) {
            heap_segment *rest = huge_header(
                seg->map_base + end, seg->map_size - end,
                (sizeof(heap_segment) + HEAP_OS_PAGE - 1) & ~(HEAP_OS_PAGE - 1), true);
            seg->map_size = end;
            best->usable = end - hdr;
            uint32_t now = mote__os_coarse_ms();
            rest->pages[0].cached_ms = now ? now : 1;
            list_push_front(&arena_cache, &rest->pages[0].qlink);
            COUNT(&cache_count, 1);
            FETCH_ADD(&st_cache_bytes, rest->map_size, RELAXED);
        }
        return seg;
    }
    if (best->usable > keep) {
        *trim = best->usable - keep;
        best->usable = keep;
        seg->map_size -= *trim;
        FETCH_SUB(&st_mapped, *trim, RELAXED);
    }
    return seg;
}

/* Lock held.  On a miss: the biggest cached huge block smaller than size
 * whose header is hdr (so its block keeps the alignment; or, for a block
 * that takes a colour, hdr and up to HEAP_COLOUR_MAX more), to be grown with
 * mremap: its pages move with it, and only the new part faults (blocks of
 * varying sizes otherwise shrank in the cache, each hit cutting a tail, and
 * each miss faulted a whole new mapping: 2x glibc's time). */
static heap_segment *cache_take_huge_smaller(size_t size, size_t hdr, bool colour,
                                             uintptr_t a)
{
    heap_page *best = NULL;
    if (a > HEAP_SEG_SIZE) /* a move keeps only the unit's alignment */
        return NULL;
    for (list_node *n = arena_cache.head; n; n = n->next) {
        heap_page *pg = cache_entry(n);
        size_t h = (size_t)(pg->first - pg->start);
        if (pg->usable >= size || h < hdr || h - hdr > (colour ? HEAP_COLOUR_MAX : 0) ||
            (!colour && ((uintptr_t)pg->first & (a - 1))) ||
            (best && pg->usable <= best->usable))
            continue;
        best = pg;
    }
    if (!best)
        return NULL;
    cache_unlink(best);
    return heap_segment_of(best);
}

/* ---- large blocks: one block per slice run ---- */

void *mote__arena_large_alloc(size_t size, size_t align)
{
    size_t extra = align > HEAP_SLICE_SIZE ? align - HEAP_SLICE_SIZE : 0;
    uint32_t n = (uint32_t)((size + extra + HEAP_SLICE_SIZE - 1) >> HEAP_SLICE_SHIFT);
    uintptr_t a = align > 16 ? align : 16;
    /* A block of 8 slices or more that leaves its run no room for a cache
     * colour (1 MiB, say) gets a slice more to take one in: at most 1/8
     * more address space, and at most a page more RSS (its tail moves into
     * the slice by the colour).  Under a memory limit the slice would
     * count against it: none there. */
    if (a <= 64 && n >= 8 && ((size_t)n << HEAP_SLICE_SHIFT) - size < HEAP_COLOUR_MAX &&
        !LOAD(&arena_limit, RELAXED))
        n++;
    bool zero = false;
    heap_lock_acquire(&mote__heap_arena_lock);
    /* A block aligned past a slice may begin inside its run, on a guarded
     * slice: it keeps clear of them all.  Any other begins at its first
     * slice, where a guard does not matter. */
    heap_page *pg = page_alloc(n, &zero, false, a > HEAP_SLICE_SIZE, HEAP_USE_LARGE);
    if (!pg) {
        heap_lock_release(&mote__heap_arena_lock);
        errno = ENOMEM;
        return NULL;
    }
    pg->kind = HEAP_PAGE_LARGE;
    page_used_set(pg, 1);
    pg->zeroed = zero;
    if (a <= 64) {
        pg->usable = 0;
        FETCH_ADD(&st_large_inuse, mote__arena_large_place(pg, size, colour_seq++),
                  RELAXED);
    } else {
        pg->aligned = 1;
        pg->first = (uint8_t *)(((uintptr_t)pg->start + a - 1) & ~(a - 1));
        pg->usable =
            (size_t)(pg->start + ((size_t)pg->slices << HEAP_SLICE_SHIFT) - pg->first);
        FETCH_ADD(&st_large_inuse, pg->usable, RELAXED);
    }
    mote__assert(pg->usable >= size);
    heap_lock_release(&mote__heap_arena_lock);
    return pg->first;
}

uint64_t mote__arena_large_place(heap_page *pg, size_t size, uint32_t seq)
{
    size_t run = (size_t)pg->slices << HEAP_SLICE_SHIFT;
    mote__assert(size <= run);
    return mote__arena_large_place_at(pg, size, heap_colour(seq, run - size));
}

uint64_t mote__arena_large_place_at(heap_page *pg, size_t size, size_t colour)
{
    size_t run = (size_t)pg->slices << HEAP_SLICE_SHIFT;
    mote__assert(pg->kind == HEAP_PAGE_LARGE && colour + size <= run && colour % 64 == 0);
    uint64_t grew = run - colour - pg->usable; /* mod 2^64 */
    pg->first = pg->start + colour;
    pg->usable = run - colour;
    return grew;
}

/* A huge block's header and its first page: where a block that asked no
 * alignment past a page has its room start. */
#define HUGE_HDR ((sizeof(heap_segment) + HEAP_OS_PAGE - 1) & ~(HEAP_OS_PAGE - 1))

size_t mote__arena_huge_room(const heap_page *pg)
{
    mote__assert(pg->kind == HEAP_PAGE_HUGE && !pg->aligned);
    const heap_segment *seg = heap_segment_of(pg);
    return (size_t)(pg->first + pg->usable - (seg->map_base + HUGE_HDR));
}

uint64_t mote__arena_huge_place(heap_page *pg, size_t size, uint32_t seq)
{
    heap_segment *seg = heap_segment_of(pg);
    size_t room = mote__arena_huge_room(pg);
    mote__assert(size <= room && seg->map_base == (uint8_t *)seg);
    uint8_t *end = pg->first + pg->usable;
    uint64_t old = pg->usable;
    pg->first = seg->map_base + HUGE_HDR + heap_colour(seq, room - size);
    pg->usable = (size_t)(end - pg->first);
    return pg->usable - old; /* mod 2^64 */
}

/* Lock held.  Large block pg (used 0) is freed: its slices are free, as
 * if since (ms clock) for the decay. */
static void large_run_free(heap_page *pg, uint32_t since)
{
    mote__assert(pg->kind == HEAP_PAGE_LARGE && page_used(pg) == 0);
    FETCH_SUB(&st_large_inuse, pg->usable, RELAXED);
    heap_segment *seg = heap_segment_of(pg->start);
    seg->guard_mask |= 1ULL << page_index(pg);
    run_free(seg, page_index(pg), pg->slices, since);
}

void mote__arena_large_free(heap_page *pg)
{
    heap_lock_acquire(&mote__heap_arena_lock);
    mote__assert(pg->kind == HEAP_PAGE_LARGE && page_used(pg) == 1);
    page_used_set(pg, 0);
    large_run_free(pg, mote__os_coarse_ms());
    heap_lock_release(&mote__heap_arena_lock);
    mote__scavenger_note_dirty();
    mote__scavenger_ensure();
}

void mote__arena_large_free_kept(heap_page *const *pg, unsigned n, uint32_t since)
{
    heap_lock_acquire(&mote__heap_arena_lock);
    for (unsigned i = 0; i < n; i++)
        large_run_free(pg[i], since);
    heap_lock_release(&mote__heap_arena_lock);
    mote__scavenger_note_dirty();
    mote__scavenger_ensure();
}

bool mote__arena_limited(void) { return LOAD(&arena_limit, RELAXED) != 0; }

/* ---- huge blocks: their own mapping, header in front ---- */

/* A huge block's fresh pages, asked to come as transparent huge pages
 * when MOTE_MALLOC_HUGEPAGES=on: one fault then maps 2 MiB.  Off by
 * default: on a VM whose host takes free memory back, a huge page's first
 * touch took up to 9 ms (largerand: median 9.6 ms a step with, 4.0
 * without; docs/heap.md).  Not a fresh mapping calloc asked for: it needs
 * no write to be zero, and a table allocated zeroed is the block most
 * often touched here and there.  Segments stay without: a huge page there
 * would pin 2 MiB under one small block. */
static void huge_thp(void *p, size_t len)
{
    if (mote__heap_cfg.hugepages)
        mote__os_hugepages(p, len);
}

/* Maps total bytes whose offset hdr is aligned to a (a power of two at
 * least a segment): the header then sits hdr bytes below the block. */
static uint8_t *huge_map(size_t total, size_t hdr, size_t a)
{
    if (a <= HEAP_SEG_SIZE)
        return mote__os_map_aligned(total, HEAP_SEG_SIZE, false);
    size_t over = total + a;
    if (over < total)
        return NULL;
    uint8_t *p = mote__os_map_aligned(over, HEAP_SEG_SIZE, false);
    if (!p)
        return NULL;
    uint8_t *blk = (uint8_t *)(((uintptr_t)p + hdr + a - 1) & ~(uintptr_t)(a - 1));
    uint8_t *base = blk - hdr;
    if (base > p)
        mote__os_release(p, (size_t)(base - p));
    if (base + total < p + over)
        mote__os_release(base + total, (size_t)(p + over - (base + total)));
    return base;
}

/* seg's mapping, total bytes long now: in place, or moved (pages and all)
 * to a new segment-aligned unit.  in_map: its block is in use, entered in
 * the segment map (moved out before the old range goes, back in at the new
 * one).  The new segment, or NULL (seg unchanged). */
static heap_segment *huge_remap(heap_segment *seg, size_t total, bool in_map)
{
    int saved_errno = errno; /* a grow in place that failed on the way */
    heap_page *pg = &seg->pages[0];
    size_t hdr = (size_t)(pg->first - (uint8_t *)seg), old = seg->map_size;
    uintptr_t k = hdr >> HEAP_SEG_SHIFT; /* the header's units below the block */
    uintptr_t unit = ((uintptr_t)seg >> HEAP_SEG_SHIFT) + k;
    uint8_t *base;
    if (total < old) { /* (a mapping of joined pieces may span VMAs, which
                          mremap does not resize) */
        mote__os_release((uint8_t *)seg + total, old - total);
        base = (uint8_t *)seg;
    } else {
        base = mote__os_remap(seg, old, total);
    }
    if (!base && total > old) { /* no room after it: move it to a new unit */
        uint8_t *dst = mote__os_map_aligned(total, HEAP_SEG_SIZE, false);
        if (dst) {
            huge_thp(dst, total);
            /* out of the map before the old range is unmapped: another
             * thread may map that address at once and enter it */
            if (in_map)
                heap_segmap_set(unit, 0);
            /* into dst's start: the rest of it stays fresh */
            if (mote__os_move(seg, old, dst, total) == 0) {
                base = dst;
            } else {
                if (in_map)
                    heap_segmap_set(unit, (uint8_t)(2 + k));
                mote__os_release(dst, total);
            }
        }
    }
    if (!base)
        return NULL;
    if (base != (uint8_t *)seg) {
        seg = (heap_segment *)base;
        pg = &seg->pages[0];
        seg->map_base = base;
        pg->start = base;
        pg->first = base + hdr;
        if (in_map)
            heap_segmap_set(((uintptr_t)base >> HEAP_SEG_SHIFT) + k, (uint8_t)(2 + k));
    }
    seg->map_size = total;
    errno = saved_errno;
    return seg;
}

void *mote__arena_huge_alloc(size_t size, size_t align, bool for_calloc)
{
    /* A block that asks no alignment past 64 bytes takes a cache colour:
     * a page more of mapping to start in (heap_colour), and any cached
     * block, which has its own. */
    bool colour = align <= 64;
    size_t a = align > HEAP_OS_PAGE ? align : HEAP_OS_PAGE;
    /* The header takes the block's alignment, up to one segment; a bigger
     * alignment puts it in its own segment-sized unit just below the block,
     * so any alignment costs at most one extra unit of address space. */
    size_t hdr =
        a > HEAP_SEG_SIZE ? HEAP_SEG_SIZE : (sizeof(heap_segment) + a - 1) & ~(a - 1);
    size_t room = colour ? HEAP_COLOUR_MAX : 0;
    size_t total = hdr + room + size + HEAP_OS_PAGE - 1;
    if (total < size) {
        errno = ENOMEM;
        return NULL;
    }
    total &= ~(HEAP_OS_PAGE - 1);

    size_t trim;
    heap_lock_acquire(&mote__heap_arena_lock);
    uint32_t seq = colour ? colour_seq++ : 0;
    heap_segment *seg = cache_take_huge(size, colour ? 64 : a, &trim), *grow = NULL;
    if (seg)
        FETCH_ADD(&st_cache_hits, 1, RELAXED);
    else
        FETCH_ADD(&st_cache_misses, 1, RELAXED);
    bool ok = seg || !LOAD(&arena_limit, RELAXED) || arena_reserve(total);
    if (ok && !seg)
        grow = cache_take_huge_smaller(size, hdr, colour, a);
    heap_lock_release(&mote__heap_arena_lock);
    if (!ok) {
        errno = ENOMEM;
        return NULL;
    }
    if (grow) { /* its pages move into the bigger block: only the rest faults */
        size_t old = grow->map_size;
        size_t ghdr = (size_t)(grow->pages[0].first - (uint8_t *)grow);
        size_t gtotal = (ghdr + size + HEAP_OS_PAGE - 1) & ~(HEAP_OS_PAGE - 1);
        seg = huge_remap(grow, gtotal, false);
        if (seg) {
            heap_page *gp = &seg->pages[0];
            gp->usable = gtotal - ghdr;
            FETCH_ADD(&st_mapped, gtotal - old, RELAXED);
        } else {
            huge_unmap(grow);
        }
    }
    heap_page *pg;
    if (seg) { /* warm: no page fault for what it held */
        pg = &seg->pages[0];
        if (trim)
            mote__os_release(pg->first + pg->usable, trim);
        pg->zeroed = 0;
        if (colour && !grow) { /* a colour of its own, in the room it has (a
                                  grown one was mapped for the one it had) */
            uint8_t *end = pg->first + pg->usable;
            pg->first = seg->map_base + hdr +
                        heap_colour(seq, (size_t)(end - seg->map_base) - hdr - size);
            pg->usable = (size_t)(end - pg->first);
        }
    } else {
        uint8_t *base = huge_map(total, hdr, a);
        if (!base) {
            heap_lock_acquire(&mote__heap_arena_lock);
            bool again = arena_unmap_free();
            heap_lock_release(&mote__heap_arena_lock);
            base = again ? huge_map(total, hdr, a) : NULL;
        }
        if (!base) {
            errno = ENOMEM;
            return NULL;
        }
        if (!for_calloc) /* a table allocated zeroed is often filled sparsely */
            huge_thp(base, total);
        seg = huge_header(base, total, hdr + heap_colour(seq, room), false);
        pg = &seg->pages[0];
        pg->zeroed = 1;
        FETCH_ADD(&st_mapped, total, RELAXED);
    }
    mote__assert(pg->kind == HEAP_PAGE_HUGE && pg->usable >= size && !page_used(pg));
    pg->aligned = !colour; /* (run caches keep only blocks with a colour) */
    page_used_set(pg, 1);
    FETCH_ADD(&st_huge_inuse, pg->usable, RELAXED);
    FETCH_ADD(&st_huge_count, 1, RELAXED);
    heap_segmap_set(
        (uintptr_t)pg->first >> HEAP_SEG_SHIFT,
        (uint8_t)(2 + (((uintptr_t)pg->first - (uintptr_t)seg) >> HEAP_SEG_SHIFT)));
    return pg->first;
}

void *mote__arena_huge_realloc(heap_segment *seg, size_t n)
{
    heap_page *pg = &seg->pages[0];
    size_t hdr = (size_t)(pg->first - (uint8_t *)seg), old = seg->map_size;
    if (n > SIZE_MAX / 2 - hdr)
        return NULL;
    size_t total = (hdr + n + HEAP_OS_PAGE - 1) & ~(HEAP_OS_PAGE - 1);
    /* Growing: a quarter more, so a buffer grown in small steps moves a
     * few times, not at every step (slack untouched costs no RSS). */
    if (total > old && total < old + old / 4)
        total = (old + old / 4 + HEAP_OS_PAGE - 1) & ~(HEAP_OS_PAGE - 1);
    if (total == old)
        return pg->first;
    if (total > old && LOAD(&arena_limit, RELAXED)) {
        heap_lock_acquire(&mote__heap_arena_lock);
        bool ok = arena_reserve(total - old);
        heap_lock_release(&mote__heap_arena_lock);
        if (!ok)
            return NULL;
    }
    seg = huge_remap(seg, total, true);
    if (!seg)
        return NULL;
    pg = &seg->pages[0];
    FETCH_SUB(&st_huge_inuse, pg->usable, RELAXED);
    pg->usable = total - hdr;
    pg->zeroed = 0;
    FETCH_ADD(&st_huge_inuse, pg->usable, RELAXED);
    FETCH_ADD(&st_mapped, total - old, RELAXED); /* (modulo 2^64 when it shrank) */
    return pg->first;
}

void mote__arena_huge_free(heap_segment *seg, const void *p)
{
    heap_page *pg = &seg->pages[0];
    if (seg->magic != HEAP_SEG_MAGIC || seg->kind != HEAP_SEG_HUGE || pg->first != p ||
        page_used(pg) != 1)
        mote__heap_invalid_free(p, "free");
    page_used_set(pg, 0);
    mote__arena_huge_free_kept(pg, mote__os_coarse_ms());
}

void mote__arena_huge_free_kept(heap_page *pg, uint32_t since)
{
    heap_segment *seg = heap_segment_of(pg);
    mote__assert(pg->kind == HEAP_PAGE_HUGE && !page_used(pg));
    /* From here a second free of the block finds no segment: it aborts. */
    heap_segmap_set((uintptr_t)pg->first >> HEAP_SEG_SHIFT, 0);
    FETCH_SUB(&st_huge_inuse, pg->usable, RELAXED);
    FETCH_SUB(&st_huge_count, 1, RELAXED);
    cache_drop d = {.n = 0};
    heap_lock_acquire(&mote__heap_arena_lock);
    bool cached = cache_put(pg, since, &d);
    heap_lock_release(&mote__heap_arena_lock);
    cache_drop_run(&d);
    if (!cached)
        huge_unmap(seg);
    else
        mote__scavenger_ensure();
}

/* ---- free blocks inside bitmap pages ----
 *
 * A bitmap page (classes above 4 KiB) idle for the decay period has its
 * free blocks claimed (cleared from its bitmap, HEAP_BM_PURGING set, under
 * the arena lock so the page cannot leave meanwhile: an empty page leaves
 * only by taking its whole bitmap), the whole OS pages they cover released
 * without the lock, and the blocks put back.  The owner may allocate the
 * other free blocks meanwhile; it never parks a page with PURGING set. */

typedef struct bm_claim {
    heap_page *pg;
    uint64_t mask;   /* claimed blocks | HEAP_BM_TAIL */
    uint32_t allocs; /* pg->allocs before the claim */
} bm_claim;

/* Lock held.  Claims what is due into out[0..max); sets *next to the ms
 * until the next page is due (or 0 when out was too small).  Pages due are
 * picked first, their owning caches' gates closed (asym.h: the owner then
 * changes its pages' words with atomics only), and claimed after one heavy
 * fence, each unless its owner was inside. */
static int bm_claim_due(uint32_t decay_ms, uint32_t now, bm_claim *out, int max,
                        long *next)
{
    int n = 0;
    if (!LOAD(&mote__heap_bm_dirty, RELAXED))
        return 0;
    for (list_node *l = arena_all.head; l; l = l->next) {
        heap_segment *seg = list_entry(l, heap_segment, all_link);
        uint64_t inpage = ~seg->free_mask & ~1ULL;
        while (inpage) {
            unsigned i = (unsigned)__builtin_ctzll(inpage);
            heap_page *pg = seg->map[i];
            if (!pg || pg != &seg->pages[i]) { /* in transit to the OS */
                inpage &= inpage - 1;
                continue;
            }
            inpage &= ~run_bits(i, pg->slices);
            if (pg->kind != HEAP_PAGE_BITMAP || !LOAD(&pg->dirty, RELAXED))
                continue;
            uint32_t age = now - LOAD(&pg->since_ms, RELAXED);
            if (age < decay_ms) {
                long wait = (long)(decay_ms - age);
                if (*next < 0 || wait < *next)
                    *next = wait;
                continue;
            }
            if (n == max) {
                *next = 0;
                goto claim;
            }
            /* another caller has it, or it is leaving (HEAP_BM_RETIRED) */
            if (LOAD(&pg->bits, RELAXED) & (HEAP_BM_PURGING | HEAP_BM_RETIRED))
                continue;
            heap_asym_close(page_asym(pg));
            out[n++] = (bm_claim){pg, 0, 0};
        }
    }
claim:
    if (!n)
        return 0;
    mote__heap_asym_heavy_fence();
    int kept = 0;
    for (int k = 0; k < n; k++) {
        heap_page *pg = out[k].pg;
        heap_asym *a = page_asym(pg);
        uint64_t b = LOAD(&pg->bits, RELAXED);
        if (!heap_asym_won(a) || (b & (HEAP_BM_PURGING | HEAP_BM_RETIRED))) {
            heap_asym_open(a);
            if (*next < 0 || *next > 10)
                *next = 10; /* its owner was inside: look again soon */
            continue;
        }
        if (XCHG(&pg->dirty, 0, RELAXED))
            FETCH_SUB(&mote__heap_bm_dirty, 1, RELAXED);
        uint32_t allocs = LOAD(&pg->allocs, RELAXED);
        if (allocs != pg->purge_allocs) /* released blocks were reused */
            pg->purged &= HEAP_BM_TAIL;
        for (;;) {
            uint64_t want = b & bm_all(pg) & ~pg->purged;
            uint64_t tail = pg->purged & HEAP_BM_TAIL ? 0 : HEAP_BM_TAIL;
            if ((!want && !tail) || (b & HEAP_BM_RETIRED))
                break;
            if (CAS(&pg->bits, &b, (b & ~want) | HEAP_BM_PURGING, ACQUIRE)) {
                out[kept++] = (bm_claim){pg, want | tail, allocs};
                break;
            }
        }
        heap_asym_open(a);
    }
    return kept;
}

/* Ranges to release, batched into as few system calls as the kernel takes. */
typedef struct bm_ranges {
    struct iovec v[64];
    int n;
    uint64_t bytes, calls;
} bm_ranges;

static void bm_ranges_flush(bm_ranges *r)
{
    if (r->n)
        mote__os_decommit_batch(r->v, (size_t)r->n);
    r->n = 0;
}

/* Adds the whole OS pages inside [lo, hi). */
static void bm_ranges_add(bm_ranges *r, uintptr_t lo, uintptr_t hi)
{
    lo = (lo + HEAP_OS_PAGE - 1) & ~(HEAP_OS_PAGE - 1);
    hi &= ~(HEAP_OS_PAGE - 1);
    if (lo >= hi)
        return;
    if (r->n == (int)(sizeof r->v / sizeof r->v[0]))
        bm_ranges_flush(r);
    r->v[r->n++] = (struct iovec){(void *)lo, hi - lo};
    r->bytes += hi - lo;
    r->calls++;
}

/* No lock.  Releases the whole OS pages inside each claim's runs of free
 * blocks (a run ending at the last block takes the page's unused tail with
 * it, if that was not released yet); returns the bytes released. */
static uint64_t bm_release(const bm_claim *c, int n, uint64_t *calls)
{
    bm_ranges r = {.n = 0};
    for (int k = 0; k < n; k++) {
        heap_page *pg = c[k].pg;
        uint64_t m = c[k].mask & bm_all(pg);
        uintptr_t base = (uintptr_t)pg->start, bs = pg->bsize;
        uintptr_t tail = base + (uintptr_t)pg->reserved * bs;
        uintptr_t end = base + ((uintptr_t)pg->slices << HEAP_SLICE_SHIFT);
        bool do_tail = (c[k].mask & HEAP_BM_TAIL) != 0;
        while (m) {
            unsigned i = (unsigned)__builtin_ctzll(m);
            unsigned len = (unsigned)__builtin_ctzll(~(m >> i));
            m &= ~run_bits(i, len);
            uintptr_t hi = base + (i + len) * bs;
            if (hi == tail && do_tail) {
                hi = end;
                do_tail = false;
            }
            bm_ranges_add(&r, base + i * bs, hi);
        }
        if (do_tail)
            bm_ranges_add(&r, tail, end);
    }
    bm_ranges_flush(&r);
    *calls = r.calls;
    return r.bytes;
}

/* Lock held.  Puts the claimed blocks back and records them released.
 * These must go back: with the gates closed (see bm_claim_due) it waits for
 * an owner inside to leave (a few instructions, never a lock). */
static void bm_unclaim(const bm_claim *c, int n)
{
    if (!n)
        return;
    for (int k = 0; k < n; k++)
        heap_asym_close(page_asym(c[k].pg));
    mote__heap_asym_heavy_fence();
    for (int k = 0; k < n; k++) {
        heap_page *pg = c[k].pg;
        heap_asym *a = page_asym(pg);
        while (!heap_asym_won(a))
            sched_yield();
        uint64_t give = c[k].mask & bm_all(pg);
        uint64_t b = LOAD(&pg->bits, RELAXED);
        mote__assert(b & HEAP_BM_PURGING);
        mote__assert(!(b & give));
        while (!CAS_WEAK(&pg->bits, &b, (b | give) & ~HEAP_BM_PURGING, RELEASE))
            ;
        pg->purged |= c[k].mask;
        pg->purge_allocs = c[k].allocs;
        heap_asym_open(a);
    }
}

long mote__arena_scavenge(uint32_t decay_ms)
{
    enum { BATCH = 64 };
    heap_segment *segs[BATCH];
    uint64_t masks[BATCH];
    int nb = 0;
    long next = -1;
    bool more = false;
    cache_drop d = {.n = 0};
    bm_claim claims[BATCH];
    int nc = 0;

    heap_lock_acquire(&mote__heap_arena_lock);
    uint32_t now = mote__os_coarse_ms();
    /* Cached blocks older than the decay period leave the cache. */
    heap_page *old;
    while ((old = cache_entry(arena_cache.tail))) {
        uint32_t age = now - old->cached_ms;
        if (age < decay_ms) {
            next = (long)(decay_ms - age);
            break;
        }
        cache_evict(old, &d);
    }
    for (heap_segment *seg = avail_first(); seg; seg = avail_next(seg)) {
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
    if (!more) {
        long bm_next = -1;
        nc = bm_claim_due(decay_ms, now, claims, BATCH, &bm_next);
        if (bm_next == 0)
            more = true;
        else if (bm_next > 0 && (next < 0 || bm_next < next))
            next = bm_next;
    }
    arena_transit += nb;
    heap_lock_release(&mote__heap_arena_lock);

    cache_drop_run(&d);
    uint64_t purge_calls = 0, purged = nc ? bm_release(claims, nc, &purge_calls) : 0;
    uint64_t runs = 0;
    for (int k = 0; k < nb; k++) {
        uint64_t m = masks[k];
        while (m) {
            unsigned i = (unsigned)__builtin_ctzll(m);
            unsigned n = (unsigned)__builtin_ctzll(~(m >> i));
            mote__os_decommit((uint8_t *)segs[k] + ((size_t)i << HEAP_SLICE_SHIFT),
                              (size_t)n << HEAP_SLICE_SHIFT);
            m &= ~run_bits(i, n);
            runs++;
        }
    }

    heap_lock_acquire(&mote__heap_arena_lock);
    bm_unclaim(claims, nc);
    FETCH_ADD(&st_purged_total, purged, RELAXED);
    FETCH_ADD(&st_purge_calls, purge_calls, RELAXED);
    arena_transit -= nb;
    for (int k = 0; k < nb; k++) {
        heap_segment *seg = segs[k];
        uint64_t bytes = (uint64_t)__builtin_popcountll(masks[k]) << HEAP_SLICE_SHIFT;
        seg->free_mask |= masks[k];
        seg->dirty_mask &= ~masks[k];
        seg->guard_mask &= ~masks[k];
        FETCH_ADD(&st_released, bytes, RELAXED);
        FETCH_ADD(&st_released_total, bytes, RELAXED);
        /* A wholly free, wholly released segment goes back to the OS. */
        if (seg->free_mask == ~1ULL && !(seg->dirty_mask & ~1ULL))
            segment_unmap(seg);
    }
    FETCH_ADD(&st_decommits, runs, RELAXED);
    heap_lock_release(&mote__heap_arena_lock);
    return more ? 0 : next;
}

void mote__arena_small_usage(heap_small_usage *u)
{
    memset(u, 0, sizeof *u);
    heap_lock_acquire(&mote__heap_arena_lock);
    for (list_node *l = arena_all.head; l; l = l->next) {
        heap_segment *seg = list_entry(l, heap_segment, all_link);
        uint64_t inpage = ~seg->free_mask & ~1ULL;
        while (inpage) {
            unsigned i = (unsigned)__builtin_ctzll(inpage);
            heap_page *pg = seg->map[i];
            if (pg && pg == &seg->pages[i]) {
                if (pg->kind == HEAP_PAGE_SMALL || pg->kind == HEAP_PAGE_BITMAP) {
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
    st->mapped = LOAD(&st_mapped, RELAXED);
    st->released = LOAD(&st_released, RELAXED);
    st->large_inuse = LOAD(&st_large_inuse, RELAXED);
    st->huge_inuse = LOAD(&st_huge_inuse, RELAXED);
    st->segments = LOAD(&st_segments, RELAXED);
    st->huge_count = LOAD(&st_huge_count, RELAXED);
    st->decommits = LOAD(&st_decommits, RELAXED);
    st->released_total = LOAD(&st_released_total, RELAXED);
    st->cache_bytes = LOAD(&st_cache_bytes, RELAXED);
    st->cache_count = LOAD(&cache_count, RELAXED);
    st->cache_hits = LOAD(&st_cache_hits, RELAXED);
    st->cache_misses = LOAD(&st_cache_misses, RELAXED);
    st->purged_total = LOAD(&st_purged_total, RELAXED);
    st->purge_calls = LOAD(&st_purge_calls, RELAXED);
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

void mote__arena_fork_parent(void) { heap_lock_release(&mote__heap_arena_lock); }

void mote__arena_fork_child(void) { STORE(&mote__heap_arena_lock.v, 0, RELEASE); }
