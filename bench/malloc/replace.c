/*
 * replace.c - workers replaced while their work goes on (after rpmalloc's
 * rptest, from its description): WORKERS workers each keep SLOTS blocks; a
 * step frees the block in a random slot, or one time in five hands it to
 * the next worker, which frees it, and puts a new block of MIN + (MAX -
 * MIN) * u^3 bytes there (most small, a tail up to MAX).  A worker's thread
 * ends after LIFE steps; before it does, it starts its successor, which
 * takes over its slots and its queue and frees what it inherited, as a
 * thread pool replaces a thread without stopping the work.  An allocator
 * whose caches go to a new thread only once their thread has ended finds
 * the successor allocating on fresh memory while the pages it frees into
 * serve nobody.  Allocator-agnostic (LD_PRELOAD).
 *
 *   replace [WORKERS=2] [SLOTS=4096] [MAX=8000] [STEPS=3000000] [LIFE=200000]
 * (STEPS per worker, across its generations)
 * prints: bench=replace threads=WORKERS mops=X peak_rss=BYTES
 *         live_peak=BYTES threads_started=N secs=S
 * (live_peak: the most bytes in slots and queues at once, to within a
 * batch of steps per worker.)  Every block is stamped at both ends and
 * checked before it is freed; a bad stamp ends the run with status 1.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mbutil.h"

enum {
    MIN_SIZE = 16,
    CROSS_PCT = 20,   /* freed blocks handed to the next worker */
    BATCH = 32,       /* handed over at once */
    QCAP = 1 << 16,   /* a queue's entries */
    QBYTES = 8 << 20, /* a queue holding this much takes no more */
    LIVE_EVERY = 64,  /* steps between additions to the live count */
};

typedef struct slot {
    uint64_t *p;
    size_t size;
} slot;

typedef struct worker {
    int idx;
    slot *slots;
    uint64_t rng;
    long done;            /* steps so far, over the generations */
    long long live_delta; /* bytes not yet added to the live count */
    slot out[BATCH];      /* blocks to hand over */
    int nout;
    pthread_mutex_t qlock; /* the queue of blocks others handed to us */
    slot *q;
    size_t qhead, qtail, qbytes;
    atomic_int finished; /* no more steps: blocks for it are freed by the sender */
} worker;

static int nworkers = 2, nslots = 4096;
static size_t max_size = 8000;
static long steps = 3000000, life = 200000;
static worker *W;
static _Atomic(long long) live_now, live_top;
static atomic_long generations, bad;
static pthread_mutex_t end_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t end_cond = PTHREAD_COND_INITIALIZER;
static int workers_left;

static uint64_t stamp_of(const uint64_t *p, size_t n) { return (uintptr_t)p * 31 ^ n; }

static void stamp(uint64_t *p, size_t n)
{
    uint64_t s = stamp_of(p, n);
    p[0] = s;
    memcpy((char *)p + n - 8, &s, 8);
}

static void release(worker *w, slot s)
{
    uint64_t s0 = stamp_of(s.p, s.size), s1;
    memcpy(&s1, (char *)s.p + s.size - 8, 8);
    if (s.p[0] != s0 || s1 != s0) {
        fprintf(stderr, "replace: block %p of %zu bytes lost its stamp\n", (void *)s.p,
                s.size);
        atomic_fetch_add(&bad, 1);
    }
    w->live_delta -= (long long)s.size;
    free(s.p);
}

/* Frees what others handed to w. */
static void take_handed(worker *w)
{
    for (;;) {
        slot buf[256];
        size_t n = 0;
        pthread_mutex_lock(&w->qlock);
        while (w->qhead != w->qtail && n < 256) {
            buf[n] = w->q[w->qhead++ % QCAP];
            w->qbytes -= buf[n++].size;
        }
        pthread_mutex_unlock(&w->qlock);
        for (size_t i = 0; i < n; i++)
            release(w, buf[i]);
        if (n < 256)
            return;
    }
}

/* Hands w's batch to the next worker (or frees it, if that one is done or
 * its queue full). */
static void hand_over(worker *w)
{
    worker *to = &W[(w->idx + 1) % nworkers];
    bool sent = false;
    if (!atomic_load_explicit(&to->finished, memory_order_acquire)) {
        pthread_mutex_lock(&to->qlock);
        if (to->qtail - to->qhead + (size_t)w->nout <= QCAP && to->qbytes < QBYTES) {
            for (int i = 0; i < w->nout; i++) {
                to->q[to->qtail++ % QCAP] = w->out[i];
                to->qbytes += w->out[i].size;
            }
            sent = true;
        }
        pthread_mutex_unlock(&to->qlock);
    }
    if (!sent)
        for (int i = 0; i < w->nout; i++)
            release(w, w->out[i]);
    w->nout = 0;
}

