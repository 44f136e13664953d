/*
 * test_select.c - mote_select: argument checking, NULL channels, poll and
 * timeouts, blocking until a peer arrives, closed channels, many cases, a
 * channel in two cases, and the uniform choice among ready cases (a
 * chi-square test at a one-in-a-billion false-failure rate).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "mote.h"

#define MS (1000 * 1000LL)

static void test_args(void)
{
    mote_chan *c = mote_chan_make(sizeof(int), 1);
    CHECK_EQ(mote_select(NULL, 1, 0), -EINVAL);
    mote_case bad_op[] = {{c, 3, NULL, 0}};
    CHECK_EQ(mote_select(bad_op, 1, 0), -EINVAL);
    mote_case no_value[] = {{c, MOTE_SEND, NULL, 0}};
    CHECK_EQ(mote_select(no_value, 1, 0), -EINVAL);
    mote_case big[] = {{c, MOTE_RECV, NULL, 0}};
    CHECK_EQ(mote_select(big, 70000, 0), -EINVAL);
    CHECK_EQ(mote_select(NULL, 0, 0), -EAGAIN);
    mote_chan_free(c);
}

static void test_null_and_timeouts(void)
{
    mote_chan *c = mote_chan_make(sizeof(int), 1);
    int v = 0;
    mote_case cs[] = {{NULL, MOTE_RECV, &v, 0}, {c, MOTE_RECV, &v, 0},
                      {NULL, MOTE_SEND, &v, 0}};
    CHECK_EQ(mote_select(cs, 3, 0), -EAGAIN);
    int64_t t0 = mote_now();
    CHECK_EQ(mote_select(cs, 3, 20 * MS), -ETIMEDOUT);
    int64_t el = mote_now() - t0;
    CHECK(el >= 20 * MS);
    CHECK(el < 2000 * MS);
    /* only NULL channels, with a timeout: just a sleep */
    t0 = mote_now();
    CHECK_EQ(mote_select(cs, 1, 10 * MS), -ETIMEDOUT);
    CHECK(mote_now() - t0 >= 10 * MS);
    CHECK_EQ(mote_select(NULL, 0, 5 * MS), -ETIMEDOUT);
    /* a ready case among NULL ones */
    CHECK_EQ(mote_chan_send(c, &(int){7}), 0);
    cs[1].result = 99;
    CHECK_EQ(mote_select(cs, 3, -1), 1);
    CHECK_EQ(cs[1].result, 0);
    CHECK_EQ(v, 7);
    /* send case on a buffered channel with room */
    mote_case snd[] = {{c, MOTE_SEND, &(int){8}, 0}, {NULL, MOTE_RECV, NULL, 0}};
    CHECK_EQ(mote_select(snd, 2, 0), 0);
    CHECK_EQ(mote_select(snd, 2, 0), -EAGAIN); /* now full */
    CHECK_EQ(mote_chan_recv(c, &v), 0);
    CHECK_EQ(v, 8);
    mote_chan_free(c);
}

typedef struct later {
    mote_chan *c;
    int64_t delay;
    int value;
    int op;
} later;

static void later_task(void *arg)
{
    later *l = arg;
    mote_sleep(l->delay);
    if (l->op == MOTE_SEND)
        CHECK_EQ(mote_chan_send(l->c, &l->value), 0);
    else if (l->op == MOTE_RECV) {
        int v;
        CHECK_EQ(mote_chan_recv(l->c, &v), 0);
        CHECK_EQ(v, l->value);
    } else
        CHECK_EQ(mote_chan_close(l->c), 0);
}

/* The select blocks, then a peer completes one case. */
static void test_blocking(void)
{
    mote_chan *a = mote_chan_make(sizeof(int), 0);
    mote_chan *b = mote_chan_make(sizeof(int), 0);
    mote_chan *d = mote_chan_make(sizeof(int), 0);
    int va = -1, vb = -1;
    int out = 55;
    for (int round = 0; round < 3; round++) {
        later l = {round == 1 ? d : b, 10 * MS, 100 + round,
                   round == 1 ? MOTE_RECV : MOTE_SEND};
        if (round == 1)
            l.value = out;
        CHECK_EQ(mote_go(later_task, &l), 0);
        mote_case cs[] = {{a, MOTE_RECV, &va, 0},
                          {b, MOTE_RECV, &vb, 0},
                          {d, MOTE_SEND, &out, 0}};
        int r = mote_select(cs, 3, round == 2 ? 5000 * MS : -1);
        if (round == 1) {
            CHECK_EQ(r, 2);
        } else {
            CHECK_EQ(r, 1);
            CHECK_EQ(vb, 100 + round);
        }
        CHECK_EQ(cs[r].result, 0);
        CHECK_EQ(va, -1);
        /* no record of ours may remain: a later send on a must block */
        CHECK_EQ(mote_chan_trysend(a, &(int){1}), -EAGAIN);
        CHECK_EQ(mote_chan_tryrecv(d, NULL), -EAGAIN);
        mote_sleep(1 * MS); /* let l's task finish before l goes */
    }
    /* close wakes a blocked select with the receive case's ECLOSED */
    later l = {a, 10 * MS, 0, 0};
    CHECK_EQ(mote_go(later_task, &l), 0);
    va = 5;
    mote_case cs[] = {{b, MOTE_RECV, &vb, 0}, {a, MOTE_RECV, &va, 0}};
    CHECK_EQ(mote_select(cs, 2, -1), 1);
    CHECK_EQ(cs[1].result, MOTE_ECLOSED);
    CHECK_EQ(va, 0);
    /* a closed channel's send case fires at once with ECLOSED */
    mote_case sc[] = {{b, MOTE_RECV, &vb, 0}, {a, MOTE_SEND, &out, 0}};
    CHECK_EQ(mote_select(sc, 2, -1), 1);
    CHECK_EQ(sc[1].result, MOTE_ECLOSED);
    mote_sleep(1 * MS);
    mote_chan_free(a);
    mote_chan_free(b);
    mote_chan_free(d);
}

