/*
 * api.c - the allocator's entry points: the inlined fast paths of malloc
 * and free, init, and the public functions.  Built twice: into libmote
 * (mote_malloc & co.) and, with MOTE_HEAP_PRELOAD, into libmote-malloc.so,
 * where the same code answers to malloc, free, ... and the __libc_* names.
 *
 * Fast paths: malloc pops the first block of the thread's current page for
 * the size class; free pushes onto the page's list when the page belongs to
 * this thread.  Neither takes a lock or does an atomic read-modify-write.
 * A block on a free list has (address ^ mote__heap_key) in its second word;
 * malloc clears it, so free finding it means a double free.
 */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "arch/arch.h"
#include "heap/heap.h"
#include "heap/internal.h"
#include "mote.h"
#include "option.h"
#include "os/os.h"

uintptr_t mote__heap_key = 0x9e3779b97f4a7c15ULL;
heap_config mote__heap_cfg = {
    .decay_ms = 500, .prof_rate = 512 * 1024, .hugepages = false};
int mote__heap_initialized;
static heap_lock init_lock = HEAP_LOCK_INIT;

static void heap_fork_prepare(void)
{
    mote__runcache_fork_prepare();
    mote__tcache_fork_prepare();
    mote__arena_fork_prepare();
}

static void heap_fork_parent(void)
{
    mote__arena_fork_parent();
    mote__tcache_fork_parent();
    mote__runcache_fork_parent();
}

static void heap_fork_child(void)
{
    mote__arena_fork_child();
    mote__tcache_fork_child();
    mote__runcache_fork_child();
    mote__stats_fork_child();
    mote__prof_fork_child();
    mote__scavenger_fork_child();
}

/* The allocator's variables (option.h).  An invalid one keeps its default;
 * it is reported once, and mote_run refuses to start on it. */
static void heap_config_load(void)
{
    uint64_t v;
    if (mote__option_read(OPT_MALLOC_DECAY_MS, &v) == 0)
        mote__heap_cfg.decay_ms = (uint32_t)v;
    if (mote__option_read(OPT_MEMLIMIT, &v) == 0)
        mote__heap_cfg.limit = v == OPT_OFF ? 0 : v;
    if (mote__option_read(OPT_MALLOC_STATS, &v) == 0) /* 0,1,json,text */
        mote__heap_cfg.stats = v == 0 ? 0 : v == 2 ? 2 : 1;
    if (mote__option_read(OPT_MALLOC_HUGEPAGES, &v) == 0)
        mote__heap_cfg.hugepages = v == 1;
    if (mote__option_read(OPT_HEAPPROFILE_RATE, &v) == 0)
        mote__heap_cfg.prof_rate = v;
    if (mote__option_read(OPT_HEAPPROFILE_SIGNAL, &v) == 0 && v)
        mote__heap_cfg.prof_signal = v % 2 ? SIGUSR1 : SIGUSR2; /* usr1 or sigusr1: odd */
    if (mote__option_read(OPT_HEAPPROFILE, &v) == 0 && v) {
        /* A copy: a program that rewrites its environment for its process
         * title (nginx, postgres) wiped the path, and wrote no profile. */
        static char path[HEAP_PROF_PATH_MAX];
        const char *e = getenv(mote__options[OPT_HEAPPROFILE].name);
        size_t len = e ? strlen(e) : 0;
        /* (the option's max refused a longer one, with a message) */
        mote__assert(mote__options[OPT_HEAPPROFILE].max < sizeof path);
        if (e && len < sizeof path) {
            memcpy(path, e, len + 1);
            mote__heap_cfg.prof_path = path;
        }
    }
}

/* Whether the heap's own records say p is a block that is free already, so
 * the report can say "double free" (see docs/heap.md, "What an invalid
 * free does", for when it can tell).  Reads only memory the segment map
 * says is a small segment's; racy reads are fine on the way to abort. */
static bool heap_free_already(const void *p)
{
    uintptr_t u = (uintptr_t)p, idx = u >> HEAP_SEG_SHIFT;
    uint8_t e = idx < HEAP_SEGMAP_LEN ? heap_segmap_get(idx) : 0;
    if (e >= 2) { /* a huge block: free only while a run cache keeps it */
        const heap_segment *hs = (heap_segment *)((idx - (e - 2u)) << HEAP_SEG_SHIFT);
        return LOAD(&hs->magic, RELAXED) == HEAP_SEG_MAGIC &&
               LOAD(&hs->pages[0].first, RELAXED) == p && page_used(&hs->pages[0]) == 0;
    }
    if (e != 1)
        return false; /* a freed huge block left the map: it cannot tell */
    heap_segment *seg = (heap_segment *)(u & ~HEAP_SEG_MASK);
    unsigned slice = (unsigned)(u >> HEAP_SLICE_SHIFT) & (HEAP_SLICES - 1);
    const heap_page *pg = LOAD(&seg->map[slice], RELAXED);
    if (!pg) /* a freed large block's first slice stays guarded */
        return slice && (LOAD(&seg->guard_mask, RELAXED) >> slice & 1) &&
               (u & (HEAP_SLICE_SIZE - 1)) < HEAP_OS_PAGE && !(u & 63);
    uint8_t kind = LOAD(&pg->kind, RELAXED);
    if (kind == HEAP_PAGE_LARGE) /* kept in a run cache */
        return LOAD(&pg->first, RELAXED) == p && page_used(pg) == 0;
    if (kind != HEAP_PAGE_SMALL && kind != HEAP_PAGE_BITMAP)
        return false;
    uint64_t off = u - (uintptr_t)pg->start;
    if (!page_block_at(pg, off))
        return false;
    uint64_t i = page_block_index(pg, off);
    if (kind == HEAP_PAGE_BITMAP && i < 64 && (LOAD(&pg->bits, RELAXED) >> i & 1))
        return true;
    return ((const heap_block *)p)->cookie == (u ^ mote__heap_key);
}

