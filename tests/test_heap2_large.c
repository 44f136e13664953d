/*
 * test_heap2_large.c - big blocks freed and reused: large ones (128 KiB-
 * 2 MiB) leave warm free slices that merge with their neighbours, huge ones
 * (> 2 MiB) wait in the arena's cache.  A loop that allocates and frees the
 * same big block takes no page fault after its first pass, freed big blocks
 * go back to the OS after the decay period with no call from the program,
 * the cache stays in its bounds and under MOTE_MEMLIMIT, and a second free
 * of a freed big block is detected (the defect where a freed 1 MiB run was
 * reused at once by a small page and a double free released someone else's
 * block); and a page takes the shortest free run that holds it, leaving
 * long ones whole.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check.h"
#include "heap/heap.h"
#include "heap/internal.h"
#include "heap_test.h"
#include "mote.h"

static long minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static void touch(char *p, size_t n, char v)
{
    for (size_t off = 0; off < n; off += 4096)
        p[off] = v;
    p[n - 1] = v;
}

/* The slice a large block starts in: its run's, whatever its colour. */
static uintptr_t slice_of(const void *p) { return (uintptr_t)p >> HEAP_SLICE_SHIFT; }

static heap_arena_stats arena(void)
{
    heap_arena_stats st;
    mote__arena_stats(&st);
    return st;
}

/* ---- reuse without faults ---- */

TEST(big_block_loop_takes_no_fault_after_the_first_pass)
{
    static const size_t sizes[] = {200 << 10, 1 << 20, 4 << 20, 32 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        /* no other warm free slices: a large block's own are the best fit */
        mote_mem_release();
        char *p = mote_malloc(n);
        CHECK(p != NULL);
        touch(p, n, 1);
        mote_free(p);
        long f0 = minflt();
        for (int i = 0; i < 50; i++) {
            char *q = mote_malloc(n);
            CHECK(q != NULL);
            CHECK(heap_test_same_run(q, p)); /* the freed block came back */
            touch(q, n, (char)i);
            mote_free(q);
        }
        long faults = minflt() - f0;
        if (TEST_SANITIZED) /* the sanitizer's shadow memory faults */
            continue;
        if (faults > 4)
            fprintf(stderr, "%zu KiB: %ld faults in 50 passes\n", n >> 10, faults);
        CHECK(faults <= 4);
    }
}

TEST(calloc_of_a_cached_block_is_zero)
{
    for (size_t n = 300 << 10; n <= (6u << 20); n *= 4) {
        mote_mem_release();
        char *p = mote_malloc(n);
        memset(p, 0x5a, n);
        mote_free(p);
        char *q = mote_calloc(1, n);
        CHECK(heap_test_same_run(q, p));
        for (size_t i = 0; i < n; i += 512)
            CHECK(q[i] == 0);
        CHECK(q[n - 1] == 0);
        mote_free(q);
    }
}

TEST(a_bigger_cached_block_serves_a_smaller_request)
{
    mote_mem_release();
    char *p = mote_malloc(40 << 20);
    touch(p, 40 << 20, 1);
    mote_free(p);
    uint64_t mapped = arena().mapped;
    /* takes it; what lies a segment past the request stays cached, a
     * mapping of its own, and serves the next request warm */
    char *q = mote_malloc(5 << 20);
    CHECK(heap_test_same_run(q, p));
    CHECK(mote_usable_size(q) >= (5u << 20));
    CHECK(mote_usable_size(q) < (5u << 20) + HEAP_SEG_SIZE);
    char *r = mote_malloc(30 << 20);
    CHECK(r > q + mote_usable_size(q) && r + (30 << 20) <= p + (40 << 20));
    CHECK_EQ(arena().mapped, mapped);
    touch(q, 5 << 20, 2);
    touch(r, 30 << 20, 2);
    /* freed, the pieces join again: they serve a block as big as the first */
    mote_free(q);
    mote_free(r);
    char *w = mote_malloc(39 << 20);
    CHECK(heap_test_same_run(w, p));
    CHECK_EQ(arena().mapped, mapped);
    mote_free(w);
    /* a freed large block's slices serve a smaller one, only what it needs */
    mote_mem_release();
    p = mote_malloc(2 << 20);
    mote_free(p);
    q = mote_malloc(300 << 10);
    CHECK(slice_of(q) == slice_of(p)); /* (each block at its cache colour) */
    CHECK(mote_usable_size(q) < (400u << 10));
    mote_free(q);
}

/* Freed large blocks' slices are free at once and merge with their free
 * neighbours: two freed 512 KiB blocks serve a 1 MiB one, warm.  (Cached
 * whole, as they were, they served only requests they held, and the 1 MiB
 * block took fresh slices: 256 page faults, and RSS for both.)  Blocks too
 * big for the thread's cache of freed large blocks (runcache.c). */
