/*
 * prodcons.c - long producer/consumer churn: PAIRS producer threads each
 * send MSGS messages through a single-producer single-consumer ring to
 * their consumer.  A message is a block whose size range changes every
 * PHASE messages (16-128 B, 128 B-1 KiB, 1-8 KiB, 16 B-4 KiB, 8-32 KiB,
 * then again), so the heap's mix of size classes keeps shifting.  The
 * consumer keeps the last WINDOW messages it received and frees the oldest
 * as each new one arrives: every block is freed by a thread other than its
 * allocator, after living a while.  One message in 8 is also kept back by
 * the producer for a while and freed by it.  Allocator-agnostic.
 *
 *   prodcons [PAIRS=2] [MSGS=4000000] [WINDOW=2000] [PHASE=250000] [FILL=0]
 * prints: bench=prodcons threads=2*PAIRS mops=X peak_rss=BYTES
 *         rss_avg=BYTES live_max=BYTES live_peak=BYTES secs=S fill=0|1
 * (rss_avg: mean of RSS samples every 20 ms; live_max: the largest window
 * contents; live_peak: the most bytes allocated and not yet freed at once,
 * window, ring and the producers' own together, over all the pairs: each
 * thread adds what it allocated or freed to one counter every PUBLISH
 * messages, and each producer's addition checks the peak, so the figure is
 * exact to within a batch per thread.  (Until 2026-12 each producer kept its
 * own peak and the pairs' peaks were summed: an upper bound that read
 * nearly twice the true peak when one pair's phase of big blocks fell
 * between the other's.)  The ring holds up to RING messages
 * beyond the window while a consumer lags, so the live set, and every
 * allocator's peak RSS with it, varies from run to run with the threads'
 * relative speed: live_peak says by how much in each run.  Blocks are
 * written at both ends only, so a block's untouched middle pages count in
 * RSS only if an earlier block touched them: an allocator that reuses warm
 * pages for big blocks pays for pages the program never wrote, one that
 * hands out fresh or released pages does not.  FILL=1 writes every message
 * whole, as a real producer would, so peak RSS over live_peak is the
 * allocator's own overhead.)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mbutil.h"

enum { RING = 4096, PUBLISH = 32, OWN = 256 };
typedef struct pair {
    _Atomic(size_t) head;
    char pad1[56];
    _Atomic(size_t) tail;
    char pad2[56];
    void *slot[RING];
    uint64_t seed;
    size_t live_max;
} pair;

static long msgs = 4000000, window = 2000, phase = 250000;
static int fill;
static _Atomic int finished; /* consumers done */
/* Bytes allocated and not yet freed, all pairs; its highest value when a
 * producer added to it. */
static _Atomic(long long) live_now;
static _Atomic(long long) live_top;

static void live_add(long long d) { mb_live_add(&live_now, &live_top, d); }

static const size_t ranges[][2] = {
    {16, 128}, {128, 1024}, {1024, 8192}, {16, 4096}, {8192, 32768},
};
#define NRANGES (sizeof ranges / sizeof ranges[0])

static void *producer(void *arg)
{
    pair *p = arg;
    uint64_t s = p->seed;
    void *own[OWN] = {0};
    size_t own_n[OWN] = {0};
    size_t h = 0, allocated = 0, own_freed = 0, counted = 0; /* counted: in live_now */
    for (long i = 0; i < msgs; i++) {
        const size_t *rg = ranges[(size_t)(i / phase) % NRANGES];
        size_t n = rg[0] + (size_t)(mb_rnd(&s) % (rg[1] - rg[0] + 1));
        char *b = malloc(n + sizeof(size_t));
        memcpy(b, &n, sizeof n);
        if (fill)
            memset(b + sizeof n, 1, n);
        b[sizeof n] = 1;
        b[sizeof n + n - 1] = 1;
        allocated += n;
        if ((i & 7) == 0) {
            size_t k = (size_t)(s >> 40) % OWN;
            free(own[k]);
            own_freed += own_n[k];
            own[k] = b;
            own_n[k] = n;
            continue;
        }
        while (h - atomic_load_explicit(&p->tail, memory_order_acquire) >= RING - PUBLISH)
            sched_yield();
        p->slot[h % RING] = b;
        if (++h % PUBLISH == 0) {
            /* Counted before the consumer can free any of it. */
            live_add((long long)(allocated - own_freed) - (long long)counted);
            counted = allocated - own_freed;
            atomic_store_explicit(&p->head, h, memory_order_release);
        }
    }
    for (int k = 0; k < OWN; k++)
        free(own[k]);
    while (h - atomic_load_explicit(&p->tail, memory_order_acquire) >= RING - PUBLISH)
        sched_yield();
    p->slot[h % RING] = NULL;
    atomic_store_explicit(&p->head, h + 1, memory_order_release);
    return NULL;
}