void mote__heap_invalid_free(const void *p, const char *what)
{
    char buf[160];
    const char *why = "";
    if (heap_free_already(p))
        why = strcmp(what, "free") == 0 || strcmp(what, "realloc") == 0
                  ? ": a double free (the block is free already)"
                  : ": the block is free already (a use after free)";
    snprintf(buf, sizeof buf, "mote: %s(): invalid pointer %p%s\n", what, p, why);
    mote__os_write_err(buf);
    abort();
}

HEAP_COLD void mote__heap_init_slow(void)
{
    bool first = false;
    heap_lock_acquire(&init_lock);
    if (!LOAD(&mote__heap_initialized, RELAXED)) {
        mote__sizeclass_init();
        heap_config_load();
        const uint8_t *rnd = (const uint8_t *)getauxval(AT_RANDOM);
        if (rnd) {
            uintptr_t k;
            memcpy(&k, rnd + 8, sizeof k);
            mote__heap_key ^= k;
        }
        mote__heap_key |= 1; /* never equal to an address-sized 0 cookie */
        if (mote__heap_cfg.limit)
            mote__arena_set_limit(mote__heap_cfg.limit);
        mote__prof_init();
        mote__tcache_init_once();
        /* Now, while the process most likely has one thread: registering
         * takes the kernel ~3 us then, 12-16 ms once there are two. */
        mote__heap_asym_init();
        STORE(&mote__heap_initialized, 1, RELEASE);
        first = true;
    }
    heap_lock_release(&init_lock);
    /* Outside the lock: pthread_atfork may allocate, which is fine now. */
    if (first)
        pthread_atfork(heap_fork_prepare, heap_fork_parent, heap_fork_child);
}

/* ---- allocation ---- */

#define HEAP_INLINE static inline __attribute__((always_inline))
/* A call out of a public entry point that must not become a tail call: the
 * entry point then keeps its frame, which the profiler's stack walk starts
 * from (its return address is the allocating code).  Costs nothing on the
 * fast path. */
#define HEAP_CALL(x)                           \
    ({                                         \
        __typeof__(x) heap_r_ = (x);           \
        __asm__ volatile("" : : "r"(heap_r_)); \
        heap_r_;                               \
    })
/* malloc itself instead ends in a tail call into its slow path (gcc keeps
 * its fast path frameless that way; clang pops its frame first): the slow
 * path's own return address is then the allocating code.  Only when
 * optimizing (-O0 makes no tail calls) and not under a sanitizer (TSan
 * instruments every function's exit, so no call out of one is a tail call). */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define HEAP_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define HEAP_SANITIZED 1
#endif
#endif
#if defined(__OPTIMIZE__) && !defined(HEAP_SANITIZED)
#define HEAP_TAIL_OK 1
#else
#define HEAP_TAIL_OK 0
#endif

/* The fast path.  The profiler's countdown is only touched with a block at
 * hand, so the static empty cache of a thread's first malloc is never
 * written; the slow path counts the allocations it serves itself.  tail:
 * the caller returns our result at once (a compile-time constant). */
HEAP_INLINE void *heap_alloc_cls(unsigned cls, size_t n, bool tail)
{
    heap_tcache *h = mote__heap_tls;
    heap_page *pg = h->cur[cls];
    heap_block *b = pg->free;
    if (HEAP_UNLIKELY(!b || (h->sample_left -= (int64_t)n) < 0)) {
        if (tail && HEAP_TAIL_OK)
            return mote__tcache_alloc_slow(h, cls, n, true);
        return HEAP_CALL(mote__tcache_alloc_slow(h, cls, n, false));
    }
    heap_block *next = b->next;
    pg->free = next;
    page_used_add(pg, 1);
    b->cookie = 0;
    return b;
}

/* Above HEAP_SMALL_MAX, or aligned beyond what a size class gives.  tail:
 * tail-called from the entry point (see heap_alloc_cls). */
