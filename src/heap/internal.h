/*
 * internal.h - the allocator's data structures, shared by the files of src/heap/.
 *
 * Memory layout (see docs/heap.md):
 *   segment  4 MiB, 4 MiB-aligned, from one MAP_NORESERVE mmap; 64 slices of
 *            64 KiB.  Slice 0 holds the segment header; slices 1..63 are
 *            handed out as runs ("pages").
 *   page     a run of 1..63 slices with one descriptor in its segment's
 *            header.  A small page holds blocks of one size class and
 *            belongs to one thread cache; a large page holds one block and
 *            belongs to the arena.
 *   huge     an allocation above HEAP_LARGE_MAX: its own mapping with a
 *            segment header (kind HEAP_SEG_HUGE) in front.
 * Any pointer mote returned is found from its address alone:
 *   mote__heap_segmap[p >> 22] says whether p's 4 MiB unit is ours; the segment is
 *   p & ~(4 MiB - 1); the page is seg->map[(p >> 16) & 63].
 *
 * Ownership rules (the invariants every file relies on):
 *   - page fields are touched only by the owner: the thread whose cache
 *     holds the page, or whoever holds the pool lock for a dead cache, or
 *     the arena lock for large pages.  Nobody else writes a small page:
 *     a block freed by another thread travels to the owning cache's inbox
 *     (batched in the freeing thread's cache first), and the owner puts it
 *     back on its page;
 *   - segment fields (masks, map, since) change only under the arena lock.
 */
#ifndef MOTE_HEAP_INTERNAL_H
#define MOTE_HEAP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "atomic.h"
#include "heap/asym.h"
#include "heap/lock.h"
#include "list.h"

#define HEAP_LIKELY(x)   __builtin_expect(!!(x), 1)
#define HEAP_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define HEAP_NOINLINE    __attribute__((noinline))
#define HEAP_COLD        __attribute__((noinline, cold))

#define HEAP_SEG_SHIFT   22
#define HEAP_SEG_SIZE    (1UL << HEAP_SEG_SHIFT)
#define HEAP_SEG_MASK    (HEAP_SEG_SIZE - 1)
#define HEAP_SLICE_SHIFT 16
#define HEAP_SLICE_SIZE  (1UL << HEAP_SLICE_SHIFT)
#define HEAP_SLICES      64
#define HEAP_OS_PAGE     4096UL
/* Address space covered by the segment map: 2^47 (x86-64 user space). */
#define HEAP_SEGMAP_LEN  (1UL << (47 - HEAP_SEG_SHIFT))

/* Size classes: 1..40, 16..32768 bytes; class 0 marks large/huge pages.
 * Bigger blocks are large ones, each a run of slices of its own (arena.c),
 * which a thread keeps a few of when it frees them (runcache.c).  Classes
 * up to 128 KiB put blocks a thread uses two of in its life in pages of 4,
 * each on slices of its own: churn (8 threads) faulted 1,500 pages for its
 * 32-128 KiB blocks against tcmalloc's 190; as large blocks its peak RSS
 * fell from 21.5 to 16.9 MiB. */
#define HEAP_NCLS        41
#define HEAP_SMALL_MAX   32768UL
/* Larger requests than this get their own mapping. */
#define HEAP_LARGE_MAX   (2UL << 20)
/* Blocks of a small page are carved lazily, about this many bytes at a time,
 * so a fresh page costs RSS only for what is used. */
#define HEAP_CARVE_BYTES 4096UL

enum { HEAP_SEG_SMALL = 1, HEAP_SEG_HUGE = 2 };
/* What a small segment's slices serve (arena.c: "uses"). */
enum { HEAP_USE_ANY = 0, HEAP_USE_PAGES = 1, HEAP_USE_LARGE = 2 };
enum {
    HEAP_PAGE_FREE = 0,
    HEAP_PAGE_SMALL = 1,   /* blocks on an intrusive free list (classes <= 4 KiB) */
    HEAP_PAGE_LARGE = 2,   /* one block, a slice run */
    HEAP_PAGE_HUGE = 3,    /* one block, its own mapping */
    HEAP_PAGE_BITMAP = 4,  /* blocks in a bitmap (classes > 4 KiB), see below */
    HEAP_PAGE_FOREIGN = 5, /* a cache's list of other caches' blocks, see below */
    HEAP_PAGE_STASH = 6,   /* a cache's list of its own bitmap blocks, see below */
    HEAP_PAGE_RECENT = 7,  /* a cache's list of its own small blocks, see below */
};
/* Classes from this one up (5 KiB..32 KiB) use bitmap pages: the free set
 * is an atomic word (bit i: block i is free), so the scavenger can claim
 * free blocks and give their whole OS pages back while the page still has
 * live blocks, without the owner.  Their malloc and free take the slow path
 * (the class's cur[] is always the empty page; the page's owner field is
 * tagged so the free fast path never matches). */
#define HEAP_BITMAP_CLS   29
#define HEAP_BM_PURGING   (1ULL << 63) /* the scavenger holds claimed bits */
#define HEAP_BM_MAXBLOCKS 62           /* blocks per bitmap page, at most */
#define HEAP_BM_TAIL      (1ULL << 62) /* in purged: the page's tail is released */
/* In bits: the page left its owner for the arena (bm_retire).  The
 * scavenger never claims such a page: once it is back in the arena its
 * slices may serve another page at once, whose bytes a release of the old
 * page's tail would wipe. */
#define HEAP_BM_RETIRED   (1ULL << 62)
typedef struct heap_block {
    struct heap_block *next;
    uintptr_t cookie; /* (address ^ mote__heap_key) while free: double-free check */
} heap_block;

struct heap_tcache;

/* 128-byte aligned: descriptors of pages owned by different threads sit
 * side by side in a segment header and must not share cache lines.  Two
 * lines: the first is read by everyone and written only when the page is
 * set up (a free from another thread reads it: owner, geometry), the second
 * holds what the owner writes on every malloc and free.  Kept apart, a
 * producer's mallocs do not pull the line a consumer's frees read from
 * under it (xthread on two cores).  Fields are "owner-only" unless marked:
 * see the file comment. */