TEST(freed_large_blocks_merge_and_serve_a_bigger_one_warm)
{
    _Static_assert((512 << 10) > (HEAP_RUNCACHE_SLICES << HEAP_SLICE_SHIFT), "kept");
    /* (8 KiB short of whole slices: room for their colours, no slice more) */
    enum { HALF = (512 << 10) - (8 << 10), WHOLE = (1 << 20) - (8 << 10) };
    mote_mem_release(); /* no other warm free slices */
    char *x = mote_malloc(WHOLE);
    CHECK(x != NULL);
    touch(x, WHOLE, 1);
    mote_free(x);
    char *a[2];
    for (int i = 0; i < 2; i++) {
        a[i] = mote_malloc(HALF);
        /* in the freed block's slices */
        CHECK(slice_of(a[i]) == slice_of(x) + (uintptr_t)i * 8);
        touch(a[i], HALF, 2);
    }
    for (int i = 0; i < 2; i++)
        mote_free(a[i]);
    long f0 = minflt();
    char *y = mote_malloc(WHOLE);
    CHECK(heap_test_same_run(y, x));
    touch(y, WHOLE, 3);
    long faults = minflt() - f0;
    if (!TEST_SANITIZED)
        CHECK(faults <= 4);
    mote_free(y);
}

/* Pages of small and bitmap blocks and large blocks take slices in
 * different segments: a one-slice page in a freed large block's run splits
 * it, and the next large block takes fresh slices beside warm ones in
 * pieces (bench/malloc/churn). */
TEST(small_pages_and_large_blocks_keep_to_their_own_segments)
{
    enum { N = 16 };
    char *big[N];
    void *small[N * 4];
    for (int i = 0; i < N; i++) {
        big[i] = mote_malloc((size_t)(130 + 97 * i) << 10);
        CHECK(big[i] != NULL);
        for (int k = 0; k < 4; k++) { /* a new page of a class each time */
            small[i * 4 + k] = mote_malloc((size_t)(16 << (k + i % 8)));
            CHECK(small[i * 4 + k] != NULL);
        }
    }
    for (int i = 0; i < N; i += 2) /* free runs among live large blocks */
        mote_free(big[i]);
    void *more[N * 4];
    for (int i = 0; i < N * 4; i++) {
        more[i] = mote_malloc((size_t)(5000 + 400 * i)); /* up to HEAP_SMALL_MAX */
        CHECK(more[i] != NULL);
    }
    for (int i = 0; i < N; i++)
        for (int k = 0; k < N * 4; k++) {
            uintptr_t s1 = (uintptr_t)small[k] & ~HEAP_SEG_MASK;
            uintptr_t s2 = (uintptr_t)more[k] & ~HEAP_SEG_MASK;
            CHECK(((uintptr_t)big[i] & ~HEAP_SEG_MASK) != s1);
            CHECK(((uintptr_t)big[i] & ~HEAP_SEG_MASK) != s2);
        }
    for (int i = 0; i < N * 4; i++) {
        mote_free(small[i]);
        mote_free(more[i]);
    }
    for (int i = 1; i < N; i += 2)
        mote_free(big[i]);
}

/* A wholly free segment of large blocks may come to serve pages of blocks;
 * the first slice of the large block freed there stays out of them until
 * the decay period, so a second free of that block cannot free a block of
 * a page that starts where it did.  (The arena lock is held throughout, so
 * the scavenger cannot release the slice and drop its guard.) */
TEST(a_segment_that_changes_use_keeps_a_freed_large_block_s_first_slice)
{
    char *p = mote_malloc(1 << 20);
    CHECK(p != NULL);
    heap_segment *seg = heap_segment_of(p);
    unsigned at = (unsigned)(((uintptr_t)p >> HEAP_SLICE_SHIFT) & (HEAP_SLICES - 1));
    mote_free(p);
    /* the thread's run cache keeps it (its bigger block): to the arena now */
    mote__runcache_flush(mote__heap_tls);
    heap_lock_acquire(&mote__heap_arena_lock);
    if (seg->free_mask != ~1ULL) { /* (when other tests ran in this process) */
        heap_lock_release(&mote__heap_arena_lock);
        TEST_SKIP("the block shared its segment with others");
    }
    uint64_t guarded = seg->guard_mask & seg->free_mask; /* p's, maybe others' */
    CHECK(guarded >> at & 1);
    int want = (int)__builtin_popcountll(seg->free_mask & ~guarded);
    enum { MAXP = 8192 };
    static heap_page *pg[MAXP];
    int n = 0, in_seg = 0;
    bool zero;
    while (n < MAXP && in_seg < want) { /* every slice but the guarded ones */
        heap_page *q = mote__arena_page_alloc(1, &zero, false);
        CHECK(q != NULL);
        pg[n++] = q;
        if (heap_segment_of(q->start) == seg) {
            in_seg++;
            CHECK(q->start != (uint8_t *)p);
        }
    }
    CHECK_EQ(in_seg, want);
    CHECK_EQ(seg->free_mask, guarded);
    for (int i = 0; i < n; i++)
        mote__arena_page_free(pg[i]);
    heap_lock_release(&mote__heap_arena_lock);
}

