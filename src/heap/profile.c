/*
 * profile.c - the sampling heap profiler (MOTE_HEAPPROFILE,
 * MOTE_HEAPPROFILE_RATE, MOTE_HEAPPROFILE_SIGNAL, mote_heap_profile_write).
 *
 * Sampling: each cache counts the bytes its thread allocates down from an
 * interval drawn from an exponential distribution of mean R (the rate), in
 * the malloc fast path (one subtraction on the cache, tested with the
 * free-list check); at INT64_MAX when off.  So allocations are sampled as
 * a Poisson process over bytes: one of n bytes with probability
 * 1 - exp(-n/R), by which the output scales each stack's counts back to
 * totals.
 *
 * A sampled small block is served by the cache's shadow cache, in the
 * smallest power-of-two class big enough for a 16-byte trailer
 * {magic ^ address, bucket << 40 | size} after the user's bytes; the
 * shadow's pages are not the thread's, so their free misses the free fast
 * path, whose other-thread branch sees page->prof.  A sampled large or
 * huge block keeps bucket and size in its page descriptor.  Nothing is
 * added to the free fast path.
 *
 * Cost: at the default rate a sample comes every few microseconds, and
 * what it reads has gone cold since the last one, so its price is its
 * cache misses more than its instructions.  Hence the thread's fields on
 * the line malloc writes anyway, the globals on one line, counters most
 * threads write without a locked instruction, and a shadow that serves
 * from its current page without its bookkeeping.
 *
 * Call stacks: the public entry points never tail-call out of themselves,
 * so the slow path's caller is always the entry point's frame: its return
 * address (the allocating code, always right), then the program's
 * frame-pointer chain above it, walked only within this thread's stack (so
 * code without frame pointers ends the stack early, never reads wild
 * memory), or the running mote task's (the runtime names them), with
 * the caller a frameless wrapper (operator new, strdup) hid put back: see
 * prof_hidden_frame.  Buckets: an open-addressed table of up to 32768 stacks in
 * its own mapping, claimed with one CAS and read without locks; counters
 * are striped by cache (prof_counts).  Past 28,672 stacks a new stack
 * keeps only its allocating frame (4,096 more sites); beyond that, samples
 * go to one "other stacks" bucket so the totals stay right.
 *
 * Output: profile.proto (pprof's own format) in a gzip member of stored
 * blocks, values scaled back to estimates of the truth, with the
 * process's executable mappings and the names of the functions their
 * symbol tables give; written with write(2) and no allocation (see
 * "output" below).
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "arch/arch.h"
#include "heap/heap.h"
#include "heap/internal.h"
#include "os/os.h"
#include "sanitizer.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>

#define PROF_DEPTH   32
#define PROF_BUCKETS (1u << 15)
#define PROF_PROBES  64
#define PROF_MAGIC   0x70726f66696c6521ULL /* "profile!" */
#define PROF_OTHER   0u                    /* bucket 0: stacks that found no room */

typedef struct prof_bucket {
    uint64_t key; /* 0 free, 1 being filled, else the stack's hash (>= 2) */
    uint32_t depth;
    uint32_t pad_;
    uintptr_t pc[PROF_DEPTH];
} prof_bucket;

/* A bucket's counters, striped by cache so that threads sampling the
 * same stack do not fight over one cache line; a write adds the stripes
 * up.  The first PROF_SHARED stripes are shared by caches, by id, with
 * atomic adds (stripe 0 also by threads without a cache: the empty
 * cache's heap_tcache.prof_stripe is 0).  The next PROF_OWN belong each
 * to one cache (ids below PROF_OWN), written by its thread alone: a plain
 * add, read by a write with relaxed loads.  (A locked add on a line gone
 * cold since the last sample was most of a sampled free's time.)  A
 * signal handler that frees a sampled block between such a load and its
 * store loses one count: the profile is an estimate, and that is rarer
 * than its sampling error by far. */
#define PROF_SHARED  8
#define PROF_OWN     8
#define PROF_STRIPES (PROF_SHARED + PROF_OWN)
typedef struct prof_counts {
    uint64_t alloc_count, alloc_bytes, free_count, free_bytes;
} prof_counts;

int mote__prof_on; /* set once, by mote__prof_init */
/* What a sample reads, on one line (scattered, they were four misses a
 * sample); set by mote__prof_init. */
static struct {
    prof_bucket *table; /* then the counters, [stripe][bucket] */
    uint32_t nused;     /* the number of entries in prof_used */
    /* prof_interval's: R = mote__heap_cfg.prof_rate */
    double rate2, ln2_rate; /* 2R, R ln 2 */
    double inv[4];          /* 1/3, 1/5, 1/7, 1/9 */
} prof __attribute__((aligned(64)));
_Static_assert(sizeof(prof) == 64, "what a sample reads is one line");
/* Indices of the buckets in use (+1; 0: being published), so a write reads
 * only those, not the whole table (untouched pages of it would each fault
 * in the zero page). */
static uint32_t prof_used[PROF_BUCKETS];
static int prof_pid; /* the process that read MOTE_HEAPPROFILE */
int mote__prof_dump_req;
static uint32_t prof_dump_seq; /* profiles written on the signal (its writer's) */

static inline prof_counts *prof_counts_of(uint32_t stripe, uint32_t b)
{
    return (prof_counts *)(prof.table + PROF_BUCKETS) + (size_t)stripe * PROF_BUCKETS + b;
}

/* Adds one block of n bytes to bucket b's allocations (or, freed, its
 * frees) in h's stripe. */
static inline void prof_count(const heap_tcache *h, uint32_t b, bool freed, uint64_t n)
{
    prof_counts *c = prof_counts_of(h->prof_stripe, b);
    uint64_t *count = freed ? &c->free_count : &c->alloc_count;
    uint64_t *bytes = freed ? &c->free_bytes : &c->alloc_bytes;
    if (h->prof_stripe >= PROF_SHARED) { /* its own */
        STORE(count, LOAD(count, RELAXED) + 1, RELAXED);
        STORE(bytes, LOAD(bytes, RELAXED) + n, RELAXED);
    } else {
        FETCH_ADD(count, 1, RELAXED);
        FETCH_ADD(bytes, n, RELAXED);
    }
}

/* The runtime's (heap.h): the top of the task stack holding sp, or 0. */
static uintptr_t (*prof_task_top)(uintptr_t sp);