typedef struct __attribute__((aligned(128))) heap_page {
    /* ---- first line: read-mostly ---- */
    uint8_t *start;            /* first byte of the run */
    struct heap_tcache *owner; /* set before the page's first block is handed
                                  out; read by remote frees (bitmap pages:
                                  tagged, see page_owner); changes while its
                                  cache is dead (atomic) */
    uint64_t div_magic;        /* ceil(2^40 / bsize): offset -> block index */
    uint64_t prof_info;    /* large/huge sampled by the profiler: bucket << 40 | size */
    uint32_t bsize;        /* block size (small and bitmap pages) */
    uint32_t reserved;     /* blocks that fit */
    uint32_t slices;       /* length of the run */
    uint8_t cls;           /* size class, 0 for large/huge */
    uint8_t kind;          /* HEAP_PAGE_* */
    uint8_t zeroed;        /* large/huge: the block is known to be zero */
    uint8_t prof;          /* holds blocks sampled by the profiler (stats.c) */
    uint32_t purge_allocs; /* bitmap: allocs when purged was last right (arena lock) */
    uint32_t cached_ms;    /* huge, in the arena's cache: when freed */
    uint32_t capacity;     /* blocks carved so far, and the bytes they span from
                              start: written by the owner as it carves (rarely:
                              every HEAP_CARVE_BYTES), `carved` read by every
                              free to refuse a pointer past them; use
                              page_capacity*() */
    uint32_t carved;
    /* ---- second line: written by the owner on every malloc and free ---- */
    __attribute__((aligned(64))) heap_block *free; /* blocks ready to hand out */
    uint32_t used;     /* blocks out (includes blocks freed by other threads not
                          yet back in the owner's hands); written by the owner
                          only, without RMW: use page_used*() so metrics may
                          read it */
    uint8_t in_full;   /* 1 while out of its class queue */
    uint8_t dirty;     /* bitmap: free blocks may be resident (atomic) */
    uint8_t aligned;   /* large: asked an alignment past 64 bytes (its block may
                          start past its first slice), huge: past 64 bytes;
                          runcache.c keeps neither */
    uint32_t allocs;   /* bitmap: blocks handed out, ever (atomic, owner) */
    uint32_t since_ms; /* bitmap: last free into the page (atomic) */
    union {
        struct {
            uint8_t *first; /* large/huge: the block handed out */
            size_t usable;  /* large/huge: usable bytes from first */
        };
        struct {
            uint64_t bits;   /* bitmap: free blocks | HEAP_BM_PURGING, or
                                HEAP_BM_RETIRED (atomic) */
            uint64_t purged; /* bitmap: free blocks released (arena lock) */
        };
    };
    list_node qlink; /* class queue (owner), or the arena's cache */
} heap_page;
_Static_assert(__builtin_offsetof(heap_page, carved) < 64, "read-mostly line");
_Static_assert(__builtin_offsetof(heap_page, free) == 64, "owner line");
_Static_assert(sizeof(heap_page) == 128, "a page descriptor is two lines");

typedef struct heap_segment {
    uint64_t magic;
    uint32_t kind;
    uint32_t index;               /* creation order, for stats */
    uint32_t in_avail;            /* on the arena's list of segments with free slices */
    uint32_t use;                 /* HEAP_USE_PAGES or HEAP_USE_LARGE */
    list_node avail_link;         /* arena_avail list */
    list_node all_link;           /* every small segment */
    uint64_t free_mask;           /* slices not in any page */
    uint64_t dirty_mask;          /* free slices that may be resident */
    uint64_t guard_mask;          /* first slices of recently freed large
                                     blocks (arena.c: "guards") */
    size_t map_size;              /* huge: length of the whole mapping */
    uint8_t *map_base;            /* huge: start of the whole mapping */
    uint32_t since[HEAP_SLICES];  /* ms clock when a dirty free slice was freed */
    heap_page *map[HEAP_SLICES];  /* slice -> page holding it, NULL when free */
    heap_page pages[HEAP_SLICES]; /* descriptor of the page starting at slice i */
} heap_segment;

#define HEAP_SEG_MAGIC 0x6d6f74655f736567ULL /* "mote_seg" */

/* A class queue: a list of pages (heap_page.qlink). */
typedef list heap_queue;
static inline heap_page *queue_first(const heap_queue *q)
{
    return q->head ? list_entry(q->head, heap_page, qlink) : NULL;
}
static inline heap_page *queue_next(const heap_page *pg)
{
    return pg->qlink.next ? list_entry(pg->qlink.next, heap_page, qlink) : NULL;
}

/* Blocks freed by one thread into another cache's pages travel in a
 * message: a block of the freeing thread's own (512 bytes) holding their
 * addresses, so the owner reads one array instead of a chain of blocks
 * just written on another core.  The owner never reads the blocks; the
 * message goes home as a plain block afterwards. */
#define HEAP_RBUF_SLOTS 4
#define HEAP_RBUF_MAX   62
/* Partly filled messages go home on every this-many-th malloc slow path of
 * their thread.  Sent on each, they carried 2 blocks on average (larson, 2
 * threads: 41,670 messages for 83,676 blocks; now 2,022 for 74,894), and
 * each costs its owner's inbox a CAS and a line, and the message's way home
 * another. */
#define HEAP_RBUF_FLUSH 64
/* A message with at most this many blocks is not sent: its blocks are. */
#define HEAP_RBUF_SOLO  2
typedef struct heap_msg {
    uintptr_t link; /* next inbox entry (tagged, see tcache.c) */
    uint32_t n;
    uint32_t pad_;
    heap_block *blk[HEAP_RBUF_MAX];
} heap_msg;
_Static_assert(sizeof(heap_msg) == 512, "a message is one 512-byte block");

/* The message being filled for one other cache (owner-only). */
typedef struct heap_rbuf {
    struct heap_tcache *to;
    heap_msg *msg;
} heap_rbuf;

