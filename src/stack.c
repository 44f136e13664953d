/*
 * stack.c - stack slots, chunks and pools (see stack.h).
 *
 * Locking: each class has a spin lock over its free list and bump pointer.
 * The chunk registry is append-only while a runtime runs: entries are
 * written before the count is published (release), so the overflow handler
 * and metric readers walk it without a lock; mote__stack_reset, which empties it,
 * runs only when no task exists.  Per-worker caches are owned by their
 * worker and need no lock.
 */
#include "stack.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "atomic.h"
#include "debug.h"
#include "mote.h"
#include "os/os.h"
#include "pagebatch.h"
#include "spin.h"

#if defined(__SANITIZE_ADDRESS__)
#define STACK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STACK_ASAN 1
#endif
#endif
#ifdef STACK_ASAN
#include <sanitizer/asan_interface.h>
#endif

#define STACK_MAX_CHUNKS 65536

typedef struct stack_chunk {
    uintptr_t base, end;
    size_t slot_size; /* guard + usable */
    void **owners;    /* atomic: the task of each slot (freeze.c reads it) */
    int registered;   /* atomic: registered with the freezer's userfaultfd */
    /* Under the owning class's lock (never read by the overflow handler): */
    int64_t out; /* slots handed out and not cold since */
    bool dirty;  /* a slot was handed out since the chunk was renewed */
} stack_chunk;

typedef struct stack_class {
    int lock;
    uintptr_t free_head; /* slot tops linked through the slot */
    uint64_t free_count;
    uintptr_t bump, bump_end; /* unused slots of the newest chunk */
    uintptr_t *cold;          /* decommitted slots: no resident page at all */
    uint64_t ncold, capcold;
    stack_chunk *last;   /* chunk of the last lookup */
    bool cold_unguarded; /* chunks were renewed: cold slots need guards */
} stack_class;

static stack_class stack_classes[STACK_NCLASS];
static bool stack_guard_madvise; /* atomic: set by mote__stack_configure, per run;
                                     metrics read it from any thread */
static stack_chunk stack_chunks[STACK_MAX_CHUNKS];
static uint32_t stack_nchunks; /* published with release */
static int stack_chunk_lock;

#define STACK_LINK(top) (((uintptr_t *)(top))[-2])

void mote__stack_configure(bool force_mprotect)
{
    STORE(&stack_guard_madvise, !force_mprotect && mote__os_guard_madvise_works(),
          RELAXED);
}

bool mote__stack_guard_is_madvise(void) { return LOAD(&stack_guard_madvise, RELAXED); }

int mote__stack_class_of(size_t size)
{
    if (size < STACK_MIN || size > STACK_MAX)
        return -EINVAL;
    int c = 0;
    while (((size_t)STACK_MIN << c) < size)
        c++;
    return c;
}

static size_t stack_slot_bytes(int cls) { return stack_class_size(cls) + STACK_GUARD; }

/* The chunk holding addr, a slot address of class k; class lock held. */
static stack_chunk *stack_chunk_of(stack_class *k, uintptr_t addr)
{
    stack_chunk *c = k->last;
    if (c && addr >= c->base && addr < c->end)
        return c;
    uint32_t n = LOAD(&stack_nchunks, ACQUIRE);
    for (uint32_t i = 0; i < n; i++)
        if (addr >= stack_chunks[i].base && addr < stack_chunks[i].end)
            return k->last = &stack_chunks[i];
    return NULL;
}

/* A slot leaves the cold or fresh state; class lock held. */
static void stack_chunk_out(stack_class *k, uintptr_t top)
{
    stack_chunk *c = stack_chunk_of(k, top - 1);
    if (c) {
        c->out++;
        c->dirty = true;
    }
}

/* Maps a new chunk for cls; called with the class lock held. */
static int stack_grow(int cls, stack_class *k)
{
    size_t slot = stack_slot_bytes(cls);
    size_t nslots = ((size_t)1 << 30) / slot;
    if (nslots < 16)
        nslots = 16;
    if (nslots > 4096)
        nslots = 4096;
    size_t len = nslots * slot;
    spin_lock(&stack_chunk_lock);
    uint32_t n = LOAD(&stack_nchunks, RELAXED);
    if (n == STACK_MAX_CHUNKS) {
        spin_unlock(&stack_chunk_lock);
        return -ENOMEM;
    }
    void *p = mote__os_reserve(len, "mote-stacks");
    if (!p) {
        spin_unlock(&stack_chunk_lock);
        return -ENOMEM;
    }
    void **owners = mote_calloc(nslots, sizeof *owners);
    if (!owners) {
        mote__os_release(p, len);
        spin_unlock(&stack_chunk_lock);
        return -ENOMEM;
    }
    stack_chunks[n] =
        (stack_chunk){(uintptr_t)p, (uintptr_t)p + len, slot, owners, 0, 0, false};
    STORE(&stack_nchunks, n + 1, RELEASE);
    spin_unlock(&stack_chunk_lock);
    k->bump = (uintptr_t)p;
    k->bump_end = (uintptr_t)p + len;
    return 0;
}