static HEAP_NOINLINE void *heap_alloc_big(size_t n, size_t align, bool *zero, bool tail)
{
    heap_ensure_init();
    /* A block of 0 bytes must still own its address: with nothing to
     * hold, a 128 KiB-aligned one was put past the end of its run (the
     * next block's address), a 4 MiB-aligned one in the next unit. */
    if (n == 0)
        n = 1;
    size_t extra = align > HEAP_SLICE_SIZE ? align - HEAP_SLICE_SIZE : 0;
    heap_tcache *h = mote__heap_tls;
    bool exited = false;
    bool keepable = align <= 16 && n <= (size_t)HEAP_RUNCACHE_SLICES << HEAP_SLICE_SHIFT;
    bool large = n <= HEAP_LARGE_MAX && n + extra <= HEAP_LARGE_MAX;
    /* Past what pg[] keeps: the cache's one bigger block serves it, or
     * goes to the arena first (which may cut or grow it for this one). */
    bool big = n > (size_t)HEAP_RUNCACHE_SLICES << HEAP_SLICE_SHIFT;
    if (HEAP_UNLIKELY(h == &mote__heap_tcache_empty) &&
        (keepable || (big && align <= 64 && n <= HEAP_RUNCACHE_BIG_MAX) ||
         LOAD(&mote__prof_on, RELAXED))) {
        /* no cache (after the thread's exit, or big blocks only): one for
         * the blocks it will keep, and for the profiler's countdown, as a
         * small block would take */
        heap_tcache *t = mote__tcache_take(&exited);
        h = t ? t : h;
    }
    void *p = NULL;
    if (keepable) {
        heap_page *pg = mote__runcache_take(
            h, (uint32_t)((n + HEAP_SLICE_SIZE - 1) >> HEAP_SLICE_SHIFT), n);
        p = pg ? pg->first : NULL;
    }
    if (big && h != &mote__heap_tcache_empty) {
        heap_page *pg = mote__runcache_take_big(h, n, align);
        p = pg ? pg->first : NULL;
    }
    if (!p)
        p = large ? mote__arena_large_alloc(n, align)
                  : mote__arena_huge_alloc(n, align, zero != NULL);
    if (!p) {
        if (HEAP_UNLIKELY(exited))
            mote__tcache_give_back(h);
        return NULL;
    }
    bool sampled = h != &mote__heap_tcache_empty && (h->sample_left -= (int64_t)n) < 0;
    if (zero || sampled) {
        heap_segment *seg = heap_segment_of(p);
        uint8_t e = heap_segmap_get((uintptr_t)p >> HEAP_SEG_SHIFT);
        if (e >= 2)
            seg = (heap_segment *)((((uintptr_t)p >> HEAP_SEG_SHIFT) - (e - 2u))
                                   << HEAP_SEG_SHIFT);
        heap_page *pg =
            e >= 2 ? &seg->pages[0] : seg->map[((uintptr_t)p >> HEAP_SLICE_SHIFT) & 63];
        if (zero)
            *zero = pg->zeroed;
        if (sampled) { /* the entry point's frame: ours if it tail-called us */
            void **fp = __builtin_frame_address(0);
            mote__prof_note_big(h, pg, n, tail ? (void *)fp : fp[0]);
        }
    }
    if (HEAP_UNLIKELY(exited))
        mote__tcache_give_back(h);
    return p;
}

/* A block the thread's run cache may hold (32-256 KiB, no alignment),
 * taken straight from it (heap_alloc_big's general setup was a fifth of
 * such a malloc/free pair), unless the profiler's countdown runs out on it:
 * then the general path samples it.  Only tail-called by an entry point,
 * so its frame record is the entry point's for the profiler; out of line,
 * so the small blocks' fast path keeps no register for it (inlined, it
 * cost mallocbench a push and 2-5%). */
static HEAP_NOINLINE void *heap_alloc_kept(size_t n)
{
    heap_tcache *h = mote__heap_tls;
    if (LOAD(&h->runs.slices, RELAXED) && h->sample_left > (int64_t)n) {
        heap_page *pg = mote__runcache_take(
            h, (uint32_t)((n + HEAP_SLICE_SIZE - 1) >> HEAP_SLICE_SHIFT), n);
        if (pg) {
            h->sample_left -= (int64_t)n;
            return pg->first;
        }
    }
    return HEAP_CALL(heap_alloc_big(n, 0, NULL, false));
}

HEAP_INLINE void *heap_malloc_inline(size_t n, bool tail)
{
    if (HEAP_LIKELY(n <= HEAP_SMALL_MAX))
        return heap_alloc_cls(sizeclass_of(n), n, tail);
    if (tail && HEAP_TAIL_OK)
        return n <= (size_t)HEAP_RUNCACHE_SLICES << HEAP_SLICE_SHIFT
                   ? heap_alloc_kept(n)
                   : heap_alloc_big(n, 0, NULL, true);
    return HEAP_CALL(heap_alloc_big(n, 0, NULL, false));
}

/* ---- free ---- */