/* MOTE_HEAPPROFILE_SIGNAL's handler.  The profile is written by the
 * scavenger thread, not here: a program's thread (a mote worker, say)
 * would stop for as long as the write takes (reading every mapped
 * object's symbols).  Where no scavenger runs yet (it starts with the
 * first page a free gives back) or any more (a fork's child), here:
 * prof_write_impl allocates nothing and tells a thread interrupted in its
 * own write (-EDEADLK).  But not on a mote task's stack, which may be
 * 8 KiB where the write takes ~20: there the request waits for the
 * scavenger's first round. */
static void prof_on_signal(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)si, (void)uc;
    int saved = errno;
    STORE(&mote__prof_dump_req, 1, SEQ_CST);
    if (!mote__scavenger_wake_now()) {
        uintptr_t (*top_of)(uintptr_t) = LOAD(&prof_task_top, ACQUIRE);
        if (!top_of || !top_of((uintptr_t)__builtin_frame_address(0)))
            mote__prof_dump_pending();
    }
    errno = saved;
}

void mote__prof_init(void)
{
    if (!mote__heap_cfg.prof_path) {
        if (mote__heap_cfg.prof_signal)
            mote__os_write_err("mote: MOTE_HEAPPROFILE_SIGNAL is set without "
                               "MOTE_HEAPPROFILE: no profiler, no signal handler\n");
        return;
    }
    size_t tsize = sizeof(prof_bucket) * PROF_BUCKETS;
    size_t csize = sizeof(prof_counts) * PROF_BUCKETS;
    uint8_t *m = mote__os_map_aligned(tsize + csize * PROF_STRIPES, HEAP_OS_PAGE, true);
    prof.table = (prof_bucket *)m;
    prof.rate2 = 2.0 * (double)mote__heap_cfg.prof_rate;
    prof.ln2_rate = 0.69314718055994530942 * (double)mote__heap_cfg.prof_rate;
    for (int i = 0; i < 4; i++)
        prof.inv[i] = 1.0 / (3 + 2 * i);
    if (!prof.table) {
        mote__os_write_err("mote: MOTE_HEAPPROFILE: no memory for the profile table; "
                           "profiler off\n");
        return;
    }
    prof.table[PROF_OTHER].key = 2;
    prof_used[0] = PROF_OTHER + 1;
    prof.nused = 1;
    prof_pid = (int)getpid();
    STORE(&mote__prof_on, 1, RELEASE);
    if (mote__heap_cfg.prof_signal &&
        mote__os_signal_install_plain(mote__heap_cfg.prof_signal, prof_on_signal) != 0)
        mote__os_write_err("mote: MOTE_HEAPPROFILE_SIGNAL: cannot install the signal "
                           "handler; profiles are written at exit only\n");
}

/* -ln(u) * R for u uniform in (0, 1), without libm and without a loop:
 * u = bits / 2^64 = m * 2^-(1+k), k the bits' leading zeros and m in
 * [1, 2) their top 53 after the first one (mant = m * 2^52);
 * ln m = 2 atanh(t), t = (m-1)/(m+1), by its series (error ~1e-6, so the
 * mean interval is R within 1e-6).  What it costs is a chain of
 * dependent floating-point operations and the lines their constants sit
 * on; so one division (a loop halving u, for k, cost a branch miss a
 * draw, and t2 / 9 was a second division), the series' terms side by
 * side, and its constants on the line of prof (in .rodata they were a
 * miss a sample).  R <= 2^30 (option.c), so v < 2^36. */
static int64_t prof_interval(heap_tcache *h)
{
    uint64_t x = h->prof_rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    h->prof_rng = x;
    uint64_t bits = x | 1; /* never 0 */
    int k = __builtin_clzll(bits);
    uint64_t mant = (bits << k) >> 11;
    double t =
        (double)(int64_t)(mant - (1ULL << 52)) / (double)(int64_t)(mant + (1ULL << 52));
    double t2 = t * t, t4 = t2 * t2;
    /* t2/3 + t4/5 + t6/7 + t8/9 */
    double p =
        t2 * prof.inv[0] + t4 * ((prof.inv[1] + t2 * prof.inv[2]) + t4 * prof.inv[3]);
    double tr = t * prof.rate2; /* ln(m) * R = tr + tr * p */
    int64_t v = (int64_t)((double)(1 + k) * prof.ln2_rate - (tr + tr * p));
    return v < 1 ? 1 : v;
}

void mote__prof_cache_init(heap_tcache *h)
{
    h->prof_stripe = h->id < PROF_OWN ? PROF_SHARED + h->id : h->id & (PROF_SHARED - 1);
    if (!LOAD(&mote__prof_on, ACQUIRE)) {
        h->sample_left = INT64_MAX;
        return;
    }
    if (!h->prof_rng)
        h->prof_rng = ((uintptr_t)h ^ mote__heap_key ^ (uint64_t)mote__os_now_ns()) | 1;
    h->sample_left = prof_interval(h);
}

void mote__heap_set_task_stacks(uintptr_t (*top_of)(uintptr_t sp))
{
    STORE(&prof_task_top, top_of, RELEASE);
}

/* The top of the stack holding sp, where its frames may be walked: this
 * thread's, or the running mote task's; 0 for any other (a signal
 * stack, a coroutine library's). */
static uintptr_t prof_stack_hi(heap_tcache *h, uintptr_t sp)
{
    if (!h->stack_hi) {
        pthread_attr_t a;
        void *lo = NULL;
        size_t size = 0;
        h->stack_hi = 1;
        if (pthread_getattr_np(pthread_self(), &a) == 0) {
            if (pthread_attr_getstack(&a, &lo, &size) == 0)
                h->stack_hi = (uintptr_t)lo + size;
            pthread_attr_destroy(&a);
        }
        h->stack_lo_ = (uintptr_t)lo;
    }
    if (sp >= h->stack_lo_ && sp < h->stack_hi)
        return h->stack_hi;
    uintptr_t (*top_of)(uintptr_t) = LOAD(&prof_task_top, ACQUIRE);
    return top_of ? top_of(sp) : 0;
}

/* Whether [lo, hi) is code of a loaded object, safe to read. */
static bool prof_code(uintptr_t lo, uintptr_t hi)
{
    uintptr_t s, e;
    bool x;
    return lo <= hi && mote__os_segment_of(lo, &s, &e, &x) && x && hi <= e;
}

