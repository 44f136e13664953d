/*
 * stack.h - fixed-address task stacks carved from large reservations.
 *
 * A stack class holds every slot of one size (a power of two, 8 KiB-1 GiB).
 * Slots live in chunks: one anonymous MAP_NORESERVE mapping each, holding
 * many slots, so a million stacks take a few hundred mappings, not a
 * million.  Slot layout, low to high: [guard STACK_GUARD][usable stack];
 * the top STACK_TOP_RESERVED bytes hold the owning task pointer (for the
 * overflow handler) and the free-list link.  A slot never moves while a task
 * owns it; freed slots are pooled per worker (no lock) and per class (lock).
 */
#ifndef MOTE_STACK_H
#define MOTE_STACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pagebatch;

#define STACK_GUARD        (16u * 1024)
#define STACK_TOP_RESERVED 32u
#define STACK_MIN          (8u * 1024)
#define STACK_MAX          ((size_t)1 << 30)
#define STACK_NCLASS       18 /* 8 KiB << 0 .. 1 GiB */
#define STACK_CACHE_MAX    128
#define STACK_CARVE_RUN    32 /* fresh slots a worker takes from a chunk at once */

/* A slot is named by its top (one past its highest byte, page aligned)
 * with its class in the low bits: 8 bytes in every task descriptor. */
typedef struct stack_slot {
    uintptr_t word;
} stack_slot;

/* A worker's private pool of free slots, per class, most recently used
 * first.  count is read by metrics from other threads (relaxed). */
typedef struct stack_cache {
    uintptr_t head[STACK_NCLASS]; /* slot tops, linked through the slot */
    uint32_t count[STACK_NCLASS];
    uint32_t low[STACK_NCLASS]; /* fewest held since the last decay */
    int64_t in_use;             /* slots this worker handed out, net */
    uintptr_t carve[STACK_NCLASS], carve_end[STACK_NCLASS]; /* fresh slots */
} stack_cache;

/* At the start of a run: how guards are made (MOTE_STACK_GUARD). */
void mote__stack_configure(bool force_mprotect);
/* Guards are MADV_GUARD_INSTALL markers (else mprotect), for metrics. */
bool mote__stack_guard_is_madvise(void);

/* The class for a requested size, or -EINVAL when out of range. */
int mote__stack_class_of(size_t size);

static inline size_t stack_class_size(int cls) { return (size_t)STACK_MIN << cls; }

static inline uintptr_t stack_top(const stack_slot *s)
{
    return s->word & ~(uintptr_t)0xfff;
}

static inline int stack_cls(const stack_slot *s) { return (int)(s->word & 0xfff); }

/* Lowest usable byte, just above the guard. */
static inline uintptr_t stack_lo(const stack_slot *s)
{
    return stack_top(s) - stack_class_size(stack_cls(s));
}

/* Whether a parked task's saved stack pointer sp lies in its own slot.  A
 * task that parks while running on a stack of its own making (makecontext)
 * does not: the trim and the freezer must leave it alone, since they act
 * on [sp, top) (a trim that followed such an sp decommitted unrelated
 * memory above the slot). */
static inline bool stack_holds_sp(const stack_slot *s, uintptr_t sp)
{
    return sp > stack_lo(s) && sp <= stack_top(s);
}

/* A slot of class cls not yet placed (a task that has not run). */
static inline stack_slot stack_unplaced(int cls) { return (stack_slot){(uintptr_t)cls}; }

/* Takes a slot of class cls, from cache first.  0 or -ENOMEM. */
int mote__stack_acquire(int cls, stack_cache *cache, stack_slot *out);
/* Returns a slot to cache (spilling half of a full cache to the class). */
void mote__stack_release(const stack_slot *s, stack_cache *cache);
/* Gives up a slot without touching its memory (a frozen task's, at the
 * end of a run, just before the whole registry goes): it is not reused. */
void mote__stack_abandon(const stack_slot *s, stack_cache *cache);
/* Moves every slot of cache back to the classes. */
void mote__stack_cache_drain(stack_cache *cache);
/* Whether a slot of class cls is there for any worker to take: a free,
 * cold or uncarved one, or a new chunk mapped now (kept for the next
 * acquire).  Slots in workers' caches do not count. */
bool mote__stack_can_map(int cls);

/* Records the owner of a slot (or NULL when it is released): at the slot's
 * top, for the overflow handler, and in the chunk's owner table, which
 * stays readable while the slot's pages are away (freeze.c). */
void mote__stack_set_owner(const stack_slot *s, void *owner);

/* Where an address lies among the stacks. */
typedef struct stack_where {
    uintptr_t top; /* the slot's top */
    size_t usable; /* its stack size */
    void *owner;   /* its task, or NULL */
    int chunk;     /* its chunk's index */
    bool guard;    /* addr is in the slot's guard */
} stack_where;
/* Async-signal-safe and lock-free: false when addr is in no chunk. */
bool mote__stack_locate(uintptr_t addr, stack_where *out);
/* The owners of the slots of chunk that overlap [lo, hi), in address
 * order, and the chunk's slot size: how many, or 0 when [lo, hi) is not
 * inside the chunk or more than max slots overlap it. */
size_t mote__stack_window(int chunk, uintptr_t lo, uintptr_t hi, void **owners,
                          size_t max, size_t *slot_size);
/* The range of a chunk, and true for the one caller that first claims it
 * (the freezer registers it with its userfaultfd once). */
bool mote__stack_chunk_claim(int chunk, uintptr_t *base, size_t *len);

/* Async-signal-safe: if addr is in some slot's guard, its owner pointer
 * (as stored by mote__stack_set_owner) and usable size; else false. */
bool mote__stack_guard_hit(uintptr_t addr, void **owner, size_t *size);

/* The slot after top in a cache's list (0 at the end). */
static inline uintptr_t stack_next(uintptr_t top) { return ((uintptr_t *)top)[-2]; }

/* Pool decay, every decay period and on memory pressure: slots that sat
 * unused for a whole period (or all, when all) are decommitted and go cold
 * (still reserved, reused before new slots are carved); the rest keep only
 * their top keep_depth bytes resident.  Owner worker only. */
void mote__stack_pool_decay(stack_cache *cache, struct pagebatch *b, uint64_t keep_depth,
                            bool all);
/* Slots held by cache, all classes. */
uint64_t mote__stack_cache_count(const stack_cache *cache);
/* Slots pooled: free in caches (summed by the caller), class lists, cold. */
uint64_t mote__stack_pooled_global(void);

/* Unmaps every chunk: only when no task exists (end of mote_run). */
void mote__stack_reset(void);

uint64_t mote__stack_reserved_bytes(void);
uint64_t mote__stack_resident_bytes(void); /* measured: /proc/self/smaps */

#endif /* MOTE_STACK_H */
