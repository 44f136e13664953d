/*
 * test_sync.c - wait groups, mutexes and condition variables: errors,
 * mutual exclusion across workers, no starvation under barging, condition
 * signal/broadcast/timeout, and the plain-thread rules.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "mote.h"

#define MS (1000 * 1000LL)

/* ---- wait groups ---- */

typedef struct wg_ctx {
    mote_wg wg;
    long done;
} wg_ctx;

static void wg_worker(void *arg)
{
    wg_ctx *x = arg;
    mote_sleep((int64_t)(mote_id() % 5) * MS);
    __atomic_add_fetch(&x->done, 1, __ATOMIC_RELAXED);
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

static void wg_waiter(void *arg)
{
    wg_ctx *x = arg;
    mote_wg_wait(&x->wg);
    CHECK_EQ(__atomic_load_n(&x->done, __ATOMIC_RELAXED), 50);
}

static void test_wg(void)
{
    mote_wg wg = MOTE_WG_INIT;
    mote_wg_wait(&wg); /* zero: returns at once */
    CHECK_EQ(mote_wg_done(&wg), -EINVAL);
    CHECK_EQ(mote_wg_add(&wg, -1), -EINVAL);
    CHECK_EQ(mote_wg_add(&wg, 2), 0);
    CHECK_EQ(mote_wg_add(&wg, -3), -EINVAL); /* and unchanged: */
    CHECK_EQ(mote_wg_add(&wg, INT64_MAX), -EINVAL);
    CHECK_EQ(mote_wg_done(&wg), 0);
    CHECK_EQ(mote_wg_done(&wg), 0);
    CHECK_EQ(mote_wg_done(&wg), -EINVAL);
    CHECK_EQ(mote_wg_add(NULL, 1), -EINVAL);

    wg_ctx x = {MOTE_WG_INIT, 0};
    mote_wg w2 = MOTE_WG_INIT;
    CHECK_EQ(mote_wg_add(&x.wg, 50), 0);
    for (int i = 0; i < 50; i++)
        CHECK_EQ(mote_go(wg_worker, &x), 0);
    for (int i = 0; i < 3; i++) /* several waiters, all released */
        CHECK_EQ(mote_go(wg_waiter, &x), 0);
    mote_wg_wait(&x.wg);
    CHECK_EQ(x.done, 50);
    (void)w2;
    mote_sleep(5 * MS); /* let the waiters finish with x */
}

/* ---- mutexes ---- */

typedef struct mx_ctx {
    mote_mutex m;
    mote_wg wg;
    long counter; /* plain: the mutex protects it (TSan checks) */
    long iters;
    int inside;
} mx_ctx;

static void mx_worker(void *arg)
{
    mx_ctx *x = arg;
    for (long i = 0; i < x->iters; i++) {
        mote_mutex_lock(&x->m);
        CHECK_EQ(__atomic_add_fetch(&x->inside, 1, __ATOMIC_RELAXED), 1);
        x->counter++;
        if (i % 64 == 0)
            mote_yield(); /* park others on the mutex while held */
        __atomic_sub_fetch(&x->inside, 1, __ATOMIC_RELAXED);
        CHECK_EQ(mote_mutex_unlock(&x->m), 0);
    }
    mote_wg_done(&x->wg);
}

static void test_mutex(void)
{
    mote_mutex m = MOTE_MUTEX_INIT;
    CHECK_EQ(mote_mutex_unlock(&m), -EPERM);
    CHECK_EQ(mote_mutex_trylock(&m), 0);
    CHECK_EQ(mote_mutex_trylock(&m), -EBUSY);
    CHECK_EQ(mote_mutex_unlock(&m), 0);
    CHECK_EQ(mote_mutex_unlock(&m), -EPERM);
    mote_mutex_lock(&m);
    CHECK_EQ(mote_mutex_trylock(&m), -EBUSY);
    CHECK_EQ(mote_mutex_unlock(&m), 0);
    CHECK_EQ(mote_mutex_trylock(NULL), -EINVAL);
    CHECK_EQ(mote_mutex_unlock(NULL), -EINVAL);

    static mx_ctx x = {MOTE_MUTEX_INIT, MOTE_WG_INIT, 0, 0, 0};
    enum { T = 8 };
    x.iters = TEST_SCALE(20000, 10);
    mote_wg_add(&x.wg, T);
    for (int i = 0; i < T; i++)
        CHECK_EQ(mote_go(mx_worker, &x), 0);
    mote_wg_wait(&x.wg);
    CHECK_EQ(x.counter, T * x.iters);
    CHECK_EQ(mote_mutex_trylock(&x.m), 0); /* left unlocked */
    CHECK_EQ(mote_mutex_unlock(&x.m), 0);
}

/* Starvation: a hog re-locks right after unlocking and yields while it
 * holds the mutex, so a woken waiter always finds it taken again.  Without
 * a hand-off to long waiters the victim never gets in. */
typedef struct starve_ctx {
    mote_mutex m;
    int victim_done;
    int64_t victim_wait;
    mote_wg wg;
} starve_ctx;

static void hog(void *arg)
{
    starve_ctx *x = arg;
    int64_t give_up = mote_now() + 3000 * MS;
    mote_mutex_lock(&x->m);
    while (!__atomic_load_n(&x->victim_done, __ATOMIC_ACQUIRE) &&
           mote_now() < give_up) {
        mote_yield();
        mote_mutex_unlock(&x->m);
        mote_mutex_lock(&x->m);
    }
    mote_mutex_unlock(&x->m);
    mote_wg_done(&x->wg);
}

static void victim(void *arg)
{
    starve_ctx *x = arg;
    mote_sleep(2 * MS);
    int64_t t0 = mote_now();
    mote_mutex_lock(&x->m);
    x->victim_wait = mote_now() - t0;
    __atomic_store_n(&x->victim_done, 1, __ATOMIC_RELEASE);
    mote_mutex_unlock(&x->m);
    mote_wg_done(&x->wg);
}

static void test_no_starvation(void)
{
    starve_ctx x = {MOTE_MUTEX_INIT, 0, 0, MOTE_WG_INIT};
    mote_wg_add(&x.wg, 3);
    CHECK_EQ(mote_go(hog, &x), 0);
    CHECK_EQ(mote_go(hog, &x), 0);
    CHECK_EQ(mote_go(victim, &x), 0);
    mote_wg_wait(&x.wg);
    printf("starvation: victim waited %.3f ms\n", x.victim_wait / 1e6);
    CHECK(x.victim_done);
    CHECK(x.victim_wait < 1000 * MS);
}

/* ---- condition variables ---- */

typedef struct queue {
    mote_mutex m;
    mote_cond nonempty;
    long items[64];
    int n;
    long popped, sum;
    mote_wg wg;
} queue;

static void q_consumer(void *arg)
{
    queue *q = arg;
    mote_mutex_lock(&q->m);
    for (;;) {
        while (q->n == 0)
            mote_cond_wait(&q->nonempty, &q->m);
        long v = q->items[--q->n];
        if (v < 0)
            break;
        q->popped++;
        q->sum += v;
    }
    mote_mutex_unlock(&q->m);
    mote_wg_done(&q->wg);
}

static void test_cond(void)
{
    static queue q = {MOTE_MUTEX_INIT, MOTE_COND_INIT, {0}, 0, 0, 0, MOTE_WG_INIT};
    enum { C = 4 };
    long n = TEST_SCALE(20000, 10), expect = 0;
    mote_wg_add(&q.wg, C);
    for (int i = 0; i < C; i++)
        CHECK_EQ(mote_go(q_consumer, &q), 0);
    for (long i = 1; i <= n; i++) {
        mote_mutex_lock(&q.m);
        while (q.n == 64) { /* full: let consumers run */
            mote_mutex_unlock(&q.m);
            mote_yield();
            mote_mutex_lock(&q.m);
        }
        q.items[q.n++] = i;
        expect += i;
        mote_cond_signal(&q.nonempty);
        mote_mutex_unlock(&q.m);
    }
    for (int stopped = 0; stopped < C;) {
        mote_mutex_lock(&q.m);
        if (q.n == 0) { /* drained: one stop marker per consumer (the
                           items are a stack; a marker on top of values
                           would stop a consumer early) */
            q.items[q.n++] = -1;
            stopped++;
            mote_cond_broadcast(&q.nonempty);
        }
        mote_mutex_unlock(&q.m);
        mote_yield();
    }
    mote_wg_wait(&q.wg);
    CHECK_EQ(q.n, 0);
    CHECK_EQ(q.popped, n);
    CHECK_EQ(q.sum, expect);
}

static void cond_sleeper(void *arg)
{
    queue *q = arg;
    mote_mutex_lock(&q->m);
    q->n++;
    mote_cond_wait(&q->nonempty, &q->m);
    q->popped++;
    mote_mutex_unlock(&q->m);
    mote_wg_done(&q->wg);
}

static void test_cond_timeout_and_broadcast(void)
{
    mote_mutex m = MOTE_MUTEX_INIT;
    mote_cond c = MOTE_COND_INIT;
    CHECK_EQ(mote_cond_timedwait(&c, &m, 1 * MS), -EPERM); /* not locked */
    mote_mutex_lock(&m);
    int64_t t0 = mote_now();
    CHECK_EQ(mote_cond_timedwait(&c, &m, 20 * MS), -ETIMEDOUT);
    CHECK(mote_now() - t0 >= 20 * MS);
    CHECK_EQ(mote_mutex_trylock(&m), -EBUSY); /* reacquired */
    CHECK_EQ(mote_cond_timedwait(&c, &m, 0), -ETIMEDOUT);
    mote_mutex_unlock(&m);
    mote_cond_signal(&c); /* no waiters: nothing happens */
    mote_cond_broadcast(&c);

    static queue q = {MOTE_MUTEX_INIT, MOTE_COND_INIT, {0}, 0, 0, 0, MOTE_WG_INIT};
    mote_wg_add(&q.wg, 10);
    for (int i = 0; i < 10; i++)
        CHECK_EQ(mote_go(cond_sleeper, &q), 0);
    for (;;) { /* until all ten wait */
        mote_mutex_lock(&q.m);
        int n = q.n;
        mote_mutex_unlock(&q.m);
        if (n == 10)
            break;
        mote_sleep(1 * MS);
    }
    mote_mutex_lock(&q.m);
    mote_cond_signal(&q.nonempty);
    mote_mutex_unlock(&q.m);
    mote_sleep(10 * MS);
    mote_mutex_lock(&q.m);
    CHECK_EQ(q.popped, 1); /* signal wakes exactly one */
    mote_cond_broadcast(&q.nonempty);
    mote_mutex_unlock(&q.m);
    mote_wg_wait(&q.wg);
    CHECK_EQ(q.popped, 10);
}

/* Timed waiters racing signals: every signal must reach a waiter that is
 * still waiting (none is lost to one whose timer fired). */
typedef struct race_ctx {
    mote_mutex m;
    mote_cond c;
    long tokens, taken;
    int stop;
    mote_wg wg;
} race_ctx;

static void race_waiter(void *arg)
{
    race_ctx *x = arg;
    mote_mutex_lock(&x->m);
    while (!x->stop) {
        if (x->tokens > 0) {
            x->tokens--;
            x->taken++;
            continue;
        }
        mote_cond_timedwait(&x->c, &x->m, 50 * 1000); /* 50 us */
    }
    mote_mutex_unlock(&x->m);
    mote_wg_done(&x->wg);
}

static void test_cond_race(void)
{
    static race_ctx x = {MOTE_MUTEX_INIT, MOTE_COND_INIT, 0, 0, 0, MOTE_WG_INIT};
    long n = TEST_SCALE(5000, 5);
    mote_wg_add(&x.wg, 4);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(mote_go(race_waiter, &x), 0);
    for (long i = 0; i < n; i++) {
        mote_mutex_lock(&x.m);
        x.tokens++;
        mote_cond_signal(&x.c);
        mote_mutex_unlock(&x.m);
        if (i % 16 == 0)
            mote_yield();
    }
    for (;;) {
        mote_mutex_lock(&x.m);
        long t = x.taken;
        if (t == n)
            x.stop = 1;
        mote_mutex_unlock(&x.m);
        if (t == n)
            break;
        mote_sleep(1 * MS);
    }
    mote_mutex_lock(&x.m);
    mote_cond_broadcast(&x.c);
    mote_mutex_unlock(&x.m);
    mote_wg_wait(&x.wg);
    CHECK_EQ(x.taken, n);
}

/* ---- plain threads ---- */

static void *plain_thread(void *arg)
{
    mote_mutex *m = arg;
    mote_cond c = MOTE_COND_INIT;
    mote_wg wg = MOTE_WG_INIT;
    CHECK_EQ(mote_mutex_trylock(m), 0);
    CHECK_EQ(mote_cond_timedwait(&c, m, 1000), -EPERM);
    CHECK_EQ(mote_mutex_unlock(m), 0);
    mote_cond_signal(&c);
    mote_wg_wait(&wg); /* zero: fine anywhere */
    CHECK_EQ(mote_wg_add(&wg, 1), 0);
    CHECK_EQ(mote_wg_done(&wg), 0);
    return NULL;
}

static void test_plain_thread(void)
{
    mote_mutex m = MOTE_MUTEX_INIT;
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, plain_thread, &m), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
}

static void test_main(void *arg)
{
    (void)arg;
    test_wg();
    test_mutex();
    test_cond();
    test_cond_timeout_and_broadcast();
    test_cond_race();
    test_plain_thread();
}

static void starvation_main(void *arg)
{
    (void)arg;
    test_no_starvation();
}

int main(void)
{
    setenv("MOTE_WORKERS", "2", 0);
    CHECK_EQ(mote_run(test_main, NULL), 0);
    /* One worker makes the starvation scenario deterministic: the victim
     * runs only while a hog holds the mutex (hogs yield only while holding),
     * so it must queue, and without hand-off every wake-up finds the mutex
     * re-taken. */
    setenv("MOTE_WORKERS", "1", 1);
    CHECK_EQ(mote_run(starvation_main, NULL), 0);
    TEST_PASS("test_sync");
    return 0;
}