/* Blocks of other caches' small pages freed by this thread wait in the
 * cache's foreign list of their class, and its next mallocs of the class
 * take them (most recent first: still in this CPU's cache) before they go
 * home.  The list is a descriptor of kind HEAP_PAGE_FOREIGN that cur[c] may
 * point to, so the malloc fast path serves it unchanged: `free` is the
 * list, `reserved` its bound, `used` the room left (reserved - length).
 * Only classes whose blocks fill whole cache lines have a list (the
 * others have no room), so no reused block shares a line with blocks that
 * are live on another thread.
 * A free that finds the list full sends its block home as before: the
 * thread frees more of the class than it allocates (a consumer), and a
 * detour would only cost it.  So does a free while the owner keeps up
 * (foreign_keep in api.c): lists are for owners that are behind.  Each
 * block's page still counts it as used, so the page stays with its owner;
 * the lists go home at thread exit and on mote_mem_release.  Server churn
 * frees most blocks on a thread other than their allocator's; sending each
 * home made its owner write it again on another CPU (larson, 8 threads: 4x
 * tcmalloc's time, 3x its RSS). */
#define HEAP_LINE          64           /* a cache line */
#define HEAP_FOREIGN_BYTES (64UL << 10) /* per class, at most this much ... */
#define HEAP_FOREIGN_MIN   4            /* ... or this many blocks */
#define HEAP_FOREIGN_MAX   256

/* A small block freed on its owner's thread goes on the cache's recent
 * list of its class, a descriptor of kind HEAP_PAGE_RECENT that cur[c] then
 * points to (fields as in a foreign list), so the next malloc of the class
 * takes the most recently freed block whatever its page: still in this
 * CPU's cache.  Pushed on its own page's list instead, a block freed into
 * another page than the last one was stranded there, and a malloc that
 * found the current page empty took a queue page's block freed long ago:
 * a wait for memory on most mallocs of a random replacement in a big live
 * set (bench/malloc/bigset: 2-2.7x tcmalloc's time).
 * A listed block counts as used on its page, so its page stays out of the
 * arena, and only the owner may touch the list.  A list that fills sends
 * its older half to their pages; one that fills again with no malloc slow
 * path of the thread in between (the thread only frees: it is letting a
 * structure go) sends them all, and the class *drains* (`in_full` set, no
 * room): its frees go straight to their pages, as before the lists, until
 * its next malloc slow path gives the room back.  So a thread that frees
 * a heap and then idles keeps no page for the lists (a 226 MiB heap freed
 * in random order kept 51.6 MiB for good with half spills alone, 4.5 MiB
 * now as without lists): what they can keep is, per class, up to the
 * bound of blocks freed while the thread also allocated.  The lists go back
 * to their pages at thread exit and on mote_mem_release.  (`dirty`: the
 * list spilled since the room came back; `allocs`: slow_ticks then.) */
#define HEAP_RECENT_BYTES (64UL << 10) /* per class, at most this much ... */
#define HEAP_RECENT_MIN   32           /* ... or this many blocks */
#define HEAP_RECENT_MAX   256

/* A foreign or recent list, or a stash, whose head has not moved for
 * HEAP_LIST_STALE_MS (neither a push nor a pop) goes to its pages; a thread
 * looks at every HEAP_LIST_SWEEP_TICKS-th slow malloc or remote free.  A
 * thread that stopped allocating a class kept up to the list's bound of
 * blocks until it exited, each pinning its page: a consumer whose producer
 * moved on to other sizes held 254 pages (16 MiB) with no live block in them
 * (bench/malloc/prodcons, messages written whole, ring of 256; ~120 with the
 * sweep at the same point). */
#define HEAP_LIST_STALE_MS    100
#define HEAP_LIST_SWEEP_TICKS 64

/* A bitmap class's blocks freed on their owner's thread wait in the
 * cache's stash of the class, a descriptor of kind HEAP_PAGE_STASH that
 * cur[c] points to (fields as in a foreign list), so the next malloc of the
 * class takes one on the fast path: neither takes an atomic operation on
 * the page's bitmap.  A claim (CAS) and a return (fetch_or) cost a 6 KiB
 * malloc/free pair 23 ns, where tcmalloc takes 5 and glibc 12.  A stashed
 * block counts as used on its page, so the scavenger cannot release it:
 * the stash holds HEAP_STASH_BYTES per class (at least one block; more
 * below), and goes back to the bitmaps at thread exit, on mote_mem_release, when
 * a mote worker goes to sleep, and when it sat unused for a sweep period.
 * 128 KiB, not 32: a working set of 8-32 KiB blocks (glibc's
 * bench-malloc-thread sizes) fell to the bitmaps' claim and return half of
 * the time (2026-12-05, 1024 slots of 8-32 KiB: 45 ns a pair at 32 KiB,
 * 30 at 128, peak RSS 19.5 -> 15.2 MB; a free-then-idle thread keeps ~1 MB
 * more, and the survivors case 2 MB more at 1 s).
 * A class the thread holds more blocks of than that gets room for as many
 * as it holds, up to HEAP_STASH_MAX: the room is set again at each free
 * that finds the stash full (tcache.c: stash_resize), so it follows the
 * held blocks down as they are freed, and a thread that freed them all
 * keeps no more than before (1024 slots of 8-32 KiB, ~128 blocks a class:
 * 44 -> 35 ns a pair, peak RSS 15.9 -> 13.1 MB; tcmalloc ~28 ns, 18.9 MB;
 * 1 MiB did no better than 512 KiB). */
#define HEAP_STASH_BYTES (128UL << 10)
#define HEAP_STASH_MAX   (512UL << 10)
#define HEAP_STASH_NCLS  (HEAP_NCLS - HEAP_BITMAP_CLS)

#define HEAP_PROF_MEMO 64 /* heap_tcache.prof_memo: a power of two */

/* A thread's freed large blocks of up to HEAP_RUNCACHE_SLICES slices,
 * kept for its next malloc of as many slices (runcache.c): a block of
 * 32-256 KiB freed and allocated again takes no arena lock (8 threads on 2
 * CPUs contending for it took 8x the time of bitmap pages).  At most
 * HEAP_RUNCACHE_SLOTS blocks and HEAP_RUNCACHE_MAX slices; and one bigger
 * block (a large one, or a huge one of up to HEAP_RUNCACHE_BIG_MAX usable
 * bytes), for its next malloc of about as many bytes.  The scavenger takes
 * them all back once none came in for the decay period (runcache.c). */