static void stack_fill(int cls, uintptr_t top, stack_slot *out)
{
    out->word = top | (uintptr_t)cls;
#ifdef STACK_ASAN
    /* A task that was discarded or exited mid-frame leaves poisoned
     * redzones behind; the next owner must start clean. */
    __asan_unpoison_memory_region((void *)stack_lo(out), stack_class_size(cls));
#endif
}

/* Refills cache from the class: free slots first, then fresh ones. */
static void stack_refill(int cls, stack_cache *cache)
{
    stack_class *k = &stack_classes[cls];
    unsigned want = STACK_CACHE_MAX / 4;
    if (!LOAD(&k->free_count, RELAXED))
        return; /* the common case while a program grows: skip the lock */
    spin_lock(&k->lock);
    while (cache->count[cls] < want && k->free_head) {
        uintptr_t top = k->free_head;
        k->free_head = STACK_LINK(top);
        STORE(&k->free_count, k->free_count - 1, RELAXED);
        STACK_LINK(top) = cache->head[cls];
        cache->head[cls] = top;
        STORE(&cache->count[cls], cache->count[cls] + 1, RELAXED);
    }
    spin_unlock(&k->lock);
}

static void stack_make_cold(int cls, const uintptr_t *tops, size_t n);

static bool stack_take_cold(int cls, uintptr_t *top)
{
    stack_class *k = &stack_classes[cls];
    if (!LOAD(&k->ncold, RELAXED))
        return false;
    bool ok = false;
    bool guard = false;
    spin_lock(&k->lock);
    if (k->ncold) {
        *top = k->cold[k->ncold - 1];
        STORE(&k->ncold, k->ncold - 1, RELAXED);
        stack_chunk_out(k, *top);
        guard = k->cold_unguarded;
        ok = true;
    }
    spin_unlock(&k->lock);
    /* After a renewal the slot may have lost its guard; installing one
     * again over an existing guard is harmless. */
    if (guard && mote__os_guard((void *)(*top - stack_slot_bytes(cls)), STACK_GUARD,
                                LOAD(&stack_guard_madvise, RELAXED))) {
        stack_make_cold(cls, top, 1);
        return false;
    }
    return ok;
}

/* Carves a never-used slot.  Its memory is not touched here: the first
 * page fault belongs to the worker that runs the task, not the spawner. */
static int stack_fresh(int cls, stack_cache *cache, uintptr_t *top)
{
    size_t slot = stack_slot_bytes(cls);
    stack_class *k = &stack_classes[cls];
    if (cache->carve[cls] == cache->carve_end[cls]) {
        /* Each worker carves a run of neighbouring slots, so workers fault
         * in stacks under different page-table pages instead of fighting
         * over the same page-table lock. */
        spin_lock(&k->lock);
        if (k->bump == k->bump_end) {
            int r = stack_grow(cls, k);
            if (r) {
                spin_unlock(&k->lock);
                return r;
            }
        }
        size_t n = (k->bump_end - k->bump) / slot;
        if (n > STACK_CARVE_RUN)
            n = STACK_CARVE_RUN;
        cache->carve[cls] = k->bump;
        cache->carve_end[cls] = k->bump + n * slot;
        k->bump += n * slot;
        spin_unlock(&k->lock);
    }
    uintptr_t base = cache->carve[cls];
    cache->carve[cls] += slot;
    /* Counted under the class lock: a renewal of its chunk (which happens
     * only when nothing of the chunk is out) then either finished before
     * this slot's guard goes in, or cannot start until it is cold again. */
    spin_lock(&k->lock);
    stack_chunk_out(k, base + slot);
    spin_unlock(&k->lock);
    int r =
        mote__os_guard((void *)base, STACK_GUARD, LOAD(&stack_guard_madvise, RELAXED));
    if (r)
        return r; /* the slot stays unused: an address-space leak only */
    *top = base + stack_slot_bytes(cls);
    return 0;
}