static void *run(void *arg);

static void start(worker *w)
{
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, run, w) != 0) {
        fprintf(stderr, "replace: pthread_create failed\n");
        exit(2);
    }
    pthread_attr_destroy(&a);
    atomic_fetch_add(&generations, 1);
}

static void *run(void *arg)
{
    worker *w = arg;
    long end = w->done + life < steps ? w->done + life : steps;
    for (; w->done < end; w->done++) {
        if (w->done % LIVE_EVERY == 0) {
            take_handed(w);
            mb_live_add(&live_now, &live_top, w->live_delta);
            w->live_delta = 0;
        }
        uint64_t r = mb_rnd(&w->rng);
        slot *s = &w->slots[r % (uint64_t)nslots];
        if (s->p) {
            if ((r >> 32) % 100 < CROSS_PCT) {
                w->out[w->nout++] = *s;
                if (w->nout == BATCH)
                    hand_over(w);
            } else {
                release(w, *s);
            }
        }
        double u = (double)(mb_rnd(&w->rng) >> 11) / 9007199254740992.0;
        size_t n = MIN_SIZE + (size_t)((double)(max_size - MIN_SIZE) * u * u * u);
        s->p = malloc(n);
        if (!s->p) {
            fprintf(stderr, "replace: malloc(%zu) failed\n", n);
            exit(2);
        }
        s->size = n;
        stamp(s->p, n);
        w->live_delta += (long long)n;
    }
    if (w->nout)
        hand_over(w);
    mb_live_add(&live_now, &live_top, w->live_delta);
    w->live_delta = 0;
    if (w->done < steps) {
        start(w); /* the successor begins before this thread ends */
        return NULL;
    }
    atomic_store_explicit(&w->finished, 1, memory_order_release);
    take_handed(w);
    pthread_mutex_lock(&end_lock);
    if (--workers_left == 0)
        pthread_cond_signal(&end_cond);
    pthread_mutex_unlock(&end_lock);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        nworkers = atoi(argv[1]);
    if (argc > 2)
        nslots = atoi(argv[2]);
    if (argc > 3)
        max_size = strtoul(argv[3], NULL, 10);
    if (argc > 4)
        steps = atol(argv[4]);
    if (argc > 5)
        life = atol(argv[5]);
    if (nworkers < 1 || nworkers > 256 || nslots < 1 || max_size < MIN_SIZE ||
        steps < 1 || life < 1) {
        fprintf(stderr,
                "usage: replace [WORKERS<=256] [SLOTS] [MAX>=16] [STEPS] [LIFE]\n");
        return 2;
    }
    W = calloc((size_t)nworkers, sizeof *W);
    if (!W)
        return 2;
    workers_left = nworkers;
    for (int i = 0; i < nworkers; i++) {
        W[i].idx = i;
        W[i].rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);
        W[i].slots = calloc((size_t)nslots, sizeof(slot));
        W[i].q = malloc(sizeof(slot) * QCAP);
        if (!W[i].slots || !W[i].q)
            return 2;
        pthread_mutex_init(&W[i].qlock, NULL);
    }
    double t0 = mb_now();
    for (int i = 0; i < nworkers; i++)
        start(&W[i]);
    pthread_mutex_lock(&end_lock);
    while (workers_left)
        pthread_cond_wait(&end_cond, &end_lock);
    pthread_mutex_unlock(&end_lock);
    double secs = mb_now() - t0;
    long peak = mb_maxrss();
    for (int i = 0; i < nworkers; i++) { /* every block checked, then freed */
        take_handed(&W[i]);
        for (int k = 0; k < nslots; k++)
            if (W[i].slots[k].p)
                release(&W[i], W[i].slots[k]);
    }
    printf("bench=replace threads=%d mops=%.3f peak_rss=%ld live_peak=%lld "
           "threads_started=%ld "
           "secs=%.3f\n",
           nworkers, (double)steps * nworkers / secs / 1e6, peak,
           (long long)atomic_load(&live_top), (long)atomic_load(&generations), secs);
    return atomic_load(&bad) ? 1 : 0;
}