/* With no address space left for a new segment, a page takes the free
 * slices of a segment of the other use rather than fail. */
static int small_blocks_after_big_ones_took_the_address_space(void)
{
    enum { MAXB = 1024, SMALL = 8192 };
    static void *big[MAXB], *small[SMALL];
    int k = 0;
    while (k < MAXB && (big[k] = mote_malloc(1 << 20))) /* 3 a segment */
        memset(big[k++], 1, 4096);
    if (k == MAXB || k < 16) /* no limit met, or hardly any room */
        return 4;
    /* 32 MiB of small blocks: more than the segments of pages hold */
    for (int i = 0; i < SMALL; i++) {
        if (!(small[i] = mote_malloc(4000)))
            return 5;
        memset(small[i], 2, 4000);
    }
    for (int i = 0; i < SMALL; i++)
        mote_free(small[i]);
    for (int i = 0; i < k; i++)
        mote_free(big[i]);
    return 0;
}

TEST(out_of_address_space_a_page_takes_slices_of_the_other_use)
{
    if (TEST_SANITIZED) /* the shadow memory is address space too */
        TEST_SKIP("sanitizer build");
    CHECK_EQ(test_fork_with_address_space(
                 small_blocks_after_big_ones_took_the_address_space, 256u << 20),
             0);
}

/* A request bigger than every cached block grows one with mremap: its
 * pages move into the new block, and only the rest faults (blocks of
 * varying sizes each faulted a whole new mapping: 2x glibc's time). */
TEST(a_smaller_cached_block_grows_into_a_bigger_request)
{
    mote_mem_release();
    size_t small = 3u << 20, big = 9u << 20;
    char *p = mote_malloc(small);
    CHECK(p != NULL);
    memset(p, 0x6b, small);
    mote_free(p);
    char *q = mote_malloc(big);
    CHECK(q != NULL);
    bool moved_in = true; /* the old pages, bytes and all */
    for (size_t i = 0; i < small; i += 4096)
        moved_in &= q[i] == 0x6b;
    CHECK(moved_in);
    memset(q, 1, big);
    CHECK(mote_usable_size(q) >= big);
    mote_free(q);
}

/* The VmFlags line of the mapping that holds p, from /proc/self/smaps. */
static bool vm_flags_of(const void *p, char *flags, size_t n)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    CHECK(f != NULL);
    char line[256];
    bool in = false, found = false;
    while (!found && fgets(line, sizeof line, f)) {
        uintptr_t lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
            strchr(line, '-') < strchr(line, ' '))
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (in && !strncmp(line, "VmFlags:", 8)) {
            snprintf(flags, n, "%s", line + 8);
            found = true;
        }
    }
    fclose(f);
    return found;
}

TEST(huge_blocks_but_calloc_s_ask_for_huge_pages_and_segments_do_not)
{
    char flags[256];
    bool was = mote__heap_cfg.hugepages;
    mote_mem_release(); /* no cached block: these are fresh mappings */
    mote__heap_cfg.hugepages = true;
    char *huge = mote_malloc(6u << 20), *small = mote_malloc(100);
    CHECK(huge != NULL && small != NULL);
    CHECK(vm_flags_of(huge, flags, sizeof flags));
    CHECK(strstr(flags, " hg") != NULL);
    CHECK(vm_flags_of(small, flags, sizeof flags));
    CHECK(strstr(flags, " hg") == NULL && strstr(flags, " nh") != NULL);
    char *table = mote_calloc(1, 48u << 20); /* fresh: calloc's are left alone */
    CHECK(table != NULL && table[0] == 0 && table[(48u << 20) - 1] == 0);
    CHECK(vm_flags_of(table, flags, sizeof flags));
    CHECK(strstr(flags, " hg") == NULL);
    mote_free(table);
    mote_mem_release();
    mote__heap_cfg.hugepages = false;     /* MOTE_MALLOC_HUGEPAGES=off */
    char *plain = mote_malloc(40u << 20); /* bigger than any cached one */
    CHECK(plain != NULL);
    CHECK(vm_flags_of(plain, flags, sizeof flags));
    CHECK(strstr(flags, " hg") == NULL);
    mote__heap_cfg.hugepages = was;
    mote_free(plain);
    mote_free(huge);
    mote_free(small);
}

TEST(cached_blocks_keep_their_alignment_promises)
{
    static const size_t aligns[] = {1 << 16, 1 << 20, 8 << 20, 1UL << 30};
    for (size_t k = 0; k < sizeof aligns / sizeof *aligns; k++) {
        void *v[3];
        for (int i = 0; i < 3; i++) {
            v[i] = mote_aligned_alloc(aligns[(k + (size_t)i) % 4], (size_t)(3 + i) << 20);
            CHECK(v[i] != NULL);
            CHECK((uintptr_t)v[i] % aligns[(k + (size_t)i) % 4] == 0);
        }
        for (int i = 0; i < 3; i++)
            mote_free(v[i]);
        for (int i = 0; i < 3; i++) {
            size_t a = aligns[(k + 2 - (size_t)i) % 4];
            void *p = mote_aligned_alloc(a, (size_t)(3 + i) << 20);
            CHECK(p != NULL);
            CHECK((uintptr_t)p % a == 0);
            mote_free(p);
        }
    }
}