#define HEAP_RUNCACHE_SLICES  4
#define HEAP_RUNCACHE_SLOTS   16
#define HEAP_RUNCACHE_MAX     16 /* slices: 1 MiB */
#define HEAP_RUNCACHE_BIG_MAX (16UL << 20)
/* A block in pg[] taken again within this many takes (a loop's, or one of
 * a few a loop cycles through) starts at a new line (heap_colour); one
 * taken after a rest keeps its line.  A block moved to a new line at each
 * take spreads a program's working set over new lines: rptest-like, 512
 * blocks of 32-64 KiB replaced at random, one byte written per 4 KiB page,
 * spent 1.5x tcmalloc's time in its own writes, all cache misses (0.90 ->
 * 0.67 s a run, tcmalloc 0.59; 7 alternating runs on one CPU).  A loop
 * over a few blocks needs the new line: writing the same offset of each
 * page of one 100 KiB block took 145-170 ns a pass at one line, 105-125
 * with the line moving; of one of 2, 5 or 8 blocks picked at random,
 * 106-128 ns with each block on a line of its own, 90-96 moving; from 12
 * blocks up both read the same (scratch loops on raw memory, one CPU,
 * 2026-12-06). */
#define HEAP_RUNCACHE_RECENT  8
typedef struct heap_runcache {
    uint32_t colour;    /* blocks taken: the next one's cache colour (lock) */
    uint32_t n;         /* blocks in pg[], oldest first (lock) */
    uint32_t slices;    /* slices they hold (atomic: stats and scavenger read it) */
    uint32_t puts;      /* blocks put in, ever (atomic; written by the owner) */
    uint32_t seen_puts; /* the scavenger's: puts at its last look at a change */
    uint32_t seen_ms;   /* ... and when that look was (scav_lock) */
    uint8_t big_kind;   /* the big block's kind, HEAP_PAGE_LARGE or _HUGE (as slices) */
    heap_page *big;     /* the big block (lock), or NULL */
    uint64_t big_bytes; /* its usable bytes, or 0 (atomic, as slices) */
    /* What takes added to the usable bytes of the blocks they placed anew,
     * mod 2^64, for the stats to add to the arena's in-use counts (their
     * own atomics would cost each take a locked instruction).  Written
     * by the owner only, read by the stats (atomic). */
    uint64_t large_grew, huge_grew;
    heap_page *pg[HEAP_RUNCACHE_SLOTS];
    /* The blocks taken last, newest at (colour - 1) % HEAP_RUNCACHE_RECENT
     * (lock; only compared: one may have left since) */
    heap_page *recent[HEAP_RUNCACHE_RECENT];
} heap_runcache;

typedef struct heap_tcache {
    /* Bytes to allocate before the next sampled allocation (profiler,
     * stats.c): counted down by malloc, INT64_MAX when profiling is off. */
    int64_t sample_left;
    /* The profiler's (profile.c), on this line, which every malloc writes:
     * everything else a sample reads has gone cold since the last one. */
    uint64_t prof_rng;  /* xorshift state for the sampling intervals */
    uintptr_t stack_hi; /* top of this thread's stack (0: not known yet) */
    uintptr_t stack_lo_;
    int prof_busy;        /* inside the profiler: no sampling */
    uint32_t prof_stripe; /* the profile counters' stripe it writes */
    /* Sampled blocks come from the shadow cache, so their free misses the
     * fast path; the shadow belongs to its main cache for life (shadow_of
     * below).  (The scheduler reads this from other threads, only as a
     * worker goes to sleep.) */
    struct heap_tcache *shadow;
    heap_page *cur[HEAP_NCLS]; /* == a page of queue[c], or &mote__heap_page_empty */
    heap_queue queue[HEAP_NCLS];
    heap_rbuf rbuf[HEAP_RBUF_SLOTS]; /* frees into other caches' pages, unsent */
    uint32_t rbuf_n;                 /* blocks in rbuf */
    uint32_t rbuf_ticks;             /* malloc slow paths, for rbuf flushes */
    uint32_t slow_ticks;             /* malloc slow paths (HEAP_PAGE_RECENT) */
    uint32_t sweep_ticks;            /* slow mallocs and remote frees ... */
    uint32_t sweep_ms;               /* ... and the last look at the lists */
    uint32_t died_ms;                /* when the thread exited (pool lock) */
    int keeps_empty;                 /* dead, with empty pages kept for a successor */
    struct heap_tcache *pool_next;   /* pool of dead caches */
    struct heap_tcache *all_next;    /* every cache ever made (immortal) */
    uint32_t id;
    /* what prof_backtrace found at a pair of return addresses: where the
     * frame a frameless function hid was (profile.c) */
    uintptr_t prof_memo[HEAP_PROF_MEMO][3];
    heap_page foreign[HEAP_BITMAP_CLS]; /* see HEAP_PAGE_FOREIGN (owner-only) */
    heap_page recent[HEAP_BITMAP_CLS];  /* see HEAP_PAGE_RECENT (owner-only) */
    heap_page stash[HEAP_STASH_NCLS];   /* see HEAP_PAGE_STASH (owner-only) */
    /* a bitmap class's blocks out of their bitmaps: the program's, stashed,
     * or on their way home (owner-only; sizes the stash) */
    uint32_t bm_out[HEAP_STASH_NCLS];
    /* the lists' heads at the last sweep (owner-only) */
    heap_block *seen_foreign[HEAP_BITMAP_CLS], *seen_recent[HEAP_BITMAP_CLS],
        *seen_stash[HEAP_STASH_NCLS];
    heap_runcache runs; /* see heap_runcache */
    /* The owner's, or a scavenging side's (asym.h): guards runs, and the
     * words of this cache's bitmap pages against the scavenger's claims. */
    heap_asym asym;
    /* ---- read by other threads (their frees), written once: on a line
     * no counter of the owner's shares (a remote free read the owner's id
     * on the line of its slow-path counters: 60% of free_remote in larson).
     * shadow_of: the main cache of a shadow (profiler). */
    __attribute__((aligned(64))) struct heap_tcache *shadow_of;
    /* ---- written by other threads: on a line of their own ---- */
    __attribute__((aligned(64))) uintptr_t inbox; /* messages and single blocks
                                                     freed into our pages (push,
                                                     take-all) */
    int dead; /* 1 while in the pool (thread exited) */
} heap_tcache;