int mote__stack_acquire(int cls, stack_cache *cache, stack_slot *out)
{
    uintptr_t top;
    if (!cache->head[cls])
        stack_refill(cls, cache);
    if (cache->head[cls]) {
        top = cache->head[cls];
        cache->head[cls] = STACK_LINK(top);
        STORE(&cache->count[cls], cache->count[cls] - 1, RELAXED);
        if (cache->count[cls] < cache->low[cls])
            cache->low[cls] = cache->count[cls];
    } else if (!stack_take_cold(cls, &top)) {
        int r = stack_fresh(cls, cache, &top);
        if (r)
            return r;
    }
    STORE(&cache->in_use, cache->in_use + 1, RELAXED);
    stack_fill(cls, top, out);
    return 0;
}

/* Detaches the slots of cache's class cls after its keep most recently
 * used ones; returns them as a list (0 when there are none). */
static uintptr_t stack_cache_cut(stack_cache *cache, int cls, uint32_t keep)
{
    if (cache->count[cls] <= keep)
        return 0;
    uintptr_t cut;
    if (keep) {
        uintptr_t prev = cache->head[cls];
        for (uint32_t i = 1; i < keep; i++)
            prev = STACK_LINK(prev);
        cut = STACK_LINK(prev);
        STACK_LINK(prev) = 0;
    } else {
        cut = cache->head[cls];
        cache->head[cls] = 0;
    }
    STORE(&cache->count[cls], keep, RELAXED);
    if (cache->low[cls] > keep)
        cache->low[cls] = keep;
    return cut;
}

/* Moves all but the keep most recently used slots of cache to the class. */
static void stack_spill(int cls, stack_cache *cache, unsigned keep)
{
    uintptr_t moved = stack_cache_cut(cache, cls, keep);
    if (!moved)
        return;
    uintptr_t last = moved;
    uint64_t n = 1;
    while (STACK_LINK(last)) {
        last = STACK_LINK(last);
        n++;
    }
    stack_class *k = &stack_classes[cls];
    spin_lock(&k->lock);
    STACK_LINK(last) = k->free_head;
    k->free_head = moved;
    STORE(&k->free_count, k->free_count + n, RELAXED);
    spin_unlock(&k->lock);
}

static size_t stack_cache_take_lru(stack_cache *cache, int cls, size_t n, uintptr_t *tops)
{
    uint32_t count = cache->count[cls];
    if (n > count)
        n = count;
    uintptr_t t = stack_cache_cut(cache, cls, count - (uint32_t)n);
    for (size_t i = 0; i < n; i++, t = STACK_LINK(t))
        tops[i] = t;
    return n;
}

static size_t stack_class_take_free(int cls, uintptr_t *tops, size_t max)
{
    stack_class *k = &stack_classes[cls];
    if (!LOAD(&k->free_count, RELAXED))
        return 0;
    size_t n = 0;
    spin_lock(&k->lock);
    while (n < max && k->free_head) {
        tops[n++] = k->free_head;
        k->free_head = STACK_LINK(k->free_head);
    }
    STORE(&k->free_count, k->free_count - n, RELAXED);
    spin_unlock(&k->lock);
    return n;
}

/* Every slot of chunk c that was handed out is cold again: renew the chunk,
 * which gives back its page tables too (guard markers live in them, so
 * they never empty otherwise).  Untouched slots in workers' carve runs
 * lose nothing: their guards go in when they are handed out.  Class lock
 * held. */
static void stack_renew_chunk(stack_class *k, stack_chunk *c)
{
    if (mote__os_renew((void *)c->base, c->end - c->base, "mote-stacks") == 0) {
        STORE(&c->registered, 0, RELEASE); /* the new mapping is not */
        c->dirty = false;
        k->cold_unguarded = true;
    }
}

static void stack_make_cold(int cls, const uintptr_t *tops, size_t n)
{
    stack_class *k = &stack_classes[cls];
    spin_lock(&k->lock);
    if (k->ncold + n > k->capcold) {
        uint64_t cap = k->capcold ? k->capcold : 256;
        while (cap < k->ncold + n)
            cap *= 2;
        uintptr_t *v = mote_realloc(k->cold, cap * sizeof *v);
        if (!v) {
            spin_unlock(&k->lock);
            return; /* the slots stay unused: address space only */
        }
        k->cold = v;
        k->capcold = cap;
    }
    memcpy(k->cold + k->ncold, tops, n * sizeof *tops);
    STORE(&k->ncold, k->ncold + n, RELAXED);
    for (size_t i = 0; i < n; i++) {
        stack_chunk *c = stack_chunk_of(k, tops[i] - 1);
        if (c && --c->out == 0 && c->dirty)
            stack_renew_chunk(k, c);
    }
    spin_unlock(&k->lock);
}