/* Finds the page of a pointer mote returned, or reports it and aborts. */
static heap_page *heap_page_of(const void *p, const char *what)
{
    uintptr_t u = (uintptr_t)p;
    uintptr_t idx = u >> HEAP_SEG_SHIFT;
    if (idx >= HEAP_SEGMAP_LEN || !heap_segmap_get(idx))
        mote__heap_invalid_free(p, what);
    uint8_t e = heap_segmap_get(idx);
    if (e >= 2) {
        heap_segment *seg = (heap_segment *)((idx - (e - 2u)) << HEAP_SEG_SHIFT);
        if (seg->magic != HEAP_SEG_MAGIC || seg->pages[0].first != p ||
            !page_used(&seg->pages[0]))
            mote__heap_invalid_free(p, what);
        return &seg->pages[0];
    }
    heap_segment *seg = (heap_segment *)(u & ~HEAP_SEG_MASK);
    heap_page *pg = seg->map[(u >> HEAP_SLICE_SHIFT) & 63];
    if (!pg)
        mote__heap_invalid_free(p, what);
    if (pg->kind == HEAP_PAGE_SMALL || pg->kind == HEAP_PAGE_BITMAP) {
        if (!page_block_at(pg, u - (uintptr_t)pg->start))
            mote__heap_invalid_free(p, what);
    } else if (pg->first != p || page_used(pg) != 1) {
        mote__heap_invalid_free(p, what);
    }
    return pg;
}

/* A large block's free, its pointer checked: kept in this thread's run
 * cache, or back to the arena.  The block itself is not touched. */
static HEAP_NOINLINE void heap_free_large(heap_page *pg)
{
    bool kept = pg->slices <= HEAP_RUNCACHE_SLICES
                    ? mote__runcache_put(mote__heap_tls, pg)
                    : mote__runcache_put_big(mote__heap_tls, pg);
    if (!kept)
        mote__arena_large_free(pg);
}

/* Checks that small block p is not free already and marks it free
 * (the cookie), for a free that does not go through the fast path. */
static inline heap_block *heap_block_freeing(void *p)
{
    heap_block *b = p;
    uintptr_t ck = (uintptr_t)p ^ mote__heap_key;
    if (b->cookie == ck)
        mote__heap_invalid_free(p, "free");
    b->cookie = ck;
    return b;
}

/* A block of a shadow's page (a sampled small block, see profile.c), pg
 * its page from a lookup made already: checked as heap_page_of would (again,
 * when it was heap_page_of's), home to the shadow without another lookup. */
static HEAP_NOINLINE void heap_free_sampled(heap_page *pg, void *p)
{
    if (!page_block_at(pg, (uintptr_t)p - (uintptr_t)pg->start))
        mote__heap_invalid_free(p, "free");
    mote__prof_free(pg, p);
    if (pg->kind == HEAP_PAGE_BITMAP) {
        mote__tcache_free_bitmap(pg, p);
        return;
    }
    heap_block *b = heap_block_freeing(p);
    heap_tcache *h = mote__heap_tls;
    if (page_owner(pg) == h->shadow) /* (h's line: the owner's is cold) */
        mote__tcache_free_shadow(h->shadow, pg, b);
    else
        mote__tcache_free_remote(pg, b);
}

/* Another thread's small block, going home (this thread's foreign list
 * has no room, or the owner keeps up), pg from the fast path's lookup:
 * checked as heap_page_of would, without heap_free_slow's second lookup
 * (a tenth of larson's time went to heap_free_slow); its address goes into
 * the message for its owner here, in the common case (heap_rbuf_try). */
static HEAP_NOINLINE void heap_free_home(heap_page *pg, void *p)
{
    arch_prefetch_write(p); /* another CPU wrote it: one transfer */
    if (!page_block_at(pg, (uintptr_t)p - (uintptr_t)pg->start))
        mote__heap_invalid_free(p, "free");
    heap_block *b = heap_block_freeing(p);
    if (!heap_rbuf_try(mote__heap_tls, page_owner(pg), b))
        mote__tcache_free_remote(pg, b);
}

static HEAP_NOINLINE void heap_free_slow(void *p)
{
    if (!p)
        return;
    /* Mostly a block another thread wrote: ask for it writable now, so the
     * cookie's load and store below cost one transfer, not two, and the
     * page lookup overlaps it. */
    arch_prefetch_write(p);
    heap_page *pg = heap_page_of(p, "free");
    if (HEAP_UNLIKELY(pg->prof)) {
        if (pg->kind == HEAP_PAGE_SMALL || pg->kind == HEAP_PAGE_BITMAP) {
            heap_free_sampled(pg, p);
            return;
        }
        mote__prof_free(pg, p);
    }
    if (pg->kind == HEAP_PAGE_HUGE) {
        if (!mote__runcache_put_big(mote__heap_tls, pg))
            mote__arena_huge_free(heap_segment_of(pg), p);
        return;
    }
    if (pg->kind == HEAP_PAGE_LARGE) {
        heap_free_large(pg);
        return;
    }
    if (pg->kind == HEAP_PAGE_BITMAP) {
        mote__tcache_free_bitmap(pg, p);
        return;
    }
    heap_block *b = heap_block_freeing(p);
    heap_tcache *h = mote__heap_tls;
    if (page_owner_raw(pg) == h) { /* only when called for a local block (realloc) */
        b->next = pg->free;
        pg->free = b;
        if (page_used_add(pg, -1) == 0 || pg->in_full)
            mote__tcache_page_freed(h, pg);
        return;
    }
    mote__tcache_free_remote(pg, b);
}