/* The function the call before return address ret went to, through the
 * PLT stubs and jump thunks it went through (a few); 0 when that cannot be
 * told (an indirect call, or ret is not code).  Only code and a PLT's
 * slot are read, each once checked to be in a loaded object. */
static uintptr_t prof_callee(uintptr_t ret)
{
    if (ret < 5 || !prof_code(ret - 5, ret))
        return 0;
    uintptr_t t = arch_call_target(ret);
    for (int hop = 0; t && hop < 4; hop++) {
        if (!prof_code(t, t + 12))
            return 0;
        uintptr_t slot = arch_plt_slot(t), s, e, on;
        bool x;
        if (slot) {
            if (slot & 7 || !mote__os_segment_of(slot, &s, &e, &x) || e - slot < 8)
                return 0;
            on = *(const uintptr_t *)slot;
        } else {
            on = arch_thunk_target(t);
        }
        if (!on)
            return t;
        t = on;
    }
    return 0;
}

/* Whether the call before return address ret went to the function that
 * holds pc (whose start is f, when the unwind table says): 1, 0, or -1
 * when that cannot be told (an indirect call).  Without f, a call into
 * the 64 KiB before pc counts. */
static int prof_called(uintptr_t ret, uintptr_t f, uintptr_t pc)
{
    uintptr_t callee = prof_callee(ret);
    if (!callee)
        return -1;
    return f ? callee == f : pc >= callee && pc - callee < (64u << 10);
}

/* The search reads words of the program's frames that AddressSanitizer
 * poisons (redzones around its locals): read, never written, and only
 * within this thread's stack (SANITIZER_UNCHECKED). */

static inline bool prof_frame_ok(const uintptr_t *fp, const uintptr_t *next, uintptr_t hi)
{
    return next > fp && !((uintptr_t)next & 15) && (uintptr_t)next + 16 <= hi;
}

/* A frameless function between the program and malloc (libstdc++'s
 * operator new, glibc's strdup) keeps no frame record, so the chain above
 * the entry point skips the function that called it: operator new's
 * caller, the one function the program wants named, was missing.  That is
 * seen when the chain's next return address did not come from a call to
 * the function holding ret0, or when the chain is broken (such a function
 * may hold data in the frame-pointer register).  The return address into
 * the skipped caller is then the first word above ret0 that came from a
 * call to that function, in the frameless function's own few words: its
 * slot, or NULL.  A chain that cannot be checked (its call was indirect)
 * has its first 8 words looked at only, a frameless function's frame. */
SANITIZER_UNCHECKED static uintptr_t *prof_hidden_frame(uintptr_t *fp, uintptr_t *next,
                                                        uintptr_t hi, uintptr_t ret0)
{
    uintptr_t f0 = mote__os_function_start(ret0);
    size_t words = 32;
    if (next) {
        int c = prof_called(next[1], f0, ret0);
        if (c == 1)
            return NULL; /* the chain is whole */
        if (c < 0)
            words = 8;
    }
    uintptr_t *end = fp + 2 + words;
    if (next && next < end)
        end = next;
    if ((uintptr_t)end > hi)
        end = (uintptr_t *)hi;
    for (uintptr_t *k = fp + 2; k < end; k++)
        if (prof_called(*k, f0, ret0) == 1)
            return k;
    return NULL;
}

/* After a hidden frame at slot, when the frame-pointer register held data:
 * the skipped caller's frame record, whose address the frameless function
 * saved among the words it pushed; checked as above (its return address
 * came from a call to the function holding *slot).  The word holding it,
 * or NULL. */
SANITIZER_UNCHECKED static uintptr_t *prof_frame_after(uintptr_t *fp, uintptr_t *slot,
                                                       uintptr_t hi)
{
    uintptr_t f = mote__os_function_start(*slot);
    for (uintptr_t *k = fp + 2; k < slot; k++) {
        uintptr_t *c = (uintptr_t *)*k;
        if (prof_frame_ok(slot, c, hi) && prof_called(c[1], f, *slot) == 1)
            return k;
    }
    return NULL;
}

/* The public entry point's return address (the allocating code), then the
 * frame-pointer chain above it, within this thread's stack, with the
 * caller a frameless function hid put back.  What that search finds
 * depends on the code only, the same at every pass through the same two
 * return addresses: it is remembered by them (checking each time cost a
 * sample 45 ns more, ~2% of mallocbench at the default rate). */
SANITIZER_UNCHECKED static int prof_backtrace(heap_tcache *h, uintptr_t *fp,
                                              uintptr_t *pc)
{
    int n = 0;
    uintptr_t ret0 = fp[1];
    pc[n++] = ret0;
    uintptr_t hi = prof_stack_hi(h, (uintptr_t)__builtin_frame_address(0));
    if (!hi || (uintptr_t)fp & 15 || (uintptr_t)fp + 16 > hi)
        return n;
    uintptr_t *next = (uintptr_t *)fp[0];
    if (!prof_frame_ok(fp, next, hi))
        next = NULL;
    uintptr_t ret1 = next ? next[1] : 0;
    uintptr_t *memo =
        h->prof_memo[((ret0 ^ (ret1 * 0x9e3779b97f4a7c15ULL)) * 0xff51afd7ed558ccdULL) >>
                     (64 - __builtin_ctz(HEAP_PROF_MEMO))];
    uintptr_t *slot = NULL, *after = NULL;
    if (memo[0] == ret0 && memo[1] == ret1) {
        /* (offsets + 1 from fp + 2, each a byte; 0: none) */
        if (memo[2] & 0xff)
            slot = fp + 1 + (memo[2] & 0xff);
        if (memo[2] >> 8)
            after = fp + 1 + (memo[2] >> 8);
    } else {
        slot = prof_hidden_frame(fp, next, hi, ret0);
        if (slot && (!next || next <= slot))
            after = prof_frame_after(fp, slot, hi);
        memo[0] = ret0;
        memo[1] = ret1;
        memo[2] = (slot ? (uintptr_t)(slot - fp - 1) : 0) |
                  (after ? (uintptr_t)(after - fp - 1) << 8 : 0);
    }
    if (slot && (uintptr_t)(slot + 1) <= hi) {
        pc[n++] = *slot;
        if (after) {
            uintptr_t *c = (uintptr_t *)*after;
            next = prof_frame_ok(slot, c, hi) ? c : NULL;
        } else if (next && next <= slot) {
            next = NULL;
        }
    }
    while (next) { /* the program's frames */
        fp = next;
        if (!fp[1] || n == PROF_DEPTH)
            return n;
        pc[n++] = fp[1];
        next = (uintptr_t *)fp[0];
        if (!prof_frame_ok(fp, next, hi))
            return n;
    }
    return n;
}