uint64_t mote__stack_pooled_global(void)
{
    uint64_t n = 0;
    for (int c = 0; c < STACK_NCLASS; c++)
        n += LOAD(&stack_classes[c].free_count, RELAXED) +
             LOAD(&stack_classes[c].ncold, RELAXED);
    return n;
}

/* The chunk holding addr (lock-free: the registry only grows while a run
 * lasts); -1 when none. */
static int stack_chunk_index(uintptr_t addr)
{
    static __thread uint32_t last;
    uint32_t n = LOAD(&stack_nchunks, ACQUIRE);
    if (last < n && addr >= stack_chunks[last].base && addr < stack_chunks[last].end)
        return (int)last;
    for (uint32_t i = 0; i < n; i++)
        if (addr >= stack_chunks[i].base && addr < stack_chunks[i].end) {
            last = i;
            return (int)i;
        }
    return -1;
}

static size_t stack_slot_index(const stack_slot *s, const stack_chunk **c)
{
    int i = stack_chunk_index(stack_top(s) - 1);
    mote__assert(i >= 0);
    *c = &stack_chunks[i];
    return (stack_top(s) - 1 - (*c)->base) / (*c)->slot_size;
}

static void stack_slot_owned(const stack_slot *s, void *owner)
{
    const stack_chunk *c;
    size_t i = stack_slot_index(s, &c);
    STORE(&c->owners[i], owner, RELEASE);
}

/* Whether top is in cache's list of class cls (debug checks only). */
__attribute__((unused)) static bool stack_cache_holds(const stack_cache *cache, int cls,
                                                      uintptr_t top)
{
    for (uintptr_t t = cache->head[cls]; t; t = STACK_LINK(t))
        if (t == top)
            return true;
    return false;
}

void mote__stack_release(const stack_slot *s, stack_cache *cache)
{
    int cls = stack_cls(s);
    uintptr_t top = stack_top(s);
    mote__assert(cls < STACK_NCLASS && top && !(top & (OS_PAGE - 1)));
    mote__assert(cache->in_use > 0);
    stack_slot_owned(s, NULL);
    mote__assert_expensive(!stack_cache_holds(cache, cls, top));
    STACK_LINK(top) = cache->head[cls];
    cache->head[cls] = top;
    STORE(&cache->count[cls], cache->count[cls] + 1, RELAXED);
    STORE(&cache->in_use, cache->in_use - 1, RELAXED);
    if (cache->count[cls] > STACK_CACHE_MAX)
        stack_spill(cls, cache, STACK_CACHE_MAX / 2);
}

void mote__stack_abandon(const stack_slot *s, stack_cache *cache)
{
    mote__assert(cache->in_use > 0);
    stack_slot_owned(s, NULL);
    STORE(&cache->in_use, cache->in_use - 1, RELAXED);
}

bool mote__stack_can_map(int cls)
{
    stack_class *k = &stack_classes[cls];
    spin_lock(&k->lock);
    bool ok =
        k->free_head || k->ncold || k->bump != k->bump_end || stack_grow(cls, k) == 0;
    spin_unlock(&k->lock);
    return ok;
}

void mote__stack_cache_drain(stack_cache *cache)
{
    for (int c = 0; c < STACK_NCLASS; c++)
        if (cache->head[c])
            stack_spill(c, cache, 0);
}

void mote__stack_set_owner(const stack_slot *s, void *owner)
{
    ((void **)stack_top(s))[-1] = owner;
    stack_slot_owned(s, owner);
}

bool mote__stack_locate(uintptr_t addr, stack_where *out)
{
    int i = stack_chunk_index(addr);
    if (i < 0)
        return false;
    const stack_chunk *c = &stack_chunks[i];
    size_t idx = (addr - c->base) / c->slot_size;
    out->chunk = i;
    out->top = c->base + (idx + 1) * c->slot_size;
    out->usable = c->slot_size - STACK_GUARD;
    out->guard = addr - (c->base + idx * c->slot_size) < STACK_GUARD;
    out->owner = LOAD(&c->owners[idx], ACQUIRE);
    return true;
}

size_t mote__stack_window(int chunk, uintptr_t lo, uintptr_t hi, void **owners,
                          size_t max, size_t *slot_size)
{
    const stack_chunk *c = &stack_chunks[chunk];
    if (lo < c->base || hi > c->end || lo >= hi)
        return 0;
    size_t first = (lo - c->base) / c->slot_size,
           last = (hi - 1 - c->base) / c->slot_size;
    if (last - first + 1 > max)
        return 0;
    for (size_t i = first; i <= last; i++)
        owners[i - first] = LOAD(&c->owners[i], ACQUIRE);
    *slot_size = c->slot_size;
    return last - first + 1;
}

