/*
 * test_heap_scavenge.c - memory goes back to the OS by itself: after a big
 * free, with no further allocator call, RSS falls within the decay period
 * (plus slack), the heap's committed bytes fall, and the scavenger then sleeps
 * (no CPU burnt while idle); and its thread never keeps a process alive
 * once the program's own threads have all ended.
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
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

/* ---- the process ends with its last thread ---- */

static int threads_alive(void)
{
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void big_block_back(void)
{
    void *p = mote_malloc(1 << 20);
    CHECK(p != NULL);
    memset(p, 1, 1 << 20);
    mote_free(p);
}

/* arg: 1 allocates before it ends (its cache's exit is seen), 0 not, 2
 * not and outlives the scavenger's looks after main's exit (1 s). */
static void *ends_after_main(void *arg)
{
    usleep(arg == (void *)2 ? 1500 * 1000 : 100 * 1000);
    if (arg == (void *)1)
        big_block_back();
    return NULL;
}

/* In a fork child: starts the scavenger, then ends the main thread with
 * pthread_exit, leaving `other` (-1: none) to end later.  glibc's rule: the
 * process exits with 0 when its last thread ends. */
static void main_thread_exits(int other)
{
    big_block_back();
    if (!TEST_SANITIZED) /* (sanitized children scavenge inline, no thread) */
        WAIT_UNTIL(threads_alive() >= 2, 30);
    if (other >= 0) {
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, ends_after_main, (void *)(intptr_t)other), 0);
    }
    pthread_exit(NULL);
}

#define SKIP_UNDER_TSAN()                                                         \
    do {                                                                          \
        if (TEST_TSAN) /* its own background thread keeps such a process alive */ \
            TEST_SKIP("ThreadSanitizer's thread outlives the program's");         \
    } while (0)

/* The child's exit status, or -1 if it still runs after 60 s (killed). */
static int status_of_child(int other)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        main_thread_exits(other);
    int st = 0;
    for (int i = 0; i < 6000; i++) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        CHECK(r >= 0);
        if (r == pid)
            return st;
        usleep(10 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

TEST(the_process_ends_when_its_main_thread_exits_last)
{
    SKIP_UNDER_TSAN();
    int st = status_of_child(-1);
    CHECK(st != -1); /* before: the scavenger kept it, a zombie main, for good */
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(the_process_ends_when_a_thread_outliving_main_ends)
{
    SKIP_UNDER_TSAN();
    int st = status_of_child(1);
    CHECK(st != -1);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    st = status_of_child(0); /* one that never allocated: seen by the looks */
    CHECK(st != -1);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    st = status_of_child(2); /* ... after them: by the look each second */
    CHECK(st != -1);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST_MAIN()