/* (memcmp through the PLT cost more than these few words) */
static inline bool same_stack(const uintptr_t *a, const uintptr_t *b, int depth)
{
    for (int i = 0; i < depth; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

/* The last PROF_SITES_ROOM buckets are for stacks cut to their allocating
 * frame: past that many stacks, a new one is cut, so that thousands more
 * call sites are still named where their whole stacks would all have gone
 * to the "other" bucket (an outside test: 65,536 cold stacks, then a hot
 * site of 64 MiB, read 100% <unknown>). */
#define PROF_SITES_ROOM 4096

/* The bucket of stack pc[0..depth), made if insert; PROF_OTHER if none. */
static uint32_t prof_bucket_find(const uintptr_t *pc, int depth, bool insert)
{
    uint64_t hash = 0x9e3779b97f4a7c15ULL ^ (uint64_t)depth;
    for (int i = 0; i < depth; i++) {
        hash ^= pc[i];
        hash *= 0xff51afd7ed558ccdULL;
        hash ^= hash >> 32;
    }
    if (hash < 2)
        hash += 2;
    uint32_t i = (uint32_t)hash & (PROF_BUCKETS - 1);
    for (int probe = 0; probe < PROF_PROBES; probe++, i = (i + 1) & (PROF_BUCKETS - 1)) {
        if (i == PROF_OTHER)
            continue;
        prof_bucket *b = &prof.table[i];
        uint64_t k = LOAD(&b->key, ACQUIRE);
        if (k == 0 && !insert)
            return PROF_OTHER;
        if (k == 0) {
            /* On failure k is read with acquire too: it may be the hash
             * another thread just published, and then b's stack is read. */
            if (!CAS_F(&b->key, &k, 1, ACQUIRE, ACQUIRE))
                goto taken;
            b->depth = (uint32_t)depth;
            memcpy(b->pc, pc, sizeof(uintptr_t) * (size_t)depth);
            STORE(&b->key, hash, RELEASE);
            STORE(&prof_used[FETCH_ADD(&prof.nused, 1, RELAXED)], i + 1, RELEASE);
            return i;
        }
    taken:
        if (k == hash && b->depth == (uint32_t)depth && same_stack(b->pc, pc, depth))
            return i;
        /* 1 (being filled) or another stack: look further; a stack two
         * threads insert at once may get two buckets, which pprof merges */
    }
    return PROF_OTHER;
}

static uint32_t prof_bucket_of(const uintptr_t *pc, int depth)
{
    if (depth <= 1 || LOAD(&prof.nused, RELAXED) < PROF_BUCKETS - PROF_SITES_ROOM)
        return prof_bucket_find(pc, depth, true);
    uint32_t b = prof_bucket_find(pc, depth, false); /* a stack seen before */
    return b != PROF_OTHER ? b : prof_bucket_find(pc, 1, true);
}

/* Draws the next interval and records one sampled allocation of n bytes:
 * its bucket, or -1 when no sampling should happen now. */
static int64_t prof_record(heap_tcache *h, size_t n, void *entry_fp)
{
    /* (A countdown runs out only once mote__prof_init has made the table
     * and published mote__prof_on: sample_left is INT64_MAX until then.) */
    if (HEAP_UNLIKELY(!prof.table)) {
        h->sample_left = INT64_MAX;
        return -1;
    }
    h->sample_left = prof_interval(h);
    if (h->prof_busy) /* an allocation made by the profiler itself */
        return -1;
    h->prof_busy = 1;
    uintptr_t pc[PROF_DEPTH];
    int depth = prof_backtrace(h, entry_fp, pc);
    uint32_t b = prof_bucket_of(pc, depth);
    prof_count(h, b, false, n);
    h->prof_busy = 0;
    return b;
}

static inline uint64_t *prof_trailer(const heap_page *pg, const void *p)
{
    return (uint64_t *)((uintptr_t)p + pg->bsize - 16);
}

/* The class of the smallest power of two >= n (16 <= n): classes 1..8
 * are 16..128 by 16, then four a power of two (sizeclass.c). */
static inline unsigned prof_pow2_class(size_t n)
{
    unsigned k = 64 - (unsigned)__builtin_clzll((uint64_t)n - 1); /* 2^k >= n */
    return k <= 7 ? 1u << (k - 4) : 8 + 4 * (k - 7);
}

void *mote__prof_alloc_small(heap_tcache *h, unsigned cls, size_t n, void *entry_fp)
{
    mote__assert(!h->shadow_of); /* a shadow's blocks are never sampled */
    /* A power-of-two class with room for the trailer: it keeps any
     * alignment cls had, and the shadow needs pages for 11 classes only
     * (each takes a slice of its own).  Found by arithmetic: the class
     * tables' lines were cold. */
    size_t need = n + 16 > mote__sizeclass_size[cls] ? n + 16 : mote__sizeclass_size[cls];
    unsigned c = prof_pow2_class(need);
    if (c >= HEAP_NCLS) {
        /* No class holds it with its trailer (just under 32 KiB, a common
         * buffer size, which was never sampled): a large block, which
         * keeps the sample in its page and is slice-aligned. */
        void *p = mote__arena_large_alloc(n, 0);
        if (!p) {
            h->sample_left = prof.table ? prof_interval(h) : INT64_MAX;
            return NULL;
        }
        heap_segment *seg = heap_segment_of(p);
        mote__prof_note_big(h, seg->map[((uintptr_t)p >> HEAP_SLICE_SHIFT) & 63], n,
                            entry_fp);
        return p;
    }
    /* The shadow's page and block have gone cold since the last sample:
     * asked for now, they arrive while the stack is recorded. */
    heap_tcache *s = h->shadow;
    if (s && c < HEAP_BITMAP_CLS) {
        heap_page *sp = LOAD(&s->cur[c], RELAXED);
        arch_prefetch_write(&sp->free);
        heap_block *sb = LOAD(&sp->free, RELAXED);
        if (sb)
            arch_prefetch_write(sb);
    }
    int64_t b = prof_record(h, n, entry_fp);
    if (b < 0)
        return NULL;
    s = mote__tcache_shadow(h);
    void *p = s ? mote__tcache_alloc_shadow(s, c) : NULL;
    if (!p) {
        prof_count(h, (uint32_t)b, true, n);
        return NULL;
    }
    uint64_t *t = (uint64_t *)((uintptr_t)p + mote__sizeclass_size[c] - 16);
    t[0] = PROF_MAGIC ^ (uintptr_t)p;
    t[1] = (uint64_t)b << 40 | (uint64_t)n;
    return p;
}

void mote__prof_note_big(heap_tcache *h, heap_page *pg, size_t n, void *entry_fp)
{
    int64_t b = prof_record(h, n, entry_fp);
    if (b < 0 || n >= (1ULL << 40))
        return;
    pg->prof_info = (uint64_t)b << 40 | (uint64_t)n;
    pg->prof = 1;
}

void mote__prof_free(heap_page *pg, const void *p)
{
    uint64_t info;
    if (pg->kind == HEAP_PAGE_LARGE || pg->kind == HEAP_PAGE_HUGE) {
        info = pg->prof_info;
        pg->prof = 0;
    } else {
        uint64_t *t = prof_trailer(pg, p);
        if (t[0] != (PROF_MAGIC ^ (uintptr_t)p))
            return; /* not a live sampled block: free reports it */
        t[0] = 0;
        info = t[1];
    }
    uint32_t b = (uint32_t)(info >> 40);
    if (b >= PROF_BUCKETS || !prof.table)
        return;
    prof_count(LOAD(&mote__heap_tls, RELAXED), b, true, info & ((1ULL << 40) - 1));
}

size_t mote__prof_usable(const heap_page *pg) { return pg->bsize - 16; }

/* ---- output: profile.proto in a gzip member ----
 *
 * The format of github.com/google/pprof (proto/profile.proto), which is
 * what `go tool pprof` reads best: four sample types (allocated and in-use
 * objects and bytes, always, so -sample_index=alloc_space works whether or
 * not a sampled block was freed), each sample's values scaled back to the
 * estimate of the truth (Go's own heap profiles are written scaled), one
 * location per frame (return address - 1: the call), and the process's
 * executable file mappings, from which pprof symbolizes (a non-PIE binary
 * too, which the old text format's map made it misplace).  The gzip member
 * holds stored (uncompressed) deflate blocks: a malloc that every process
 * may preload pulls in no compression library for a file this small, and
 * pprof reads it as it reads any gzip.  Streamed through one 4 KiB buffer,
 * with no allocation. */

typedef struct prof_out {
    int fd, err;
    size_t n;
    uint32_t crc;   /* CRC-32 of the bytes so far (gzip's trailer) */
    uint64_t total; /* bytes so far (gzip's ISIZE) */
    uint8_t buf[4096];
} prof_out;

static uint32_t crc_table[256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static void raw_write(prof_out *o, const void *p, size_t n)
{
    const uint8_t *s = p;
    while (n && !o->err) {
        ssize_t w = write(o->fd, s, n);
        if (w < 0) {
            if (errno != EINTR)
                o->err = -errno;
            continue;
        }
        s += w;
        n -= (size_t)w;
    }
}

/* One stored block of what the buffer holds (LEN, then its complement). */
static void out_flush(prof_out *o)
{
    if (!o->n)
        return;
    uint32_t c = ~o->crc;
    for (size_t i = 0; i < o->n; i++)
        c = crc_table[(c ^ o->buf[i]) & 0xff] ^ (c >> 8);
    o->crc = ~c;
    uint16_t len = (uint16_t)o->n;
    uint8_t hdr[5] = {0x00, (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)~len,
                      (uint8_t)(~len >> 8)};
    raw_write(o, hdr, sizeof hdr);
    raw_write(o, o->buf, o->n);
    o->total += o->n;
    o->n = 0;
}

static void out_bytes(prof_out *o, const void *p, size_t len)
{
    const uint8_t *s = p;
    while (len) {
        if (o->n == sizeof o->buf)
            out_flush(o);
        size_t k = sizeof o->buf - o->n < len ? sizeof o->buf - o->n : len;
        memcpy(o->buf + o->n, s, k);
        o->n += k;
        s += k;
        len -= k;
    }
}

static void gz_begin(prof_out *o)
{
    /* magic, deflate, no flags, no time, no extra flags, Unix */
    static const uint8_t hdr[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    raw_write(o, hdr, sizeof hdr);
}

static void gz_end(prof_out *o)
{
    out_flush(o);
    uint8_t tail[13] = {0x01, 0, 0, 0xff, 0xff}; /* the last block, empty */
    for (int i = 0; i < 4; i++) {
        tail[5 + i] = (uint8_t)(o->crc >> (8 * i));
        tail[9 + i] = (uint8_t)(o->total >> (8 * i));
    }
    raw_write(o, tail, sizeof tail);
}

/* A protobuf message being built: small ones only (a sample of 32
 * frames is ~400 bytes). */
typedef struct pb_msg {
    size_t n;
    uint8_t b[1024];
} pb_msg;

/* v as a varint at b; its length. */
static size_t varint_at(uint8_t *b, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        b[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b[n++] = (uint8_t)v;
    return n;
}

static void pb_varint(pb_msg *m, uint64_t v) { m->n += varint_at(m->b + m->n, v); }

/* A varint field (wire type 0); zero is the default and is left out. */
static void pb_field(pb_msg *m, unsigned field, uint64_t v)
{
    if (!v)
        return;
    pb_varint(m, (uint64_t)field << 3);
    pb_varint(m, v);
}

/* A length-delimited field (wire type 2) of n bytes at p, into m. */
static void pb_bytes(pb_msg *m, unsigned field, const void *p, size_t n)
{
    pb_varint(m, (uint64_t)field << 3 | 2);
    pb_varint(m, n);
    memcpy(m->b + m->n, p, n);
    m->n += n;
}

/* The same, as a field of the profile itself: straight to the output. */
static void out_field(prof_out *o, unsigned field, const void *p, size_t n)
{
    uint8_t h[20];
    size_t k = varint_at(h, (uint64_t)field << 3 | 2);
    k += varint_at(h + k, n);
    out_bytes(o, h, k);
    out_bytes(o, p, n);
}

static void out_msg(prof_out *o, unsigned field, const pb_msg *m)
{
    out_field(o, field, m->b, m->n);
}

/* The profile's string table (field 6), written in index order. */
static void out_string(prof_out *o, uint32_t *next, const char *s, size_t len)
{
    out_field(o, 6, s, len);
    (*next)++;
}

/* exp(-x) for x >= 0, without libm: 2^-k e^-r with r = x - k ln 2 in
 * [0, ln 2), e^-r by its series (error < 1e-15). */
static double prof_exp_neg(double x)
{
    if (x > 700)
        return 0;
    int k = (int)(x * 1.4426950408889634);
    double r = x - k * 0.6931471805599453, t = 1, e = 1;
    for (int i = 1; i < 18; i++) {
        t *= -r / i;
        e += t;
    }
    union {
        uint64_t u;
        double d;
    } two = {.u = (uint64_t)(1023 - k) << 52};
    return e * two.d;
}

/* What count samples of bytes in all stand for: an allocation of the
 * average size n was sampled with probability 1 - exp(-n/R) (pprof's
 * scaleHeapSample, for its legacy heap_v2 profiles). */
static void prof_scale(uint64_t count, uint64_t bytes, uint64_t out[2])
{
    out[0] = out[1] = 0;
    if (!count || !bytes)
        return;
    double x = (double)bytes / (double)count / (double)mote__heap_cfg.prof_rate, p;
    if (x < 0.5) /* 1 - e^-x by its series, exact for a tiny x */
        p = x *
            (1 -
             x / 2 * (1 - x / 3 * (1 - x / 4 * (1 - x / 5 * (1 - x / 6 * (1 - x / 7))))));
    else
        p = 1 - prof_exp_neg(x);
    out[0] = (uint64_t)((double)count / p + 0.5);
    out[1] = (uint64_t)((double)bytes / p + 0.5);
}

/* The executable file mappings, for locations to point into, and the
 * functions of their files (opened at a location's first look: pprof's
 * `go tool` names nothing of a binary built without -g, nor of a stripped
 * library, so the profile carries the names of the symbol tables too;
 * pprof still prefers its own where it has debug information). */
#define PROF_MAPS      1024
#define PROF_SYMTABS   64
#define PROF_PATH_POOL (64 << 10)
static struct prof_map {
    uintptr_t start, limit, off;
    uint32_t path, path_len; /* in prof_paths; path_len 0: none kept */
    uint8_t looked;          /* its file's symtab was opened (or failed) */
    mote__os_symtab *syms;
} prof_maps[PROF_MAPS];
static uint32_t prof_nmaps, prof_nsymtabs, prof_paths_used;
static char prof_paths[PROF_PATH_POOL];
static uint32_t prof_nfuncs; /* the profile's function ids so far */

static uint32_t prof_map_of(uintptr_t a)
{
    uint32_t lo = 0, hi = prof_nmaps;
    while (lo < hi) { /* (/proc/self/maps is in address order) */
        uint32_t mid = (lo + hi) / 2;
        if (a < prof_maps[mid].start)
            hi = mid;
        else if (a >= prof_maps[mid].limit)
            lo = mid + 1;
        else
            return mid + 1;
    }
    return 0;
}

static const char *hex_field(const char *s, const char *end, uint64_t *v)
{
    *v = 0;
    for (; s < end; s++) {
        unsigned d = *s >= '0' && *s <= '9'   ? (unsigned)(*s - '0')
                     : *s >= 'a' && *s <= 'f' ? (unsigned)(*s - 'a' + 10)
                                              : 16;
        if (d == 16)
            break;
        *v = *v << 4 | d;
    }
    return s;
}

/* One line of /proc/self/maps: "start-end perms offset dev inode path". */
static void out_map_line(prof_out *o, uint32_t *next_str, const char *s, const char *end)
{
    uint64_t start, limit, off;
    s = hex_field(s, end, &start);
    if (s == end || *s != '-')
        return;
    s = hex_field(s + 1, end, &limit);
    if (end - s < 6 || s[3] != 'x') /* " r-xp " */
        return;
    s = hex_field(s + 6, end, &off);
    for (int f = 0; f < 2 && s < end; f++) { /* dev, inode */
        while (s < end && *s == ' ')
            s++;
        while (s < end && *s != ' ')
            s++;
    }
    while (s < end && *s == ' ')
        s++;
    if (s == end || *s != '/' || prof_nmaps == PROF_MAPS)
        return; /* no file ([vdso], anonymous JIT code): pprof could not read it */
    if (prof_nmaps && start < prof_maps[prof_nmaps - 1].limit)
        return; /* (not in order: a map read while it changed) */
    uint32_t name = *next_str;
    size_t len = (size_t)(end - s);
    out_string(o, next_str, s, len);
    prof_maps[prof_nmaps] = (struct prof_map){start, limit, off, 0, 0, 0, NULL};
    if (len < PATH_MAX && len + 1 <= PROF_PATH_POOL - prof_paths_used &&
        !(len > 10 && !memcmp(end - 10, " (deleted)", 10))) {
        memcpy(prof_paths + prof_paths_used, s, len);
        prof_paths[prof_paths_used + len] = 0;
        prof_maps[prof_nmaps].path = prof_paths_used;
        prof_maps[prof_nmaps].path_len = (uint32_t)len;
        prof_paths_used += (uint32_t)len + 1;
    }
    pb_msg m = {.n = 0};
    pb_field(&m, 1, ++prof_nmaps); /* id */
    pb_field(&m, 2, start);
    pb_field(&m, 3, limit);
    pb_field(&m, 4, off);
    pb_field(&m, 5, name);
    out_msg(o, 3, &m);
}

static void out_maps(prof_out *o, uint32_t *next_str)
{
    prof_nmaps = 0;
    prof_paths_used = 0;
    prof_nsymtabs = 0;
    prof_nfuncs = 0;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    static char line[8192]; /* under prof_write_lock */
    size_t n = 0;
    ssize_t r;
    while ((r = read(fd, line + n, sizeof line - n)) > 0 || (r < 0 && errno == EINTR)) {
        if (r < 0)
            continue;
        n += (size_t)r;
        char *s = line, *nl;
        while ((nl = memchr(s, '\n', (size_t)(line + n - s)))) {
            out_map_line(o, next_str, s, nl);
            s = nl + 1;
        }
        n = (size_t)(line + n - s);
        memmove(line, s, n);
        if (n == sizeof line) /* a line longer than any path: skip it */
            n = 0;
    }
    close(fd);
}

/* The function of address a in map mi (1-based), written to the profile
 * with its name at its first use: its id, or 0 when unknown. */
static uint64_t out_function_of(prof_out *o, uint32_t *next_str, uint32_t mi, uintptr_t a)
{
    struct prof_map *m = &prof_maps[mi - 1];
    if (!m->looked) {
        m->looked = 1;
        if (m->path_len && prof_nsymtabs < PROF_SYMTABS &&
            (m->syms = mote__os_symtab_open(prof_paths + m->path)))
            prof_nsymtabs++;
    }
    if (!m->syms)
        return 0;
    int64_t fn = mote__os_symtab_find(m->syms, m->off + (a - m->start));
    if (fn < 0)
        return 0;
    uint32_t *id = mote__os_symtab_id(m->syms, fn);
    if (!*id) {
        *id = ++prof_nfuncs;
        const char *name = mote__os_symtab_name(m->syms, fn);
        uint32_t str = *next_str;
        out_string(o, next_str, name, strlen(name));
        pb_msg f = {.n = 0};
        pb_field(&f, 1, *id);
        pb_field(&f, 2, str); /* name: pprof demangles it (system_name the same) */
        pb_field(&f, 3, str);
        out_msg(o, 5, &f); /* function */
    }
    return *id;
}

static void close_symtabs(void)
{
    for (uint32_t i = 0; i < prof_nmaps; i++) {
        mote__os_symtab_close(prof_maps[i].syms);
        prof_maps[i].syms = NULL;
    }
}

/* In-use never below 0 (counters read at slightly different moments). */
static void bucket_read(uint32_t b, uint64_t v[4])
{
    uint64_t fc = 0, fb = 0, ac = 0, ab = 0;
    for (int k = 0; k < PROF_STRIPES; k++) {
        prof_counts *c = prof_counts_of((uint32_t)k, b);
        fc += LOAD(&c->free_count, RELAXED);
        fb += LOAD(&c->free_bytes, RELAXED);
    }
    for (int k = 0; k < PROF_STRIPES; k++) {
        prof_counts *c = prof_counts_of((uint32_t)k, b);
        ac += LOAD(&c->alloc_count, RELAXED);
        ab += LOAD(&c->alloc_bytes, RELAXED);
    }
    v[2] = ac;
    v[3] = ab;
    v[0] = ac > fc ? ac - fc : 0;
    v[1] = ab > fb ? ab - fb : 0;
}

/* Functions that only allocate for their caller: pprof drops them from
 * the leaf end of each stack (a full match of the regular expression), so
 * their callers, which prof_hidden_frame puts back, are the ones named.
 * Allocators' own entry points never appear (a stack starts at their
 * caller). */
#define PROF_DROP_FRAMES "operator new.*|(__)?strn?dup|(__)?wcsn?dup"

/* One writer at a time (its buffer is static).  Not taken across fork: a
 * writer may block in write(2) for as long as its reader likes (a fork
 * then waited for it: a pipe to the child it was forking never drained);
 * the child, which has no writer, starts with it free. */
static heap_lock prof_write_lock = HEAP_LOCK_INIT;
/* Set by a thread from before it takes the lock until after it lets go:
 * a signal handler of that thread that writes a profile too is told
 * instead of waiting on itself for good. */
static __thread volatile sig_atomic_t prof_in_write
    __attribute__((tls_model("initial-exec")));

void mote__prof_fork_child(void) { STORE(&prof_write_lock.v, 0, RELEASE); }

static int prof_write_impl(int fd, bool at_exit)
{
    if (!LOAD(&mote__prof_on, ACQUIRE))
        return -ENODATA;
    if (fd < 0)
        return -EBADF;
    static prof_out o; /* under prof_write_lock: no stack of 4 KiB */
    /* (a reader that went away is -EPIPE, not SIGPIPE) */
    if (prof_in_write)
        return -EDEADLK;
    prof_in_write = 1;
    atomic_signal_fence(memory_order_seq_cst);
    sigset_t old;
    mote__os_sigpipe_block(&old);
    /* The exit's writer does not wait for good on another thread's (one
     * blocked on a reader that never reads held exit() forever): a second
     * at most, then no profile and a message. */
    if (!at_exit)
        heap_lock_acquire(&prof_write_lock);
    else if (!mote__heap_lock_timed(&prof_write_lock, 1000000000)) {
        mote__os_sigpipe_restore(&old);
        atomic_signal_fence(memory_order_seq_cst);
        prof_in_write = 0;
        return -EBUSY;
    }
    o.fd = fd;
    o.err = 0;
    o.n = 0;
    o.crc = 0;
    o.total = 0;
    if (!crc_table[1])
        crc_init();
    gz_begin(&o);
    /* strings 0-8 */
    static const char *const fixed[] = {"",
                                        "alloc_objects",
                                        "count",
                                        "alloc_space",
                                        "bytes",
                                        "inuse_objects",
                                        "inuse_space",
                                        "space",
                                        "mote heap profile",
                                        PROF_DROP_FRAMES};
    enum {
        S_ALLOC_OBJ = 1,
        S_COUNT,
        S_ALLOC_SPACE,
        S_BYTES,
        S_INUSE_OBJ,
        S_INUSE_SPACE,
        S_SPACE,
        S_COMMENT,
        S_DROP
    };
    uint32_t nstr = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        out_string(&o, &nstr, fixed[i], strlen(fixed[i]));
    static const uint8_t types[4][2] = {{S_ALLOC_OBJ, S_COUNT},
                                        {S_ALLOC_SPACE, S_BYTES},
                                        {S_INUSE_OBJ, S_COUNT},
                                        {S_INUSE_SPACE, S_BYTES}};
    pb_msg m;
    for (int t = 0; t < 4; t++) {
        m.n = 0;
        pb_field(&m, 1, types[t][0]);
        pb_field(&m, 2, types[t][1]);
        out_msg(&o, 1, &m); /* sample_type */
    }
    m.n = 0;
    pb_field(&m, 1, S_SPACE);
    pb_field(&m, 2, S_BYTES);
    out_msg(&o, 11, &m); /* period_type */
    m.n = 0;
    pb_field(&m, 12, mote__heap_cfg.prof_rate);    /* period */
    pb_field(&m, 13, S_COMMENT);                   /* comment */
    pb_field(&m, 14, S_INUSE_SPACE);               /* default_sample_type */
    pb_field(&m, 7, S_DROP);                       /* drop_frames */
    pb_field(&m, 9, (uint64_t)mote__os_wall_ns()); /* time_nanos */
    out_bytes(&o, m.b, m.n);
    out_maps(&o, &nstr);
    uint64_t v[4];
    uint32_t nused = LOAD(&prof.nused, ACQUIRE);
    if (nused > PROF_BUCKETS)
        nused = PROF_BUCKETS;
    for (uint32_t k = 0; k < nused; k++) {
        uint32_t i = LOAD(&prof_used[k], ACQUIRE);
        if (!i--)
            continue; /* being published: its first sample is very recent */
        prof_bucket *b = &prof.table[i];
        bucket_read(i, v);
        if (!v[2])
            continue;
        /* One location per frame, ids by bucket (no merging: pprof does it
         * by function); a stack that found no room has one, unknown. */
        uint32_t depth = i == PROF_OTHER || !b->depth ? 1 : b->depth;
        pb_msg smp = {.n = 0};
        pb_msg ids = {.n = 0};
        for (uint32_t d = 0; d < depth; d++) {
            uint64_t id = (uint64_t)i * PROF_DEPTH + d + 1;
            uintptr_t a = i == PROF_OTHER || !b->depth ? 0 : b->pc[d] - 1;
            uint32_t mi = a ? prof_map_of(a) : 0;
            uint64_t fid = mi ? out_function_of(&o, &nstr, mi, a) : 0;
            m.n = 0;
            pb_field(&m, 1, id);
            pb_field(&m, 2, mi);
            pb_field(&m, 3, a);
            if (fid) {
                pb_msg line = {.n = 0};
                pb_field(&line, 1, fid);
                pb_bytes(&m, 4, line.b, line.n); /* line: its function */
            }
            out_msg(&o, 4, &m); /* location */
            pb_varint(&ids, id);
        }
        pb_bytes(&smp, 1, ids.b, ids.n); /* location_id, packed */
        uint64_t alloc[2], inuse[2];
        prof_scale(v[2], v[3], alloc);
        prof_scale(v[0], v[1], inuse);
        pb_msg vals = {.n = 0};
        pb_varint(&vals, alloc[0]);
        pb_varint(&vals, alloc[1]);
        pb_varint(&vals, inuse[0]);
        pb_varint(&vals, inuse[1]);
        pb_bytes(&smp, 2, vals.b, vals.n); /* value, packed */
        out_msg(&o, 2, &smp);              /* sample */
    }
    close_symtabs();
    gz_end(&o);
    int err = o.err;
    heap_lock_release(&prof_write_lock);
    mote__os_sigpipe_restore(&old); /* takes a SIGPIPE the writes raised */
    atomic_signal_fence(memory_order_seq_cst);
    prof_in_write = 0;
    return err;
}

int mote__prof_write(int fd) { return prof_write_impl(fd, false); }

/* v in decimal at name + n; the new length. */
static size_t name_add_u64(char *name, size_t n, uint64_t v)
{
    char d[24];
    const char *digits = mote__os_u64_str(v, d);
    size_t k = strlen(digits);
    memcpy(name + n, digits, k);
    return n + k;
}

/* Writes the profile to MOTE_HEAPPROFILE's file ("%p": the pid), with
 * ".<seq>" after it when seq is not 0 (one written on the signal).  No
 * allocation and no stdio: the signal's handler may call it. */
static void prof_write_file(uint32_t seq, bool at_exit)
{
    const char *path = mote__heap_cfg.prof_path;
    if (!LOAD(&mote__prof_on, ACQUIRE) || !path)
        return;
    /* "%p" becomes the pid; without it only the process that read the
     * variable writes (a forked child would overwrite its parent's file). */
    char name[HEAP_PROF_PATH_MAX * 2]; /* each "%p" (2 bytes) -> 10 digits at most */
    size_t n = 0;
    bool pid_in_name = false;
    const char *s = path;
    /* (the loop stops 24 bytes short: room for a pid, then ".<seq>") */
    for (; *s && n < sizeof name - 24; s++) {
        if (s[0] == '%' && s[1] == 'p') {
            n = name_add_u64(name, n, (uint64_t)getpid());
            s++;
            pid_in_name = true;
        } else {
            name[n++] = *s;
        }
    }
    if (seq) {
        name[n++] = '.';
        n = name_add_u64(name, n, seq);
    }
    name[n] = 0;
    if (!pid_in_name && (int)getpid() != prof_pid)
        return;
    if (*s) { /* (it was cut short, and written to some other file) */
        mote__os_write_err(
            "mote: MOTE_HEAPPROFILE: the file name is too long, no profile "
            "written\n");
        return;
    }
    /* O_NONBLOCK: a FIFO with no reader fails (ENXIO) instead of holding
     * the exit for good; cleared at once for the writes. */
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd >= 0)
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (fd < 0) {
        const char *why = strerrordesc_np(errno);
        mote__os_write_err4("mote: MOTE_HEAPPROFILE: cannot open ", name, ": ",
                            why ? why : "unknown error");
        mote__os_write_err("\n");
        return;
    }
    int r = prof_write_impl(fd, at_exit);
    if (r == -EBUSY || r == -EDEADLK) {
        mote__os_write_err(at_exit ? "mote: MOTE_HEAPPROFILE: another thread is still "
                                     "writing a profile (a reader that does not "
                                     "read?): none written at exit\n"
                                   : "mote: MOTE_HEAPPROFILE_SIGNAL: the thread that "
                                     "took the signal was writing a profile: none "
                                     "written for it\n");
        close(fd);
        return;
    }
    if (close(fd) != 0 && r == 0)
        r = -errno;
    if (r < 0) { /* a full disk, say: the file is not a profile */
        const char *why = strerrordesc_np(-r);
        mote__os_write_err4("mote: MOTE_HEAPPROFILE: writing ", name,
                            " failed: ", why ? why : "unknown error");
        mote__os_write_err("\n");
    }
}

void mote__prof_write_at_exit(void) { prof_write_file(0, true); }

void mote__prof_dump_pending(void)
{
    if (!LOAD(&mote__prof_dump_req, RELAXED) || !XCHG(&mote__prof_dump_req, 0, ACQ_REL))
        return;
    /* The scavenger's, or a handler's: two handlers of different threads
     * may count at once (the atomic keeps their names apart). */
    prof_write_file(FETCH_ADD(&prof_dump_seq, 1, RELAXED) + 1, false);
}