_Static_assert(__builtin_offsetof(heap_tcache, shadow) + 8 <= 64,
               "the profiler's fields share malloc's line");

/* pg->owner as stored (bitmap pages tag it).  A page of blocks changes
 * owner while its cache is dead (tcache_reclaim, pool lock), so other
 * threads read it atomically; whichever owner they see takes the block in
 * (or passes it on). */
static inline heap_tcache *page_owner_raw(const heap_page *pg)
{
    return LOAD(&pg->owner, RELAXED);
}

/* The cache a small or bitmap page belongs to. */
static inline heap_tcache *page_owner(const heap_page *pg)
{
    return (heap_tcache *)((uintptr_t)page_owner_raw(pg) & ~(uintptr_t)1);
}

static inline uint64_t bm_all(const heap_page *pg) { return (1ULL << pg->reserved) - 1; }

/* The lock that guards a bitmap page's word: its owning cache's. */
static inline heap_asym *page_asym(const heap_page *pg) { return &page_owner(pg)->asym; }

static inline uint32_t page_capacity(const heap_page *pg)
{
    return LOAD(&pg->capacity, RELAXED);
}
static inline void page_capacity_set(heap_page *pg, uint32_t v)
{
    STORE(&pg->capacity, v, RELAXED);
    STORE(&pg->carved, v * pg->bsize, RELAXED); /* (a page spans < 4 GiB) */
}
/* Whether the block at offset off of small or bitmap page pg was ever
 * carved (a pointer past that was never handed out). */
static inline bool page_carved(const heap_page *pg, uint64_t off)
{
    return off < LOAD(&pg->carved, RELAXED);
}
/* The block of small or bitmap page pg that byte off (from its start) is
 * in: off / bsize, by the page's reciprocal. */
static inline __attribute__((always_inline)) uint64_t
page_block_index(const heap_page *pg, uint64_t off)
{
    return (off * pg->div_magic) >> 40;
}
/* Whether off, from the start of small or bitmap page pg, is where one of
 * its carved blocks starts: a pointer malloc may have returned.  (Always
 * inlined: a call to it from free's fast path cost free a frame.) */
static inline __attribute__((always_inline)) bool page_block_at(const heap_page *pg,
                                                                uint64_t off)
{
    return page_block_index(pg, off) * pg->bsize == off && page_carved(pg, off);
}

static inline uint32_t page_used(const heap_page *pg) { return LOAD(&pg->used, RELAXED); }
static inline void page_used_set(heap_page *pg, uint32_t v)
{
    STORE(&pg->used, v, RELAXED);
}
static inline uint32_t page_used_add(heap_page *pg, int32_t d)
{
    uint32_t v = page_used(pg) + (uint32_t)d;
    page_used_set(pg, v);
    return v;
}

/* Block b onto list descriptor l (a foreign or recent list, or a stash:
 * `used` is its room, which the caller has seen is not 0). */
static inline void list_page_push(heap_page *l, heap_block *b)
{
    b->next = l->free;
    l->free = b;
    page_used_add(l, -1);
}

/* ---- globals ---- */
/* Atomic bytes: a unit is unmapped by one thread and mapped again by
 * another, with only the kernel in between. */
extern uint8_t mote__heap_segmap[HEAP_SEGMAP_LEN];
static inline uint8_t heap_segmap_get(uintptr_t idx)
{
    return LOAD(&mote__heap_segmap[idx], RELAXED);
}
static inline void heap_segmap_set(uintptr_t idx, uint8_t v)
{
    STORE(&mote__heap_segmap[idx], v, RELEASE);
}
extern uintptr_t mote__heap_key;
extern heap_tcache mote__heap_tcache_empty;
extern heap_page mote__heap_page_empty;
extern __thread heap_tcache *mote__heap_tls __attribute__((tls_model("initial-exec")));

/* ---- sizeclass.c ---- */
extern uint32_t mote__sizeclass_size[HEAP_NCLS];
void mote__sizeclass_init(void);
extern uint8_t mote__sizeclass_slices[HEAP_NCLS];
/* Class of every size up to 8 KiB in 16-byte steps (classes are multiples
 * of 16, so ceil(n/16) decides): one load on the fast path. */
#define HEAP_CLS_TABLE_MAX 8192
extern uint8_t mote__sizeclass_table[HEAP_CLS_TABLE_MAX / 16 + 1];
static inline unsigned sizeclass_of_slow(size_t n)
{
    if (n <= 128)
        return n <= 16 ? 1 : (unsigned)((n + 15) >> 4);
    size_t m = n - 1;
    unsigned b = 63u - (unsigned)__builtin_clzl(m);
    return 8u + (b - 7u) * 4u + (unsigned)((m >> (b - 2)) & 3u) + 1u;
}
static inline unsigned sizeclass_of(size_t n)
{
    if (HEAP_LIKELY(n <= HEAP_CLS_TABLE_MAX))
        return mote__sizeclass_table[(n + 15) >> 4];
    return sizeclass_of_slow(n);
}

/* Reports an invalid pointer passed to free & co. and aborts (api.c). */
HEAP_COLD __attribute__((noreturn)) void mote__heap_invalid_free(const void *p,
                                                                 const char *what);

/* ---- the allocator's MOTE_* variables (read at init from option.h) ---- */
/* The longest MOTE_HEAPPROFILE taken (with "%p" expanded it must fit a
 * file name buffer of 4096). */
#define HEAP_PROF_PATH_MAX 4000
typedef struct heap_config {
    uint32_t decay_ms;
    uint64_t limit;        /* 0: none */
    int stats;             /* 0 none, 1 text, 2 json */
    const char *prof_path; /* MOTE_HEAPPROFILE (a copy), NULL: profiler off */
    uint64_t prof_rate;    /* MOTE_HEAPPROFILE_RATE */
    int prof_signal;       /* MOTE_HEAPPROFILE_SIGNAL: SIGUSR1, SIGUSR2 or 0 */
    bool hugepages;        /* MOTE_MALLOC_HUGEPAGES: huge blocks ask for THP */
} heap_config;
extern heap_config mote__heap_cfg;