/* Whether a free of one of owner's blocks keeps it in this thread's foreign
 * list (if it has room) rather than sending it home: only while the owner
 * is not taking its blocks back now, because its thread exited or has
 * frees waiting already (descheduled, or busy elsewhere: oversubscribed
 * server churn would park them there; larson at 8 threads on 2 CPUs).  An
 * owner that keeps up gets its block back: kept here, the block would
 * stay foreign for good, every later free of it landing here again (two
 * long-lived threads that exchange 1 block in 64 pushed 36% of all their
 * frees onto these lists and ran 1.3-2.3x slower than with this rule). */
static inline bool foreign_keep(heap_tcache *owner)
{
    return LOAD(&owner->inbox, RELAXED) != 0 || LOAD(&owner->dead, RELAXED);
}

HEAP_INLINE void heap_free_inline(void *p)
{
    uintptr_t u = (uintptr_t)p;
    uintptr_t idx = u >> HEAP_SEG_SHIFT;
    if (HEAP_UNLIKELY(idx >= HEAP_SEGMAP_LEN || heap_segmap_get(idx) != 1)) {
        heap_free_slow(p);
        return;
    }
    heap_segment *seg = (heap_segment *)(u & ~HEAP_SEG_MASK);
    heap_page *pg = seg->map[(u >> HEAP_SLICE_SHIFT) & 63];
    heap_tcache *h = mote__heap_tls;
    heap_block *b = p;
    if (HEAP_UNLIKELY(!pg)) {
        heap_free_slow(p);
        return;
    }
    /* Checked on every path: a block's own address, in the carved part of
     * its page (a pointer into the rest would be handed out twice), and not
     * free already (the cookie). */
    uint64_t off = u - (uintptr_t)pg->start;
    if (HEAP_LIKELY(page_owner_raw(pg) == h)) {
        uintptr_t ck = u ^ mote__heap_key;
        if (HEAP_UNLIKELY(b->cookie == ck || !page_block_at(pg, off)))
            mote__heap_invalid_free(p, "free");
        b->cookie = ck;
        /* LIFO across the class: the next malloc reuses this (warm) block
         * (see HEAP_PAGE_RECENT) */
        heap_page *r = &h->recent[pg->cls];
        if (HEAP_UNLIKELY(page_used(r) == 0)) { /* full, or the class drains */
            mote__tcache_recent_full(h, pg, b);
            return;
        }
        list_page_push(r, b);
        h->cur[pg->cls] = r;
        return;
    }
    /* Another thread's block: into this thread's foreign list of its class
     * while there is room (see HEAP_PAGE_FOREIGN; the empty cache's lists
     * have none).  Not for a shadow's pages (prof) nor bitmap pages. */
    if (HEAP_LIKELY(pg->kind == HEAP_PAGE_SMALL && !pg->prof)) {
        heap_page *f = &h->foreign[pg->cls];
        if (HEAP_LIKELY(page_used(f) != 0) && foreign_keep(page_owner_raw(pg))) {
            arch_prefetch_write(b); /* another CPU wrote it: one transfer */
            if (HEAP_UNLIKELY(!page_block_at(pg, off) ||
                              b->cookie == (u ^ mote__heap_key)))
                mote__heap_invalid_free(p, "free");
            b->cookie = u ^ mote__heap_key;
            list_page_push(f, b);
            h->cur[pg->cls] = f;
            return;
        }
        heap_free_home(pg, p);
        return;
    } else if (pg->kind == HEAP_PAGE_BITMAP && !pg->prof) {
        /* (a stash push, mostly: one page lookup, not heap_free_slow's two) */
        if (HEAP_UNLIKELY(!page_block_at(pg, off)))
            mote__heap_invalid_free(p, "free");
        mote__tcache_free_bitmap(pg, p);
        return;
    } else if (pg->kind == HEAP_PAGE_LARGE && !pg->prof) {
        /* heap_page_of's check, on the lookup made above; and no
         * prefetch of a block its free never touches */
        if (HEAP_UNLIKELY(pg->first != p || page_used(pg) != 1))
            mote__heap_invalid_free(p, "free");
        heap_free_large(pg);
        return;
    } else if (pg->prof &&
               (pg->kind == HEAP_PAGE_SMALL || pg->kind == HEAP_PAGE_BITMAP)) {
        heap_free_sampled(pg, p);
        return;
    }
    heap_free_slow(p);
}

/* ---- the rest of the API (inlined into every entry point) ---- */

HEAP_INLINE size_t heap_page_usable(const heap_page *pg)
{
    if (pg->kind == HEAP_PAGE_LARGE || pg->kind == HEAP_PAGE_HUGE)
        return pg->usable;
    return HEAP_UNLIKELY(pg->prof) ? mote__prof_usable(pg) : pg->bsize;
}