/* Two selects on each other's channels: one sends on x and receives on y,
 * the other the reverse; they must pair up. */
typedef struct pair_ctx {
    mote_chan *x, *y;
    mote_wg wg;
    long n;
    long got;
} pair_ctx;

static void pair_a(void *arg)
{
    pair_ctx *p = arg;
    for (long i = 0; i < p->n; i++) {
        long out = i, in = -1;
        mote_case cs[] = {{p->x, MOTE_SEND, &out, 0}, {p->y, MOTE_RECV, &in, 0}};
        int r = mote_select(cs, 2, -1);
        CHECK(r == 0 || r == 1);
        if (r == 1)
            __atomic_add_fetch(&p->got, 1, __ATOMIC_RELAXED);
    }
    mote_wg_done(&p->wg);
}

static void pair_b(void *arg)
{
    pair_ctx *p = arg;
    for (long i = 0; i < p->n; i++) {
        long out = i, in = -1;
        mote_case cs[] = {{p->y, MOTE_SEND, &out, 0}, {p->x, MOTE_RECV, &in, 0}};
        int r = mote_select(cs, 2, -1);
        CHECK(r == 0 || r == 1);
        if (r == 1)
            __atomic_add_fetch(&p->got, 1, __ATOMIC_RELAXED);
    }
    mote_wg_done(&p->wg);
}

static void test_select_pairs(void)
{
    pair_ctx p = {mote_chan_make(sizeof(long), 0), mote_chan_make(sizeof(long), 0),
                  MOTE_WG_INIT, TEST_SCALE(20000, 10), 0};
    mote_wg_add(&p.wg, 2);
    CHECK_EQ(mote_go(pair_a, &p), 0);
    CHECK_EQ(mote_go(pair_b, &p), 0);
    mote_wg_wait(&p.wg);
    CHECK_EQ(p.got, p.n); /* each round: exactly one side received */
    mote_chan_free(p.x);
    mote_chan_free(p.y);
}

/* A channel in both a send and a receive case of the same select. */
static void test_same_channel(void)
{
    mote_chan *c = mote_chan_make(sizeof(int), 1);
    int in = 0, out = 3;
    mote_case cs[] = {{c, MOTE_RECV, &in, 0}, {c, MOTE_SEND, &out, 0},
                      {c, MOTE_RECV, &in, 0}};
    CHECK_EQ(mote_select(cs, 3, -1), 1); /* empty: only the send is ready */
    int r = mote_select(cs, 3, -1);      /* full: a receive */
    CHECK(r == 0 || r == 2);
    CHECK_EQ(in, 3);
    mote_chan_free(c);

    /* unbuffered, blocking: a peer receives */
    mote_chan *u = mote_chan_make(sizeof(int), 0);
    later l = {u, 5 * MS, 3, MOTE_RECV};
    CHECK_EQ(mote_go(later_task, &l), 0);
    mote_case us[] = {{u, MOTE_RECV, &in, 0}, {u, MOTE_SEND, &out, 0}};
    CHECK_EQ(mote_select(us, 2, -1), 1);
    mote_sleep(1 * MS);
    mote_chan_free(u);
}

/* Many cases: the heap path and the heapsort lock order. */
static void test_many_cases(void)
{
    enum { N = 300 };
    mote_chan **ch = malloc(N * sizeof *ch);
    mote_case *cs = malloc(N * sizeof *cs);
    int vals[N];
    for (int i = 0; i < N; i++)
        ch[i] = mote_chan_make(sizeof(int), 1);
    for (int i = 0; i < N; i++) /* a permutation: i*7 mod 300 */
        cs[i] = (mote_case){ch[(i * 7) % N], MOTE_RECV, &vals[i], 0};
    CHECK_EQ(mote_select(cs, N, 0), -EAGAIN);
    CHECK_EQ(mote_select(cs, N, 1 * MS), -ETIMEDOUT);
    CHECK_EQ(mote_chan_send(ch[123], &(int){123}), 0);
    int r = mote_select(cs, N, -1);
    CHECK(r >= 0);
    CHECK(cs[r].chan == ch[123]);
    CHECK_EQ(vals[r], 123);
    /* blocking with many cases */
    later l = {ch[200], 5 * MS, 200, MOTE_SEND};
    CHECK_EQ(mote_go(later_task, &l), 0);
    r = mote_select(cs, N, -1);
    CHECK(r >= 0);
    CHECK(cs[r].chan == ch[200]);
    CHECK_EQ(vals[r], 200);
    mote_sleep(1 * MS);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(mote_chan_tryrecv(ch[i], NULL), -EAGAIN); /* nothing left */
        mote_chan_free(ch[i]);
    }
    free(ch);
    free(cs);
}