static void *consumer(void *arg)
{
    pair *p = arg;
    char **win = calloc((size_t)window, sizeof *win);
    size_t t = 0, w = 0, live = 0, freed = 0, counted = 0; /* counted: in live_now */
    for (;;) {
        size_t h;
        while ((h = atomic_load_explicit(&p->head, memory_order_acquire)) == t)
            sched_yield();
        for (; t < h; t++) {
            char *b = p->slot[t % RING];
            if (!b)
                goto out;
            size_t n;
            memcpy(&n, b, sizeof n);
            live += n;
            char *old = win[w];
            if (old) {
                memcpy(&n, old, sizeof n);
                live -= n;
                freed += n;
                free(old);
            }
            win[w] = b;
            w = (w + 1) % (size_t)window;
            if (live > p->live_max)
                p->live_max = live;
            /* A batch can be the whole ring: counted as it goes, not at
             * its end, or the count would run a ring's frees behind.  A
             * batch ends on a multiple of PUBLISH (the producer publishes
             * no other head) or at the end of the run, so nothing is left. */
            if ((t + 1) % PUBLISH == 0) {
                live_add((long long)counted - (long long)freed);
                counted = freed;
            }
        }
        atomic_store_explicit(&p->tail, t, memory_order_release);
    }
out:
    atomic_store_explicit(&p->tail, t + 1, memory_order_release);
    for (long i = 0; i < window; i++)
        free(win[i]);
    free(win);
    atomic_fetch_add_explicit(&finished, 1, memory_order_release);
    return NULL;
}

int main(int argc, char **argv)
{
    int pairs = argc > 1 ? atoi(argv[1]) : 2;
    if (argc > 2)
        msgs = atol(argv[2]);
    if (argc > 3)
        window = atol(argv[3]);
    if (argc > 4)
        phase = atol(argv[4]);
    if (argc > 5)
        fill = atoi(argv[5]);
    if (pairs < 1 || msgs < 1 || window < 1 || phase < 1 || fill < 0 || fill > 1) {
        fprintf(stderr, "usage: prodcons [PAIRS] [MSGS] [WINDOW] [PHASE] [FILL=0|1]\n");
        return 2;
    }
    pair *ps = calloc((size_t)pairs, sizeof *ps);
    pthread_t *t = malloc(sizeof *t * 2 * (size_t)pairs);
    double t0 = mb_now();
    for (int i = 0; i < pairs; i++) {
        ps[i].seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);
        pthread_create(&t[2 * i], NULL, consumer, &ps[i]);
        pthread_create(&t[2 * i + 1], NULL, producer, &ps[i]);
    }
    /* Sample RSS until the producers are done (no allocator call here). */
    double sum = 0;
    long ns = 0;
    while (atomic_load_explicit(&finished, memory_order_acquire) < pairs) {
        struct timespec d = {0, 20000000};
        nanosleep(&d, NULL);
        sum += (double)mb_rss();
        ns++;
    }
    for (int i = 0; i < 2 * pairs; i++)
        pthread_join(t[i], NULL);
    double secs = mb_now() - t0;
    size_t live = 0, peak = (size_t)atomic_load(&live_top);
    for (int i = 0; i < pairs; i++)
        live += ps[i].live_max;
    printf("bench=prodcons threads=%d mops=%.3f peak_rss=%ld rss_avg=%.0f live_max=%zu "
           "live_peak=%zu secs=%.3f fill=%d\n",
           2 * pairs, (double)msgs * pairs / secs / 1e6, mb_maxrss(),
           ns ? sum / (double)ns : 0.0, live, peak, secs, fill);
    free(t);
    free(ps);
    return 0;
}