/* Big blocks start at varied cache lines of their first page (heap_colour),
 * so their first bytes do not all fall in one cache set, and none on the
 * first or last two lines of a page (slow to write page after page); each
 * still lies in its run's first page, ends where its run does, and a block
 * that asks for alignment gets it, even from a coloured block freed
 * before. */
#define EDGE_LINES (3ULL | 3ULL << 62) /* lines 0, 1, 62 and 63 of a page */
static unsigned lines_of(char *const *v, int n)
{
    uint64_t seen = 0;
    for (int i = 0; i < n; i++)
        seen |= heap_test_line_bit(v[i]);
    return (unsigned)__builtin_popcountll(seen);
}

TEST(big_blocks_start_at_varied_cache_lines)
{
    enum { N = 48 };
    /* large with room in their runs; 1 MiB, which fills its run whole (a
     * slice more for the colour); huge */
    static const size_t sizes[] = {100 << 10, 1 << 20, 3 << 20};
    static const unsigned min_lines[] = {12, 12, 12};
    mote_mem_release(); /* no cached huge block of an aligned request before */
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        char *v[N];
        for (int i = 0; i < N; i++) {
            v[i] = mote_malloc(sizes[k]);
            CHECK(v[i] != NULL);
            CHECK((uintptr_t)v[i] % 64 == 0);
            /* in its run's first page; a huge one's header page below it */
            bool huge = sizes[k] > HEAP_LARGE_MAX;
            size_t lead =
                huge ? (sizeof(heap_segment) + HEAP_OS_PAGE - 1) & ~(HEAP_OS_PAGE - 1)
                     : 0;
            uintptr_t off = (uintptr_t)v[i] % (huge ? HEAP_SEG_SIZE : HEAP_SLICE_SIZE);
            CHECK(off >= lead && off - lead <= HEAP_COLOUR_MAX);
            size_t us = mote_usable_size(v[i]);
            CHECK(us >= sizes[k]);
            /* a large block ends with its run; a huge one with its mapping */
            uintptr_t end = (uintptr_t)v[i] + us;
            CHECK(end % (huge ? HEAP_OS_PAGE : HEAP_SLICE_SIZE) == 0);
            memset(v[i], i, sizes[k]);
        }
        CHECK(lines_of(v, N) >= min_lines[k]);
        for (int i = 0; i < N; i++)
            CHECK((heap_test_line_bit(v[i]) & EDGE_LINES) == 0);
        for (int i = 0; i < N; i++) {
            CHECK((unsigned char)v[i][sizes[k] - 1] == (unsigned char)i);
            mote_free(v[i]);
        }
    }
    /* aligned requests after coloured blocks were freed (and cached) */
    static const size_t aligns[] = {128, 4096, 1 << 16, 1 << 21};
    static const size_t asizes[] = {100 << 10, 1 << 20, 3 << 20};
    for (size_t k = 0; k < sizeof asizes / sizeof *asizes; k++) {
        for (size_t j = 0; j < sizeof aligns / sizeof *aligns; j++) {
            char *plain = mote_malloc(asizes[k]);
            CHECK(plain != NULL);
            mote_free(plain);
            char *p = mote_aligned_alloc(aligns[j], asizes[k]);
            CHECK(p != NULL && (uintptr_t)p % aligns[j] == 0);
            CHECK(mote_usable_size(p) >= asizes[k]);
            memset(p, 7, asizes[k]);
            mote_free(p);
        }
    }
}

/* A run taken again and again (a loop's block: from the run cache, the
 * arena's free slices or the cache of huge blocks) starts at a new line
 * each time, so a line slow to write on some host is only its share. */
TEST(a_block_taken_again_and_again_takes_every_line_in_turn)
{
    enum { N = 64 };
    static const size_t sizes[] = {100 << 10, 1 << 20, 4 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        mote_mem_release();
        uintptr_t first = 0; /* (an address only: its block is freed) */
        uint64_t seen = 0;
        for (int i = 0; i < N; i++) {
            char *p = mote_malloc(sizes[k]);
            CHECK(p != NULL);
            if (!first)
                first = (uintptr_t)p;
            CHECK(heap_test_same_run(p, (const void *)first));
            CHECK((heap_test_line_bit(p) & EDGE_LINES) == 0);
            seen |= heap_test_line_bit(p);
            p[sizes[k] - 1] = 1;
            mote_free(p);
        }
        CHECK(__builtin_popcountll(seen) >= 32);
    }
}

/* Blocks a program holds and replaces, taken from the run cache after a
 * rest (other takes between), keep their lines, so the lines a program
 * touches in them stay the ones it touched before; a block taken again
 * soon moves (above).  Each round takes the N blocks in the order it took
 * them last, so each rests N - 1 takes. */