/* Uniform choice: K always-ready cases, counted over many selects.  Under
 * uniformity the statistic is chi-square with K-1 degrees of freedom; the
 * thresholds are its 1 - 1e-9 quantiles, so a correct select fails once in
 * a billion runs, while "first ready wins" gives a statistic of ~3*trials. */
static double chi_square(const long *count, int k, long trials)
{
    double e = (double)trials / k, x = 0;
    for (int i = 0; i < k; i++)
        x += (count[i] - e) * (count[i] - e) / e;
    return x;
}

static void test_uniform(void)
{
    long trials = TEST_SCALE(40000, 4);
    /* 4 receive cases on buffered channels kept non-empty */
    {
        enum { K = 4 };
        mote_chan *ch[K];
        mote_case cs[K];
        long count[K] = {0};
        int v;
        for (int i = 0; i < K; i++) {
            ch[i] = mote_chan_make(sizeof(int), 1);
            CHECK_EQ(mote_chan_send(ch[i], &i), 0);
            cs[i] = (mote_case){ch[i], MOTE_RECV, &v, 0};
        }
        for (long t = 0; t < trials; t++) {
            int r = mote_select(cs, K, 0);
            CHECK(r >= 0 && r < K);
            CHECK_EQ(v, r);
            count[r]++;
            CHECK_EQ(mote_chan_send(ch[r], &r), 0);
        }
        double x = chi_square(count, K, trials);
        printf("uniform recv: chi2 = %.2f (df 3, limit 44.84)\n", x);
        CHECK(x < 44.84);
        for (int i = 0; i < K; i++)
            mote_chan_free(ch[i]);
    }
    /* 8 mixed cases: 3 ready sends, 3 ready receives, 2 NULL (never) */
    {
        enum { K = 8 };
        mote_chan *in[3], *out[3];
        mote_case cs[K];
        long count[K] = {0};
        int v = 0, one = 1;
        for (int i = 0; i < 3; i++) {
            in[i] = mote_chan_make(sizeof(int), 1);
            out[i] = mote_chan_make(sizeof(int), 1);
            CHECK_EQ(mote_chan_send(in[i], &one), 0);
        }
        cs[0] = (mote_case){NULL, MOTE_RECV, &v, 0};
        for (int i = 0; i < 3; i++) {
            cs[1 + 2 * i] = (mote_case){in[i], MOTE_RECV, &v, 0};
            cs[2 + 2 * i] = (mote_case){out[i], MOTE_SEND, &one, 0};
        }
        cs[7] = (mote_case){NULL, MOTE_SEND, &one, 0};
        for (long t = 0; t < trials; t++) {
            int r = mote_select(cs, K, 0);
            CHECK(r >= 1 && r <= 6);
            count[r]++;
            if (cs[r].op == MOTE_RECV) /* refill / drain to stay ready */
                CHECK_EQ(mote_chan_send(cs[r].chan, &one), 0);
            else
                CHECK_EQ(mote_chan_recv(cs[r].chan, NULL), 0);
        }
        CHECK_EQ(count[0] + count[7], 0);
        double x = chi_square(count + 1, 6, trials);
        printf("uniform mixed: chi2 = %.2f (df 5, limit 50.69)\n", x);
        CHECK(x < 50.69);
        for (int i = 0; i < 3; i++) {
            mote_chan_free(in[i]);
            mote_chan_free(out[i]);
        }
    }
}

static void *plain_thread(void *arg)
{
    mote_chan *c = arg;
    mote_case cs[] = {{c, MOTE_RECV, NULL, 0}};
    CHECK_EQ(mote_select(cs, 1, -1), -EPERM);
    CHECK_EQ(mote_select(cs, 1, 10), -EPERM);
    CHECK_EQ(mote_select(cs, 1, 0), -EAGAIN); /* polling is fine */
    return NULL;
}

static void test_plain_thread(void)
{
    mote_chan *c = mote_chan_make(0, 1);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, plain_thread, c), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    mote_chan_free(c);
}

static void test_main(void *arg)
{
    (void)arg;
    test_args();
    test_null_and_timeouts();
    test_blocking();
    test_select_pairs();
    test_same_channel();
    test_many_cases();
    test_uniform();
    test_plain_thread();
}

int main(void)
{
    setenv("MOTE_WORKERS", "2", 0);
    CHECK_EQ(mote_run(test_main, NULL), 0);
    TEST_PASS("test_select");
    return 0;
}