/* what: the caller's name, for the message on an invalid pointer. */
HEAP_INLINE size_t heap_usable_size(const void *p, const char *what)
{
    return p ? heap_page_usable(heap_page_of(p, what)) : 0;
}

HEAP_INLINE void *heap_calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    if (total <= HEAP_SMALL_MAX) {
        void *p = heap_alloc_cls(sizeclass_of(total), total, false);
        if (p)
            memset(p, 0, total);
        return p;
    }
    bool zero = false;
    void *p = HEAP_CALL(heap_alloc_big(total, 0, &zero, false));
    if (p && !zero)
        memset(p, 0, total);
    return p;
}

HEAP_INLINE void *heap_memalign(size_t align, size_t n)
{
    if (align <= 16)
        return heap_malloc_inline(n, false);
    heap_ensure_init(); /* the class tables below */
    if (n <= HEAP_SMALL_MAX && align <= HEAP_SLICE_SIZE) {
        /* A block is aligned to every power of two dividing its class size,
         * because pages start on a slice boundary. */
        unsigned c = sizeclass_of(n < align ? align : n);
        while (c < HEAP_NCLS && mote__sizeclass_size[c] % align)
            c++;
        if (c < HEAP_NCLS) /* n: what the profiler records */
            return heap_alloc_cls(c, n, false);
    }
    return HEAP_CALL(heap_alloc_big(n, align, NULL, false));
}

/* A large or huge block realloc resized without a copy (in place, or moved
 * by mremap) is, for the profiler, the free of the old block and an
 * allocation of n at this call: its sample (if any) ends, and n counts
 * toward the next one like any allocation, so every such block is drawn
 * again at its new size.  A sample cannot just change its size: pprof
 * weighs it by the size it was drawn at (a shrunk block read 1.5x its
 * bytes).  (Small blocks keep their sample as it was: one not sampled has
 * no room to become so in place.) */
static HEAP_NOINLINE void heap_prof_resized(heap_page *pg, const void *p, size_t n)
{
    if (pg->prof)
        mote__prof_free(pg, p);
    heap_tcache *h = mote__heap_tls;
    if (h != &mote__heap_tcache_empty && (h->sample_left -= (int64_t)n) < 0) {
        void **fp = __builtin_frame_address(0); /* fp[0]: the entry point's */
        mote__prof_note_big(h, pg, n, fp[0]);
    }
}

/* A small block realloc keeps in place: for the profiler, the end of its
 * sample (if any) and an allocation of n, as for large blocks.  A block
 * that is drawn now has no trailer to hold the sample: it moves (the
 * malloc of the move, whose countdown is then below n, samples it).  (A
 * kept sample kept the size it was drawn at: 4000 -> 2100 read 4000; and
 * a sampled block has less room than an unsampled one, so its realloc
 * moved where the unsampled ones stayed and lost its sample: 1000 -> 1020
 * read 0.5% of the truth.) */
static HEAP_NOINLINE bool heap_prof_small_resized(heap_page *pg, const void *p, size_t n)
{
    if (pg->prof)
        mote__prof_free(pg, p); /* no-op for a block that was not sampled */
    heap_tcache *h = mote__heap_tls;
    if (h == &mote__heap_tcache_empty)
        return false;
    if (h->sample_left - (int64_t)n < 0)
        return true; /* the move's malloc subtracts n and samples */
    h->sample_left -= (int64_t)n;
    return false;
}

HEAP_INLINE void *heap_realloc(void *p, size_t n)
{
    if (!p)
        return heap_malloc_inline(n, false);
    if (n == 0) { /* glibc's behaviour: free and return NULL */
        heap_free_inline(p);
        return NULL;
    }
    heap_page *pg = heap_page_of(p, "realloc");
    size_t us = heap_page_usable(pg);
    /* A block free already: caught here, before a copy would read it and
     * whatever way out it takes (free's own check would name free). */
    if ((pg->kind == HEAP_PAGE_SMALL || pg->kind == HEAP_PAGE_BITMAP) &&
        HEAP_UNLIKELY(((const heap_block *)p)->cookie == ((uintptr_t)p ^ mote__heap_key)))
        mote__heap_invalid_free(p, "realloc");
    if (n <= us && n >= us / 2) {
        if (HEAP_LIKELY(!LOAD(&mote__prof_on, RELAXED)))
            return p;
        if (pg->kind == HEAP_PAGE_LARGE || pg->kind == HEAP_PAGE_HUGE)
            heap_prof_resized(pg, p, n);
        else if (heap_prof_small_resized(pg, p, n))
            goto move;
        return p;
    }
    /* A huge block stays huge: its pages move, no byte is copied (growing
     * a 64 MiB buffer in 1.6% steps copied 4 GB: 46x glibc's time; with
     * the profiler on, growing to 128 MiB took 64 s). */
    if (pg->kind == HEAP_PAGE_HUGE && n > HEAP_LARGE_MAX) {
        void *q = mote__arena_huge_realloc(heap_segment_of(pg), n);
        if (q) {
            if (LOAD(&mote__prof_on, RELAXED))
                heap_prof_resized(heap_page_of(q, "realloc"), q, n);
            return q;
        }
    }
move:;
    void *q = heap_malloc_inline(n, false);
    if (!q)
        return NULL; /* errno is ENOMEM; p stays valid */
    memcpy(q, p, n < us ? n : us);
    heap_free_inline(p);
    return q;
}