TEST(a_block_taken_again_after_a_rest_keeps_its_line)
{
    enum { N = HEAP_RUNCACHE_RECENT + 4, ROUNDS = 5 };
    _Static_assert(N <= HEAP_RUNCACHE_SLOTS && N <= HEAP_RUNCACHE_MAX,
                   "all kept at once");
    mote_mem_release();
    char *v[N], *first[N];
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < N; i++) {
            size_t n = (size_t)(40 + i + r) << 10; /* one slice each, sizes moving */
            v[i] = mote_malloc(n);
            CHECK(v[i] != NULL);
            if (r == 0)
                first[i] = v[i];
            CHECK(heap_test_same_run(v[i], first[i]));
            CHECK(v[i] == first[i]); /* the same line */
            memset(v[i], r * N + i, n);
        }
        for (int i = N; i-- > 0;) { /* v[0] freed last: taken first */
            size_t n = (size_t)(40 + i + r) << 10;
            CHECK((unsigned char)v[i][0] == (unsigned char)(r * N + i));
            CHECK((unsigned char)v[i][n - 1] == (unsigned char)(r * N + i));
            mote_free(v[i]);
        }
    }
}

/* A kept line is one heap_colour could have given for the block's room now
 * (heap_colour_allowed): the colours it allows are the colours heap_colour
 * gives, for rooms of none, one, two and many lines. */
TEST(the_lines_a_kept_block_may_keep_are_those_heap_colour_gives)
{
    static const size_t rooms[] = {0,    1,    63,   64,   127,  128,   129,
                                   191,  192,  255,  256,  1000, 3903,  3904,
                                   3968, 4032, 4095, 4096, 8192, 100000};
    for (size_t k = 0; k < sizeof rooms / sizeof *rooms; k++) {
        uint64_t given = 0, allowed = 0; /* bit i: line i of a page */
        for (uint32_t seq = 0; seq < 20000; seq++) {
            size_t c = heap_colour(seq, rooms[k]);
            CHECK(c % 64 == 0 && c <= rooms[k] && c <= HEAP_COLOUR_MAX);
            given |= 1ULL << (c / 64);
        }
        for (size_t c = 0; c < HEAP_OS_PAGE; c += 64)
            if (heap_colour_allowed(c, rooms[k]))
                allowed |= 1ULL << (c / 64);
        CHECK(given == allowed);
    }
}

/* ---- bounds and giving back ---- */

TEST(cache_is_bounded)
{
    mote_mem_release();
    void *v[200];
    for (int i = 0; i < 200; i++)
        v[i] = mote_malloc((size_t)(130 + 7 * i) << 10); /* 200 distinct sizes */
    for (int i = 0; i < 200; i++)
        mote_free(v[i]);
    heap_arena_stats st = arena();
    CHECK(st.cache_count <= 64);
    CHECK(st.cache_bytes <= (64u << 20) + (uint64_t)mote__heap_committed_bytes() / 4);
    for (int i = 0; i < 20; i++)
        v[i] = mote_malloc(20u << 20);
    for (int i = 0; i < 20; i++)
        mote_free(v[i]);
    st = arena();
    CHECK(st.cache_bytes <= (64u << 20) + (uint64_t)mote__heap_committed_bytes() / 4);
    mote_mem_release();
    st = arena();
    CHECK_EQ(st.cache_count, 0);
    CHECK_EQ(st.cache_bytes, 0);
    uint64_t fr = 0;
    CHECK_EQ(mote__heap_metric("/heap/free:bytes", &fr), 0);
    CHECK(fr <= 256 * 1024);
}