/* ---- init (api.c / tcache.c) ---- */
extern int mote__heap_initialized;
void mote__heap_init_slow(void);
static inline void heap_ensure_init(void)
{
    if (HEAP_UNLIKELY(!LOAD(&mote__heap_initialized, ACQUIRE)))
        mote__heap_init_slow();
}

/* ---- arena.c: segments, slice runs, large and huge blocks ---- */
extern heap_lock mote__heap_arena_lock;
heap_page *mote__arena_page_alloc(uint32_t slices, bool *zero, bool clean_first);
void mote__arena_page_free(heap_page *pg); /* arena lock held */
void *mote__arena_large_alloc(size_t size, size_t align);
/* Large page pg (in use; pg->usable 0 for a new one) holds a block of size
 * bytes with no alignment past 64: sets its first and usable, at the seq-th
 * cache colour (heap_colour); returns how much usable grew (mod 2^64), for
 * the caller to count in the large in-use bytes. */
uint64_t mote__arena_large_place(heap_page *pg, size_t size, uint32_t seq);
/* The same, at offset colour into its run (colour + size within the run). */
uint64_t mote__arena_large_place_at(heap_page *pg, size_t size, size_t colour);
void mote__arena_large_free(heap_page *pg);
/* Large blocks a thread cache kept (not in use: used 0), back to the arena
 * under one lock, free since that ms clock for the decay. */
void mote__arena_large_free_kept(heap_page *const *pg, unsigned n, uint32_t since);
/* Whether a memory limit is set (blocks kept by threads would count
 * against it where others cannot use them). */
bool mote__arena_limited(void);
/* A huge block; for_calloc: calloc's, whose fresh pages then come without
 * huge pages (see huge_thp). */
void *mote__arena_huge_alloc(size_t size, size_t align, bool for_calloc);
void mote__arena_huge_free(heap_segment *seg, const void *p);
/* The bytes a huge block that asked no alignment (!aligned) may start and
 * end in; and the same block placed, as mote__arena_large_place places a
 * large one, to hold size of them (no more than its room). */
size_t mote__arena_huge_room(const heap_page *pg);
uint64_t mote__arena_huge_place(heap_page *pg, size_t size, uint32_t seq);
/* A huge block a thread cache kept (not in use: used 0), back to the
 * arena's cache (or unmapped), free since that ms clock for the decay. */
void mote__arena_huge_free_kept(heap_page *pg, uint32_t since);
/* The huge block of seg, resized to hold n bytes (more than HEAP_LARGE_MAX)
 * by remapping its pages, which move but are never copied: its address
 * now, or NULL (the block as it was). */
void *mote__arena_huge_realloc(heap_segment *seg, size_t n);
/* A freed large block's slices are free at once, its first slice guarded
 * from pages of blocks until released; a freed huge block waits in the
 * arena's cache (the page descriptor keeps kind, first and usable; used is
 * 0) for a request it can serve, at most the decay period.  A second free of
 * either finds no page, the inside of another block, or no segment-map entry,
 * and aborts. */
/* Releases cached huge blocks and dirty free slices older than decay_ms;
 * returns ms until the next one is due (0: call again, a batch was full),
 * or -1 if none is waiting.  Takes the arena lock itself. */
long mote__arena_scavenge(uint32_t decay_ms);
int mote__arena_set_limit(uint64_t bytes);
uint64_t mote__arena_committed(void);
void mote__arena_fork_prepare(void);
void mote__arena_fork_parent(void);
void mote__arena_fork_child(void);
/* Live blocks and bytes per class, pages per class, from a walk of every
 * segment under the arena lock. */
typedef struct heap_small_usage {
    uint64_t blocks[HEAP_NCLS], bytes[HEAP_NCLS], pages[HEAP_NCLS];
} heap_small_usage;
void mote__arena_small_usage(heap_small_usage *u);
typedef struct heap_arena_stats {
    uint64_t mapped, released, large_inuse, huge_inuse, segments, huge_count, decommits,
        released_total, cache_bytes, cache_count, cache_hits, cache_misses, purged_total,
        purge_calls;
} heap_arena_stats;
void mote__arena_stats(heap_arena_stats *st);

static inline heap_segment *heap_segment_of(const void *p)
{
    return (heap_segment *)((uintptr_t)p & ~HEAP_SEG_MASK);
}

/* ---- cache colour of large and huge blocks ----
 * A large run starts on a 64 KiB boundary and a huge mapping on a page, so
 * uncoloured, every such block's first bytes (its header, its first row)
 * fall in one L1 set and a few L2 sets, and a program that reads the starts
 * of 64 buffers in turn misses in L1 at each read (bench/malloc/colour.c:
 * 0.63 against 0.35 ns per read, glibc's and jemalloc's, whose big blocks
 * start at varied offsets).  So a block that asks no alignment past 64
 * bytes starts up to HEAP_COLOUR_MAX bytes into its run: within the slack
 * its run has anyway (a large block), or within one page more of mapping
 * (a huge one), never leaving the run's first page (or slice), where its
 * descriptor is found.  The line comes from a count of such allocations, not
 * from the run: a run taken again and again (a loop, a cached block taken
 * again soon: HEAP_RUNCACHE_RECENT) takes every line in turn (with the run's
 * address deciding, 5 runs of largeloop's 4 MiB loop took 6.1 or 7.4-10 us
 * by the address the run got).  The lines that were slow are the two at each
 * end of a page: a loop writing the same offset of every page of 4 MiB
 * (bench/malloc/pageline) took 8-14.5 us a pass at lines 0, 1, 62 and 63,
 * 5.5-6.8 at any other (this VM's Xeon; the hardware prefetchers work in
 * 128-byte pairs and stop at page ends).  So a colour keeps off them where
 * the room allows: the 4 MiB loop went from 6.83 to 6.46 us, glibc's 6.65
 * (medians of 7 alternating runs; glibc's blocks start 16 bytes into a
 * chunk). */
