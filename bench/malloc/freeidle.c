/*
 * freeidle.c - free-then-idle (seed 003): THREADS threads allocate TOTAL
 * bytes together in mixed sizes (70% 16 B-1 KiB, 25% 1-64 KiB, 5% 64 KiB-
 * 1 MiB), touching every byte, then free everything and stay alive but
 * idle; the main thread samples RSS from /proc/self/statm every 100 ms for
 * IDLE_MS without calling the allocator.  An allocator that gives memory
 * back by itself shows RSS falling; one that waits for its next call
 * does not.
 *
 *   freeidle [TOTAL_MB=2048] [IDLE_MS=3000] [THREADS=4]
 * prints: bench=free-idle peak=BYTES rss_before=BYTES (after the frees)
 *         bench=free-idle t_ms=T rss=BYTES            (one per sample)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static size_t per_thread;
static pthread_barrier_t done_alloc, done_free, done_idle;

static long rss(void)
{
    long size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2)
        res = -1;
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

static void *worker(void *arg)
{
    uint64_t s = 0x9E3779B97F4A7C15ULL * ((uintptr_t)arg + 1);
    size_t cap = 1 << 16, n = 0, got = 0;
    void **v = malloc(cap * sizeof *v);
    while (got < per_thread) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        unsigned r = (unsigned)(s % 100);
        size_t sz = r < 70   ? 16 + (s >> 8) % 1009
                    : r < 95 ? 1024 + (s >> 8) % (63 * 1024)
                             : 65536 + (s >> 8) % (960 * 1024);
        if (n == cap) {
            cap *= 2;
            v = realloc(v, cap * sizeof *v);
        }
        v[n] = malloc(sz);
        memset(v[n], (int)n, sz);
        n++;
        got += sz;
    }
    pthread_barrier_wait(&done_alloc);
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
    pthread_barrier_wait(&done_free);
    pthread_barrier_wait(&done_idle); /* idle, alive, no allocator calls */
    return NULL;
}

int main(int argc, char **argv)
{
    long total_mb = argc > 1 ? atol(argv[1]) : 2048;
    long idle_ms = argc > 2 ? atol(argv[2]) : 3000;
    int threads = argc > 3 ? atoi(argv[3]) : 4;
    if (total_mb < 1 || idle_ms < 0 || threads < 1) {
        fprintf(stderr, "usage: freeidle [TOTAL_MB] [IDLE_MS] [THREADS]\n");
        return 2;
    }
    per_thread = (size_t)total_mb * 1024 * 1024 / (size_t)threads;
    pthread_barrier_init(&done_alloc, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&done_free, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&done_idle, NULL, (unsigned)threads + 1);
    pthread_t t[64];
    for (int i = 0; i < threads && i < 64; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
    pthread_barrier_wait(&done_alloc);
    long peak = rss();
    pthread_barrier_wait(&done_free);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char out[64][64];
    int ns = 0;
    long before = rss();
    for (long ms = 0; ms <= idle_ms && ns < 64; ms += 100) {
        struct timespec due = {t0.tv_sec + (t0.tv_nsec / 1000000 + ms) / 1000,
                               ((t0.tv_nsec / 1000000 + ms) % 1000) * 1000000};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        long r = rss();
        /* no stdio until the end: printing could allocate */
        snprintf(out[ns++], sizeof out[0], "%ld %ld",
                 (long)((now.tv_sec - t0.tv_sec) * 1000 +
                        (now.tv_nsec - t0.tv_nsec) / 1000000),
                 r);
    }
    printf("bench=free-idle peak=%ld rss_before=%ld\n", peak, before);
    for (int i = 0; i < ns; i++) {
        long tm, r;
        sscanf(out[i], "%ld %ld", &tm, &r);
        printf("bench=free-idle t_ms=%ld rss=%ld\n", tm, r);
    }
    pthread_barrier_wait(&done_idle);
    for (int i = 0; i < threads && i < 64; i++)
        pthread_join(t[i], NULL);
    return 0;
}