static long rss_bytes(void)
{
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    CHECK(f != NULL);
    CHECK(fscanf(f, "%ld %ld", &pages, &res) == 2);
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

TEST(cached_blocks_go_back_after_the_decay_period_with_no_call)
{
    mote_mem_release();
    long before = rss_bytes();
    uint64_t c0 = mote__heap_committed_bytes();
    void *v[16];
    for (int i = 0; i < 16; i++) {
        size_t n = i % 2 ? (size_t)(1 + i % 3) << 20 : (size_t)(3 + i) << 20;
        v[i] = mote_malloc(n);
        touch(v[i], n, 1);
    }
    for (int i = 0; i < 16; i++)
        mote_free(v[i]);
    CHECK(arena().cache_count > 0);
    long now = 0;
    uint64_t c = 0;
    for (int i = 0; i < 30; i++) { /* decay 500 ms; no allocator call */
        usleep(100 * 1000);
        now = rss_bytes();
        c = mote__heap_committed_bytes();
        if (c <= c0 + (1 << 20) && arena().cache_count == 0)
            break;
    }
    fprintf(stderr, "rss before %ld KiB, after %ld KiB; committed %llu -> %llu KiB\n",
            before >> 10, now >> 10, (unsigned long long)c0 >> 10,
            (unsigned long long)c >> 10);
    CHECK_EQ(arena().cache_count, 0);
    CHECK(c <= c0 + (1 << 20));
    if (!TEST_SANITIZED)
        CHECK(now <= before + (4 << 20));
}

TEST(memory_limit_counts_the_cache)
{
    mote_mem_release();
    uint64_t base = mote__heap_committed_bytes();
    CHECK_EQ(mote__heap_set_limit(base + (48u << 20)), 0);
    /* blocks of changing sizes: the cache must make room, not fail them */
    for (int i = 0; i < 40; i++) {
        size_t n = (size_t)(3 + i % 9) << 20;
        char *p = mote_malloc(n);
        CHECK(p != NULL);
        touch(p, n, 1);
        CHECK(mote__heap_committed_bytes() <= base + (48u << 20));
        mote_free(p);
        CHECK(mote__heap_committed_bytes() <= base + (48u << 20));
    }
    errno = 0;
    CHECK(mote_malloc(60u << 20) == NULL);
    CHECK_EQ(errno, ENOMEM);
    CHECK_EQ(mote__heap_set_limit(0), 0);
    mote_mem_release();
}

/* Under a limit a cached block serves a smaller request cut to its size:
 * the up-to-twice slack kept otherwise counted against the limit (a 12 MiB
 * request took a cached 20 MiB block whole, and the 40 MiB one after it
 * failed under a 55 MiB limit). */
TEST(under_a_limit_a_cached_block_is_cut_to_the_request)
{
    mote_mem_release();
    uint64_t base = mote__heap_committed_bytes();
    CHECK_EQ(mote__heap_set_limit(base + (55u << 20)), 0);
    char *a = mote_malloc(20u << 20);
    CHECK(a != NULL);
    touch(a, 20u << 20, 1);
    mote_free(a);
    char *b = mote_malloc(12u << 20);
    CHECK(b != NULL);
    CHECK(mote_usable_size(b) < (13u << 20));
    char *c = mote_malloc(40u << 20);
    CHECK(c != NULL);
    mote_free(c);
    mote_free(b);
    CHECK_EQ(mote__heap_set_limit(0), 0);
    mote_mem_release();
}

/* ---- double frees ---- */

static void *thread_noop(void *arg) { return arg; }

/* What happens between the two frees: a large block's slices are free at
 * once, but no page of small blocks may start on its first slice until it
 * is released, or the second free would free that page's first block. */
enum { NOTHING, SMALL_ALLOC, NEW_THREAD, EVERY_CLASS };

static void double_free(void *arg)
{
    uintptr_t a = (uintptr_t)arg;
    size_t n = (size_t)(a >> 4);
    int between = (int)(a & 15);
    char *p = mote_malloc(n);
    memset(p, 1, n);
    mote_free(p);
    void *keep = NULL;
    if (between == SMALL_ALLOC) {
        keep = mote_malloc(3000);
        memset(keep, 2, 3000);
    } else if (between == NEW_THREAD) {
        pthread_t t; /* glibc callocs the new thread's DTV */
        CHECK(pthread_create(&t, NULL, thread_noop, NULL) == 0);
        pthread_join(t, NULL);
    } else if (between == EVERY_CLASS) { /* a new page of each class */
        for (size_t m = 16; m <= (128u << 10); m += m / 2) {
            keep = mote_malloc(m);
            memset(keep, 3, m);
        }
    }
    mote_free(p);
    fprintf(stderr, "double free of %zu bytes NOT detected\n", n);
    (void)keep;
}

TEST(double_free_of_a_large_or_huge_block_aborts)
{
    static const size_t sizes[] = {140 << 10, 300000,  1 << 20,
                                   2 << 20,   4 << 20, 12 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        for (uintptr_t between = NOTHING; between <= EVERY_CLASS; between++)
            test_expect_invalid_free(double_free,
                                     (void *)(((uintptr_t)sizes[k] << 4) | between));
}

static void free_inside_cached(void *arg)
{
    (void)arg;
    char *p = mote_malloc(1 << 20);
    mote_free(p);
    mote_free(p + 65536);
}

TEST(free_inside_a_cached_run_aborts)
{
    test_expect_invalid_free(free_inside_cached, NULL);
}

/* ---- realloc of a huge block: its pages move, nothing is copied ---- */

/* One byte at the start of every page in [from, to). */
static void fill_pages(unsigned char *p, size_t from, size_t to, unsigned salt)
{
    for (size_t off = (from + 4095) & ~(size_t)4095; off < to; off += 4096)
        p[off] = (unsigned char)(off / 4096 * 31 + salt);
}

static bool pages_hold(const unsigned char *p, size_t from, size_t to, unsigned salt)
{
    for (size_t off = from; off < to; off += 4096)
        if (p[off] != (unsigned char)(off / 4096 * 31 + salt))
            return false;
    return true;
}

/* Grown in small steps from 3 MiB to 96 MiB and back, the bytes stay, the
 * block stays a valid huge block (usable size, alignment, free), and the
 * address space mapped stays about the block's (a copy at each step made
 * growing a 64 MiB buffer 46x slower than glibc's mremap). */
TEST(a_huge_block_grows_and_shrinks_in_place_or_by_moving_its_pages)
{
    size_t n = 3 << 20;
    unsigned char *p = mote_malloc(n);
    CHECK(p != NULL);
    fill_pages(p, 0, n, 1);
    uint64_t mapped0 = arena().mapped;
    int moves = 0, steps = 0;
    while (n < (96u << 20)) {
        size_t m = n + n / 50 + 4096;
        unsigned char *q = mote_realloc(p, m);
        CHECK(q != NULL);
        CHECK((uintptr_t)q % 16 == 0);
        CHECK(mote_usable_size(q) >= m);
        CHECK(pages_hold(q, 0, 3 << 20, 1)); /* the first bytes, after every move */
        moves += q != p;
        steps++;
        fill_pages(q, n, m, 1);
        p = q;
        n = m;
    }
    CHECK(pages_hold(p, 0, n, 1));
    /* no copy left behind: what is mapped grew by about the block */
    CHECK(arena().mapped - mapped0 < n + (n >> 2) + (8u << 20));
    printf("%d steps to %zu MiB, %d moves\n", steps, n >> 20, moves);
    CHECK(moves <=
          steps / 8); /* grown a quarter at a time: a copy at every step before */
    while (n > (3u << 20)) {
        size_t m = n / 3;
        unsigned char *q = mote_realloc(p, m);
        CHECK(q != NULL);
        CHECK(pages_hold(q, 0, m, 1));
        p = q;
        n = m;
    }
    mote_free(p);
    /* a block from memalign too (its header in a unit of its own) */
    p = mote_aligned_alloc(8 << 20, 5 << 20);
    CHECK(p != NULL && (uintptr_t)p % (8 << 20) == 0);
    fill_pages(p, 0, 5 << 20, 7);
    p = mote_realloc(p, 40 << 20);
    CHECK(p != NULL);
    CHECK(pages_hold(p, 0, 5 << 20, 7));
    mote_free(p);
}

/* The range of the mapping in /proc/self/maps that holds p. */
static bool mapping_of(const void *p, uintptr_t *lo, uintptr_t *hi)
{
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx", &a, &b) == 2 && a <= (uintptr_t)p &&
            (uintptr_t)p < b) {
            *lo = a;
            *hi = b;
            found = true;
        }
    }
    fclose(f);
    return found;
}