bool mote__stack_chunk_claim(int chunk, uintptr_t *base, size_t *len)
{
    stack_chunk *c = &stack_chunks[chunk];
    *base = c->base;
    *len = c->end - c->base;
    int expect = 0;
    return CAS(&c->registered, &expect, 1, ACQ_REL);
}

bool mote__stack_guard_hit(uintptr_t addr, void **owner, size_t *size)
{
    uint32_t n = LOAD(&stack_nchunks, ACQUIRE);
    for (uint32_t i = 0; i < n; i++) {
        const stack_chunk *c = &stack_chunks[i];
        if (addr < c->base || addr >= c->end)
            continue;
        uintptr_t off = (addr - c->base) % c->slot_size;
        if (off >= STACK_GUARD)
            return false;
        uintptr_t top = addr - off + c->slot_size;
        *owner = ((void **)top)[-1];
        *size = c->slot_size - STACK_GUARD;
        return true;
    }
    return false;
}

void mote__stack_reset(void)
{
    spin_lock(&stack_chunk_lock);
    uint32_t n = LOAD(&stack_nchunks, RELAXED);
    STORE(&stack_nchunks, 0, RELEASE);
    for (uint32_t i = 0; i < n; i++) {
        mote__os_release((void *)stack_chunks[i].base,
                         stack_chunks[i].end - stack_chunks[i].base);
        mote_free(stack_chunks[i].owners);
    }
    for (int c = 0; c < STACK_NCLASS; c++)
        mote_free(stack_classes[c].cold);
    memset(stack_classes, 0, sizeof stack_classes);
    spin_unlock(&stack_chunk_lock);
}

uint64_t mote__stack_reserved_bytes(void)
{
    uint32_t n = LOAD(&stack_nchunks, ACQUIRE);
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++)
        total += stack_chunks[i].end - stack_chunks[i].base;
    return total;
}

uint64_t mote__stack_resident_bytes(void)
{
    static uintptr_t lo[STACK_MAX_CHUNKS], hi[STACK_MAX_CHUNKS];
    static int scratch_lock;
    /* smaps is read under a lock only to share the scratch arrays. */
    spin_lock(&scratch_lock);
    uint32_t n = LOAD(&stack_nchunks, ACQUIRE);
    for (uint32_t i = 0; i < n; i++) {
        lo[i] = stack_chunks[i].base;
        hi[i] = stack_chunks[i].end;
    }
    uint64_t r = n ? mote__os_rss_in_ranges(lo, hi, n) : 0;
    spin_unlock(&scratch_lock);
    return r;
}

uint64_t mote__stack_cache_count(const stack_cache *cache)
{
    uint64_t n = 0;
    for (int c = 0; c < STACK_NCLASS; c++)
        n += cache->count[c];
    return n;
}

void mote__stack_pool_decay(stack_cache *cache, pagebatch *b, uint64_t keep_depth,
                            bool all)
{
    uintptr_t tops[256];
    keep_depth = (keep_depth + OS_PAGE - 1) & ~(uint64_t)(OS_PAGE - 1);
    for (int c = 0; c < STACK_NCLASS; c++) {
        size_t size = stack_class_size(c);
        /* Slots that sat unused for a whole period (never below `low`):
         * decommitted whole, they go cold. */
        size_t ncold = all ? cache->count[c] : cache->low[c];
        while (ncold) {
            size_t n = stack_cache_take_lru(cache, c, ncold < 256 ? ncold : 256, tops);
            if (!n)
                break;
            ncold -= n;
            for (size_t i = 0; i < n; i++)
                mote__pagebatch_range(b, tops[i] - size, tops[i]);
            mote__pagebatch_flush(b); /* before the slots are visible as cold */
            stack_make_cold(c, tops, n);
        }
        /* Slots that caches spilled to the class sat there unused too. */
        size_t n;
        while ((n = stack_class_take_free(c, tops, 256))) {
            for (size_t i = 0; i < n; i++)
                mote__pagebatch_range(b, tops[i] - size, tops[i]);
            mote__pagebatch_flush(b);
            stack_make_cold(c, tops, n);
        }
        /* Warm slots keep their top keep_depth bytes. */
        if (keep_depth < size) {
            for (uintptr_t t = cache->head[c]; t; t = stack_next(t))
                mote__pagebatch_range(b, t - size, t - keep_depth);
        }
        cache->low[c] = cache->count[c];
    }
    mote__pagebatch_flush(b);
}