bool mote__heap_mapped(const void *p)
{
    uintptr_t idx = (uintptr_t)p >> HEAP_SEG_SHIFT;
    return idx < HEAP_SEGMAP_LEN && heap_segmap_get(idx) != 0;
}

void mote__heap_release_own(void)
{
    heap_ensure_init();
    mote__tcache_release_own();
}

void mote__heap_thread_idle(void) { mote__tcache_idle(); }

const void *mote__heap_thread_cache(void)
{
    heap_tcache *h = mote__heap_tls;
    return h == &mote__heap_tcache_empty ? NULL : h;
}

bool mote__heap_frees_waiting(const void *c)
{
    return c && mote__tcache_frees_waiting((const heap_tcache *)c);
}

void mote__heap_release_all(void)
{
    heap_ensure_init();
    mote__tcache_release_own();
    mote__tcache_collect_dead(true, 0);
    mote__tcache_release_own(); /* the message blocks that came home */
    mote__runcache_scavenge(0); /* other threads' kept large blocks */
    while (mote__arena_scavenge(0) == 0)
        ;
}

void mote__heap_limit_share(uint64_t limit, uint64_t others)
{
    heap_ensure_init();
    uint64_t bytes = mote__heap_cfg.limit;
    if (limit)
        bytes = others < limit - limit / 16 ? limit - others : limit / 16;
    if (bytes && !mote__arena_limited())
        mote__heap_set_limit(bytes); /* (which empties the run caches, once) */
    else
        mote__arena_set_limit(bytes);
}

int mote__heap_set_limit(uint64_t bytes)
{
    heap_ensure_init();
    int r = mote__arena_set_limit(bytes);
    /* Nothing is kept under a limit: what threads kept before it was set
     * goes back now, where the limit can reclaim it. */
    if (bytes)
        mote__runcache_scavenge(0);
    return r;
}

size_t mote__heap_committed_bytes(void) { return (size_t)mote__arena_committed(); }

__attribute__((destructor)) static void heap_fini(void)
{
    if (mote__heap_cfg.stats)
        mote__stats_print(mote__heap_cfg.stats == 2);
    mote__prof_write_at_exit();
}

/* Both libraries export it (libmote-malloc.so too: preloaded programs may
 * look it up with dlsym). */
MOTE_API int mote_heap_profile_write(int fd)
{
    heap_ensure_init();
    return mote__prof_write(fd);
}

__attribute__((constructor)) static void heap_ctor(void) { heap_ensure_init(); }

#ifndef MOTE_HEAP_PRELOAD
/* ---- libmote: mote_malloc & co. ---- */

MOTE_API void *mote_malloc(size_t size) { return heap_malloc_inline(size, true); }
MOTE_API void mote_free(void *p) { heap_free_inline(p); }
MOTE_API void *mote_calloc(size_t n, size_t size) { return heap_calloc(n, size); }
MOTE_API void *mote_realloc(void *p, size_t size) { return heap_realloc(p, size); }
MOTE_API size_t mote_usable_size(const void *p)
{
    return heap_usable_size(p, "mote_usable_size");
}
MOTE_API void *mote_aligned_alloc(size_t alignment, size_t size)
{
    if (alignment == 0 || (alignment & (alignment - 1))) {
        errno = EINVAL;
        return NULL;
    }
    return heap_memalign(alignment, size);
}

#else
/* ---- libmote-malloc.so: the C library's names ---- */
#include <malloc.h>
#include <stdlib.h>

MOTE_API void *malloc(size_t size) { return heap_malloc_inline(size, true); }
MOTE_API void free(void *p) { heap_free_inline(p); }
MOTE_API void *calloc(size_t n, size_t size) { return heap_calloc(n, size); }
MOTE_API void *realloc(void *p, size_t size) { return heap_realloc(p, size); }
MOTE_API size_t malloc_usable_size(void *p)
{
    return heap_usable_size(p, "malloc_usable_size");
}
MOTE_API void cfree(void *p) { heap_free_inline(p); }
MOTE_API void free_sized(void *p, size_t size)
{
    (void)size;
    heap_free_inline(p);
}
MOTE_API void free_aligned_sized(void *p, size_t align, size_t size)
{
    (void)align;
    (void)size;
    heap_free_inline(p);
}

MOTE_API void *reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return heap_realloc(p, total);
}

MOTE_API int posix_memalign(void **out, size_t align, size_t size)
{
    if (align < sizeof(void *) || (align & (align - 1)))
        return EINVAL;
    int saved = errno;
    void *p = heap_memalign(align, size);
    if (!p) {
        errno = saved;
        return ENOMEM;
    }
    *out = p;
    return 0;
}