/* A block that could not grow where it was moves to a new unit, and is one
 * mapping there, so it grows in place again.  (Moved into the start of a
 * bigger mapping, it stayed a mapping of its own beside the fresh rest:
 * every later growth failed in place and moved it again.) */
TEST(a_moved_huge_block_is_one_mapping_and_grows_in_place_again)
{
    size_t n = 6 << 20;
    unsigned char *p = mote_malloc(n);
    CHECK(p != NULL);
    fill_pages(p, 0, n, 3);
    heap_segment *seg = heap_segment_of(p);
    uint8_t *end = (uint8_t *)seg + seg->map_size;
    /* A page mapped right after the block keeps it from growing in place
     * (if that fails, something is there already). */
    void *wall = mmap(end, 4096, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (wall != MAP_FAILED && wall != end) { /* (a kernel without NOREPLACE) */
        munmap(wall, 4096);
        wall = MAP_FAILED;
    }
    /* (a block from the arena's cache may have room past n already) */
    size_t m = mote_usable_size(p) + (2 << 20);
    unsigned char *q = mote_realloc(p, m);
    CHECK(q != NULL);
    if (q == p)
        fprintf(stderr, "grew in place: wall %p at %p, mapping %p+%zu\n", wall,
                (void *)end, (void *)seg, seg->map_size);
    CHECK(q != p);
    CHECK(pages_hold(q, 0, n, 3));
    fill_pages(q, n, m, 3);
    n = m;
    seg = heap_segment_of(q);
    uintptr_t lo = 0, hi = 0;
    CHECK(mapping_of(q, &lo, &hi));
    if (lo > (uintptr_t)seg || hi < (uintptr_t)seg + seg->map_size)
        fprintf(stderr, "block's mapping %p+%zu, in /proc/self/maps %lx-%lx\n",
                (void *)seg, seg->map_size, (unsigned long)lo, (unsigned long)hi);
    CHECK(lo <= (uintptr_t)seg && hi >= (uintptr_t)seg + seg->map_size);
    /* and so it grows in place, while the address space after it is free
     * (a growth takes a quarter more at least) */
    end = (uint8_t *)seg + seg->map_size;
    size_t grow = seg->map_size / 4 + (1 << 20);
    void *probe = mmap(end, grow, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    bool room = probe == end;
    if (probe != MAP_FAILED)
        munmap(probe, grow);
    if (room) {
        unsigned char *r = mote_realloc(q, n + (512 << 10));
        CHECK(r == q);
        CHECK(pages_hold(r, 0, n, 3));
        q = r;
    }
    if (wall != MAP_FAILED)
        munmap(wall, 4096);
    mote_free(q);
}

/* A block split from a cached one has its neighbour (cached, or in use)
 * right after it: it grows by moving its pages, bytes and all, and shrinks
 * by giving back its tail; its neighbour is untouched. */
TEST(a_block_split_from_a_cached_one_grows_past_its_neighbour)
{
    mote_mem_release();
    unsigned char *p = mote_malloc(40 << 20);
    CHECK(p != NULL);
    mote_free(p);
    unsigned char *q = mote_malloc(5 << 20);
    unsigned char *r = mote_malloc(30 << 20); /* the rest, right after q */
    CHECK(heap_test_same_run(q, p) && r > q);
    fill_pages(q, 0, 5 << 20, 3);
    fill_pages(r, 0, 30 << 20, 4);
    unsigned char *g = mote_realloc(q, 12 << 20);
    CHECK(g != NULL && g != r);
    CHECK(pages_hold(g, 0, 5 << 20, 3));
    CHECK(pages_hold(r, 0, 30 << 20, 4));
    fill_pages(g, 5 << 20, 12 << 20, 5);
    g = mote_realloc(g, 2 << 20);
    CHECK(g != NULL);
    CHECK(pages_hold(g, 0, 2 << 20, 3));
    mote_free(r); /* cached; then a block grows into it from below */
    q = mote_malloc(3 << 20);
    CHECK(q != NULL);
    fill_pages(q, 0, 3 << 20, 6);
    q = mote_realloc(q, 24 << 20);
    CHECK(q != NULL);
    CHECK(pages_hold(q, 0, 3 << 20, 6));
    mote_free(q);
    mote_free(g);
}

static void free_the_old_address(void *arg)
{
    (void)arg;
    char *p = mote_malloc(3 << 20);
    char *q = p;
    for (size_t n = 4 << 20; q == p && n < (1u << 30); n *= 2)
        q = mote_realloc(q, n); /* until it moves */
    mote_free(p);
    fprintf(stderr, "free of the old address NOT detected\n");
}

/* A coloured huge block grows and shrinks by moving its pages: its bytes
 * and its offset in the page come along. */
TEST(a_coloured_huge_block_keeps_its_bytes_through_realloc)
{
    size_t n = 3 << 20;
    unsigned char *p = mote_malloc(n);
    CHECK(p != NULL);
    uintptr_t colour = (uintptr_t)p % HEAP_OS_PAGE;
    fill_pages(p, 0, n, 5);
    p[0] = 0xab;
    p[n - 1] = 0xcd;
    for (size_t m = 4 << 20; m <= (64u << 20); m *= 2) {
        p = mote_realloc(p, m);
        CHECK(p != NULL && (uintptr_t)p % HEAP_OS_PAGE == colour);
        CHECK(p[0] == 0xab && p[n - 1] == 0xcd && pages_hold(p, 4096, n - 4096, 5));
        CHECK(mote_usable_size(p) >= m);
        memset(p + n, 1, m - n);
    }
    p = mote_realloc(p, n);
    CHECK(p != NULL && p[0] == 0xab && p[n - 1] == 0xcd);
    mote_free(p);
}

TEST(free_of_a_huge_block_s_old_address_aborts)
{
    test_expect_invalid_free(free_the_old_address, NULL);
}

/* ---- where a page goes ---- */

static bool page_within(const heap_page *pg, const uint8_t *start, unsigned slices)
{
    return pg->start >= start && pg->start < start + ((size_t)slices << HEAP_SLICE_SHIFT);
}

/* A long run of free warm slices, as a freed large block leaves, and a
 * one-slice hole: a one-slice page takes the hole, so the next large page
 * finds the run whole and warm.  (First fit split the run, and the large
 * page took slices never touched: page faults, and more RSS.)  The arena
 * lock is held throughout, so the scavenger cannot release the slices. */
TEST(a_small_page_fills_a_hole_and_leaves_a_long_warm_run_whole)
{
    bool zero;
    heap_lock_acquire(&mote__heap_arena_lock);
    heap_page *run = mote__arena_page_alloc(8, &zero, false);
    heap_page *left = mote__arena_page_alloc(1, &zero, false);
    heap_page *hole = mote__arena_page_alloc(1, &zero, false);
    heap_page *right = mote__arena_page_alloc(1, &zero, false);
    CHECK(run && left && hole && right);
    uint8_t *run_start = run->start;
    mote__arena_page_free(run);
    mote__arena_page_free(hole);
    heap_page *small = mote__arena_page_alloc(1, &zero, false);
    CHECK(small != NULL);
    CHECK(!zero); /* a warm slice */
    CHECK(!page_within(small, run_start, 8));
    heap_page *large = mote__arena_page_alloc(8, &zero, false);
    CHECK(large != NULL);
    CHECK(!zero);
    CHECK(large->start == run_start);
    mote__arena_page_free(large);
    mote__arena_page_free(small);
    mote__arena_page_free(left);
    mote__arena_page_free(right);
    heap_lock_release(&mote__heap_arena_lock);
}

TEST_MAIN()
