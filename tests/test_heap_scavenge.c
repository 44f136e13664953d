/*
 * test_heap_scavenge.c - memory goes back to the OS by itself: after a big
 * free, with no further allocator call, RSS falls within the decay period
 * (plus slack), the heap's committed bytes fall, and the scavenger then sleeps
 * (no CPU burnt while idle).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "heap/heap.h"
#include "mote.h"

static long rss_bytes(void)
{
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    CHECK(f != NULL);
    CHECK(fscanf(f, "%ld %ld", &pages, &res) == 2);
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

static double cpu_secs(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

enum { N = 40000 };
static void *blocks[N];

static void *alloc_and_free(void *arg)
{
    (void)arg;
    for (int i = 0; i < N; i++) {
        size_t n = 64 + (size_t)(i * 7919) % 6000;
        blocks[i] = mote_malloc(n);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 1, n);
    }
    for (int i = 0; i < N; i++)
        mote_free(blocks[i]);
    return NULL;
}

TEST(freed_memory_returns_to_the_os_without_calls)
{
    long before = rss_bytes();
    /* a thread that exits: its cache goes back too */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, alloc_and_free, NULL) == 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    /* and the same on this thread, which stays alive */
    alloc_and_free(NULL);
    long peak = rss_bytes();
    /* default decay is 500 ms; wait (generously) without any allocator call */
    long now = peak;
    int64_t t0 = mote_now();
    while (mote_now() - t0 < 60LL * 1000000000) {
        usleep(100 * 1000);
        now = rss_bytes();
        if (mote__heap_committed_bytes() <= (16 << 20) &&
            (TEST_SANITIZED || now <= before + (16 << 20)))
            break;
    }
    fprintf(stderr, "rss before %ld KiB, peak %ld KiB, after idle %ld KiB (%.1f s)\n",
            before >> 10, peak >> 10, now >> 10, (mote_now() - t0) / 1e9);
    /* what the heap holds, by its own count (sanitizers: RSS is theirs) */
    CHECK(mote__heap_committed_bytes() <= (16 << 20));
    if (!TEST_SANITIZED) { /* sanitizer shadow memory does not shrink */
        CHECK(peak > before + (100 << 20));
        CHECK(now <= before + (16 << 20));
    }
}

/* Once it has given everything back, the scavenger sleeps. */
TEST(idle_scavenger_uses_no_cpu)
{
    alloc_and_free(NULL);
    WAIT_UNTIL(mote__heap_committed_bytes() <= (16 << 20), 60);
    double c0 = cpu_secs();
    usleep(1000 * 1000);
    double c1 = cpu_secs();
    printf("idle second: %.1f ms CPU\n", (c1 - c0) * 1e3);
    CHECK(c1 - c0 < 0.05);
}

TEST_MAIN()