MOTE_API void *aligned_alloc(size_t align, size_t size)
{
    if (align == 0 || (align & (align - 1))) {
        errno = EINVAL;
        return NULL;
    }
    return heap_memalign(align, size);
}

MOTE_API void *memalign(size_t align, size_t size)
{
    /* glibc rounds a non-power-of-two alignment up */
    if (align & (align - 1)) {
        if (align > ((size_t)1 << 62)) {
            errno = EINVAL;
            return NULL;
        }
        align = (size_t)1 << (64 - __builtin_clzl(align));
    }
    return heap_memalign(align, size);
}

MOTE_API void *valloc(size_t size) { return heap_memalign(HEAP_OS_PAGE, size); }

MOTE_API void *pvalloc(size_t size)
{
    size_t r = (size + HEAP_OS_PAGE - 1) & ~(HEAP_OS_PAGE - 1);
    if (r < size) {
        errno = ENOMEM;
        return NULL;
    }
    return heap_memalign(HEAP_OS_PAGE, r ? r : HEAP_OS_PAGE);
}

MOTE_API int malloc_trim(size_t pad)
{
    (void)pad;
    mote__heap_release_all();
    return 1;
}

/* glibc's introspection, answered with mote's numbers (a program that
 * accounts with them would otherwise read glibc's unused, empty arena).
 * arena: bytes held from the OS; hblks/hblkhd: blocks with their own
 * mapping; uordblks/fordblks: in use / free in what is held; keepcost:
 * what malloc_trim would give back. */
MOTE_API struct mallinfo2 mallinfo2(void)
{
    heap_ensure_init();
    heap_summary s;
    mote__stats_summary(&s);
    struct mallinfo2 mi = {0};
    mi.arena = s.mapped - s.released;
    mi.hblks = s.huge_count;
    mi.hblkhd = s.huge_inuse;
    mi.uordblks = s.inuse;
    mi.fordblks = s.free;
    mi.keepcost = s.free;
    return mi;
}

static int heap_int_field(size_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

/* The old form, with int fields: saturated at INT_MAX rather than wrapped. */
MOTE_API struct mallinfo mallinfo(void)
{
    struct mallinfo2 m = mallinfo2();
    struct mallinfo mi = {0};
    mi.arena = heap_int_field(m.arena);
    mi.hblks = heap_int_field(m.hblks);
    mi.hblkhd = heap_int_field(m.hblkhd);
    mi.uordblks = heap_int_field(m.uordblks);
    mi.fordblks = heap_int_field(m.fordblks);
    mi.keepcost = heap_int_field(m.keepcost);
    return mi;
}

MOTE_API void malloc_stats(void)
{
    heap_ensure_init();
    mote__stats_print(false);
}

/* glibc's tunables (M_MMAP_THRESHOLD, M_ARENA_MAX ...) have no meaning
 * here: accepted, as glibc accepts them, and ignored. */
MOTE_API int mallopt(int param, int value)
{
    (void)param;
    (void)value;
    return 1;
}

MOTE_API int malloc_info(int options, FILE *fp)
{
    if (options != 0 || !fp) {
        errno = EINVAL;
        return -1;
    }
    struct mallinfo2 m = mallinfo2(); /* before stdio, which may allocate */
    fprintf(fp,
            "<malloc version=\"mote\">\n"
            "<total type=\"held\" size=\"%zu\"/>\n"
            "<total type=\"inuse\" size=\"%zu\"/>\n"
            "<total type=\"free\" size=\"%zu\"/>\n"
            "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n"
            "</malloc>\n",
            m.arena, m.uordblks, m.fordblks, m.hblks, m.hblkhd);
    return ferror(fp) ? -1 : 0;
}

/* glibc's internal entry points, called by some programs and libraries. */
MOTE_API void *__libc_malloc(size_t size) { return heap_malloc_inline(size, true); }
MOTE_API void __libc_free(void *p) { heap_free_inline(p); }
MOTE_API void *__libc_calloc(size_t n, size_t size) { return heap_calloc(n, size); }
MOTE_API void *__libc_realloc(void *p, size_t size) { return heap_realloc(p, size); }
MOTE_API void *__libc_memalign(size_t align, size_t size)
{
    return memalign(align, size);
}
MOTE_API void *__libc_valloc(size_t size) { return valloc(size); }
MOTE_API void *__libc_pvalloc(size_t size) { return pvalloc(size); }
MOTE_API void *__libc_reallocarray(void *p, size_t n, size_t size)
{
    return reallocarray(p, n, size);
}
MOTE_API int __posix_memalign(void **out, size_t align, size_t size)
{
    return posix_memalign(out, align, size);
}

/* mote_mem_release is useful to preloaded programs that know about mote;
 * libmote's own (memory.c) also trims stacks. */
MOTE_API void mote_mem_release(void) { mote__heap_release_all(); }
#endif