#define HEAP_COLOUR_MAX (HEAP_OS_PAGE - 64)

/* The whole lines a colour may move a block by, with room bytes to spare. */
static inline size_t heap_colour_lines(size_t room)
{
    return (room < HEAP_COLOUR_MAX ? room : HEAP_COLOUR_MAX) >> 6;
}

/* The last line a colour may take when room has lines >= 2 lines. */
static inline size_t heap_colour_last(size_t lines)
{
    return lines < HEAP_OS_PAGE / 64 - 3 ? lines : HEAP_OS_PAGE / 64 - 3;
}

/* The offset in its run of the seq-th coloured block, with room bytes to
 * spare: a multiple of 64, at most room and HEAP_COLOUR_MAX, and off the
 * first and last two lines of a page when room has 2 lines or more.
 * Consecutive counts spread over the lines (a Weyl sequence). */
static inline size_t heap_colour(uint32_t seq, size_t room)
{
    size_t lines = heap_colour_lines(room);
    /* the sequence's top bits, scaled to the count: they spread evenly
     * where its low bits, taken modulo, repeated (64 blocks took 31 lines
     * modulo 60) */
    uint64_t h = ((uint64_t)seq * 0x9E3779B97F4A7C15ULL) >> 32;
    if (lines < 2)
        return (size_t)((h * (lines + 1)) >> 32) << 6;
    return (size_t)(2 + ((h * (heap_colour_last(lines) - 1)) >> 32))
           << 6; /* lines 2..last */
}

/* Whether heap_colour could have given this colour (a multiple of 64) for
 * room: a block that keeps its line keeps to the same rules. */
static inline bool heap_colour_allowed(size_t colour, size_t room)
{
    size_t lines = heap_colour_lines(room);
    if (lines < 2)
        return colour <= lines << 6;
    return colour >= 128 && colour <= heap_colour_last(lines) << 6;
}

/* ---- page.c ---- */
void mote__page_init_small(heap_page *pg, heap_tcache *owner, unsigned cls);
void mote__page_init_bitmap(heap_page *pg, heap_tcache *owner, unsigned cls, bool zero);
void mote__page_extend(heap_page *pg);
/* Bitmap pages whose free blocks may be resident (dirty set): the scavenger
 * looks at them only when this is not 0. */
extern uint64_t mote__heap_bm_dirty;
/* The owner returned a block of a bitmap page: stamps it and lets the
 * scavenger know the first time since its last look. */
void mote__page_bm_note_free(heap_page *pg);

/* ---- tcache.c ---- */
/* n: the request, to find its class when cls is 0 (before init).  Called
 * from the public entry points, tail-called (tail: our return address is
 * the allocating code) or not (our caller is the entry point's frame): the
 * profiler's stack walk starts there. */
void *mote__tcache_alloc_slow(heap_tcache *h, unsigned cls, size_t n, bool tail);
/* A cache for a thread that has none (mote__heap_tls is the empty one):
 * *exited says its thread has exited already, and then the caller gives it
 * back with mote__tcache_give_back once done; NULL when out of memory. */
heap_tcache *mote__tcache_take(bool *exited);
void mote__tcache_give_back(heap_tcache *h);
/* A block of class cls from cache h, never sampled (the profiler's shadow
 * caches and the messages of remote frees). */
void *mote__tcache_alloc_in(heap_tcache *h, unsigned cls);
/* A block of class cls from shadow cache s (mote__tcache_alloc_in's
 * result, sooner). */
void *mote__tcache_alloc_shadow(heap_tcache *s, unsigned cls);
/* This thread frees b (cookie set) of pg, a page of its shadow s. */
void mote__tcache_free_shadow(heap_tcache *s, heap_page *pg, heap_block *b);
/* h's shadow cache, made on first use; NULL when out of memory. */
heap_tcache *mote__tcache_shadow(heap_tcache *h);
void mote__tcache_page_freed(heap_tcache *h, heap_page *pg);
/* Any thread frees p, a block of bitmap page pg. */
void mote__tcache_free_bitmap(heap_page *pg, void *p);
/* A thread frees b (cookie set) of pg, whose owner is another cache. */
void mote__tcache_free_remote(heap_page *pg, heap_block *b);

/* The message slot of h that blocks of cache `to` wait in.  From to's
 * address, not from a field of to: its id shared a line with the counters
 * its owner bumps on every slow path, and that load was 60% of rbuf_put in
 * larson (2 threads). */
static inline heap_rbuf *heap_rbuf_of(heap_tcache *h, const heap_tcache *to)
{
    uintptr_t k = ((uintptr_t)to >> 6) * 0x9E3779B97F4A7C15ULL;
    return &h->rbuf[k >> (64 - __builtin_ctz(HEAP_RBUF_SLOTS))];
}

/* mote__tcache_free_remote's common case, for a small page's block b
 * (cookie set) of another thread's cache `to`: into the message being
 * filled for to, when it has room to spare and no sweep of h's lists is
 * due; false, having changed nothing, otherwise.  A thread that only frees
 * what another allocated (a consumer) runs this once per block, and its
 * length decides how many of the program's loads of the next blocks, lines
 * another CPU wrote, can be in flight at once (bench/malloc/xthread: see
 * heap_free_home). */
static inline bool heap_rbuf_try(heap_tcache *h, heap_tcache *to, heap_block *b)
{
    heap_rbuf *r = heap_rbuf_of(h, to);
    heap_msg *m = r->msg;
    if (r->to != to || !m || m->n + 1 >= HEAP_RBUF_MAX ||
        (h->sweep_ticks + 1) % HEAP_LIST_SWEEP_TICKS == 0)
        return false;
    m->blk[m->n++] = b;
    h->rbuf_n++;
    h->sweep_ticks++;
    return true;
}
/* Blocks in h's foreign and recent lists or stash of class cls (any
 * thread: stats). */
uint32_t mote__tcache_listed_count(const heap_tcache *h, unsigned cls);
/* h frees its block b (cookie set) of small page pg, and the class's recent
 * list has no room: see HEAP_PAGE_RECENT. */
void mote__tcache_recent_full(heap_tcache *h, heap_page *pg, heap_block *b);
void mote__tcache_release_own(void);
/* See mote__heap_thread_idle and mote__heap_frees_waiting (heap.h). */
void mote__tcache_idle(void);
bool mote__tcache_frees_waiting(const heap_tcache *h);
/* Dead caches: takes their inboxes in and frees their empty pages (all of
 * them when force, else those of caches dead for decay_ms); returns ms
 * until the next dead cache's kept pages are due, or -1.  Pool lock. */
long mote__tcache_collect_dead(bool force, uint32_t decay_ms);
void mote__tcache_init_once(void);
void mote__tcache_fork_prepare(void);
void mote__tcache_fork_parent(void);
void mote__tcache_fork_child(void);
heap_tcache *mote__tcache_all(void);

/* ---- runcache.c: a thread's freed large blocks (heap_runcache) ---- */
/* A kept block of h of this many slices (newest first), in use again; NULL
 * if none (or the scavenger is at the cache). */
heap_page *mote__runcache_take(heap_tcache *h, uint32_t slices, size_t size);
/* Keeps freed large block pg (in use, its free checked) in h's cache:
 * false if it does not fit or may not be kept (the caller frees it). */
bool mote__runcache_put(heap_tcache *h, heap_page *pg);
/* The big block h keeps, in use again, if it holds size bytes (more than
 * HEAP_RUNCACHE_SLICES slices hold) without leaving a third of itself idle
 * and the request asks no alignment past 64 bytes; else NULL, and a block
 * kept that did not suit went back to the arena (whose cache may cut or
 * grow a huge one for the request). */
heap_page *mote__runcache_take_big(heap_tcache *h, size_t size, size_t align);
/* Keeps freed block pg (large of more than HEAP_RUNCACHE_SLICES slices, or
 * huge; in use, its free checked) as h's big block: false if it may not be
 * kept (the caller frees it). */
bool mote__runcache_put_big(heap_tcache *h, heap_page *pg);
/* Gives h's kept blocks back to the arena (its thread exits, or
 * mote_mem_release): owner only. */
void mote__runcache_flush(heap_tcache *h);
/* Every cache whose newest kept block is decay_ms old (all when decay_ms is
 * 0) gives them back; returns ms until the next is due, or -1. */
long mote__runcache_scavenge(uint32_t decay_ms);
/* fork: no cache is being emptied across it. */
void mote__runcache_fork_prepare(void);
void mote__runcache_fork_parent(void);
void mote__runcache_fork_child(void);
/* Whether any cache keeps a block (the scavenger, after a heavy fence,
 * before it sleeps for good). */
bool mote__runcache_any(void);
/* Over every cache, in one walk (any thread: stats): what they keep (large
 * blocks' bytes, huge blocks' usable bytes and their number), and what
 * their takes added to the in-use bytes (mod 2^64). */
typedef struct heap_runcache_totals {
    uint64_t kept_large, kept_huge, kept_huge_n, grew_large, grew_huge;
} heap_runcache_totals;
void mote__runcache_totals(heap_runcache_totals *t);

/* ---- scavenger.c ---- */
void mote__scavenger_ensure(void);
/* A dead cache got blocks in its inbox, or kept pages at its thread's exit. */
void mote__scavenger_kick(void);
/* A thread cache that kept nothing kept a block (runcache.c, after its
 * store of what it keeps): no locked instruction unless the scavenger is
 * asleep for good or not started. */
void mote__scavenger_kick_kept(void);
/* Dirty free slices or cached blocks appeared (any thread, any lock). */
void mote__scavenger_note_dirty(void);
void mote__scavenger_fork_child(void);
/* A thread's cache is going at its exit; main_thread: the process's main
 * thread (pthread_exit), after which the scavenger must not outlive the
 * others. */
void mote__scavenger_thread_exit(bool main_thread);
/* From a signal handler: wakes the scavenger, whatever it sleeps on, so it
 * looks at its work now; false when it does not run (not started, or
 * could not be). */
bool mote__scavenger_wake_now(void);

/* ---- api.c ---- */
void mote__heap_release_all(void);

/* ---- stats.c: statistics and the sampling heap profiler ---- */
/* Writes the statistics table (json: one JSON object) to stderr, with
 * write(2) and no allocation (at exit, and for malloc_stats). */
void mote__stats_print(bool json);
/* The heap's totals from one snapshot, in bytes (for mallinfo). */
typedef struct heap_summary {
    uint64_t inuse, free, released, mapped, huge_inuse, huge_count;
} heap_summary;
void mote__stats_summary(heap_summary *out);
/* fork: the child frees the statistics printer's and the profile writer's
 * locks.  They are not taken across fork: a holder may block in write(2)
 * for as long as its reader likes. */
void mote__stats_fork_child(void);
void mote__prof_fork_child(void);
extern int mote__prof_on; /* MOTE_HEAPPROFILE is set */
void mote__prof_init(void);
/* A new cache's first sampling interval (INT64_MAX when off). */
void mote__prof_cache_init(heap_tcache *h);
/* h's countdown fell below 0 on a small allocation of n bytes in class cls
 * (any thread with a cache): a sampled block, or NULL to take the normal
 * path.  entry_fp: the frame of the public entry point (its return address
 * is the allocating code). */
void *mote__prof_alloc_small(heap_tcache *h, unsigned cls, size_t n, void *entry_fp);
/* Records a large or huge block just allocated (pg its page) as sampled. */
void mote__prof_note_big(heap_tcache *h, heap_page *pg, size_t n, void *entry_fp);
/* A sampled block is being freed (pg->prof is set). */
void mote__prof_free(heap_page *pg, const void *p);
/* Usable bytes of a block of a page that holds sampled blocks. */
size_t mote__prof_usable(const heap_page *pg);
void mote__prof_write_at_exit(void);
/* Set by MOTE_HEAPPROFILE_SIGNAL's handler: a profile is to be written
 * (atomic).  The scavenger, or the handler when it does not run, calls
 * mote__prof_dump_pending, which writes it when the flag is set. */
extern int mote__prof_dump_req;
void mote__prof_dump_pending(void);
int mote__prof_write(int fd);

#endif
