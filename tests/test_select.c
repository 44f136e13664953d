/*
 * test_select.c - mote_select: argument checking, NULL channels, poll and
 * timeouts, blocking until a peer arrives, closed channels, many cases, a
 * channel in two cases, the uniform choice among ready cases (a chi-square
 * test at a one-in-a-billion false-failure rate), and the plain-thread
 * rules.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "mote.h"

#define MS (1000 * 1000LL)

TEST_SETUP { setenv("MOTE_WORKERS", "2", 0); }

TEST_TASK(bad_arguments_return_einval)
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
    CHECK_EQ(mote_chan_free(c), 0);
}

TEST_TASK(poll_returns_eagain_when_nothing_is_ready)
{
    mote_chan *c = mote_chan_make(sizeof(int), 1);
    int v = 0;
    mote_case cs[] = {
        {NULL, MOTE_RECV, &v, 0}, {c, MOTE_RECV, &v, 0}, {NULL, MOTE_SEND, &v, 0}};
    CHECK_EQ(mote_select(cs, 3, 0), -EAGAIN);
    CHECK_EQ(mote_chan_free(c), 0);
}

/* A timeout never fires early, and does fire (the upper bound only tells a
 * lost timer from a slow machine). */
TEST_TASK(timeout_returns_etimedout_no_earlier_than_asked)
{
    mote_chan *c = mote_chan_make(sizeof(int), 1);
    int v = 0;
    mote_case cs[] = {
        {NULL, MOTE_RECV, &v, 0}, {c, MOTE_RECV, &v, 0}, {NULL, MOTE_SEND, &v, 0}};
    int64_t t0 = mote_now();
    CHECK_EQ(mote_select(cs, 3, 20 * MS), -ETIMEDOUT);
    int64_t el = mote_now() - t0;
    CHECK(el >= 20 * MS);
    CHECK(el < 10000 * MS);
    /* only NULL channels, with a timeout: just a sleep */
    t0 = mote_now();
    CHECK_EQ(mote_select(cs, 1, 10 * MS), -ETIMEDOUT);
    CHECK(mote_now() - t0 >= 10 * MS);
    t0 = mote_now();
    CHECK_EQ(mote_select(NULL, 0, 5 * MS), -ETIMEDOUT);
    CHECK(mote_now() - t0 >= 5 * MS);
    CHECK_EQ(mote_chan_free(c), 0);
}

TEST_TASK(ready_case_among_null_cases_fires)
{
    mote_chan *c = mote_chan_make(sizeof(int), 1);
    int v = 0;
    mote_case cs[] = {
        {NULL, MOTE_RECV, &v, 0}, {c, MOTE_RECV, &v, 0}, {NULL, MOTE_SEND, &v, 0}};
    CHECK_EQ(mote_chan_send(c, &(int){7}), 0);
    cs[1].result = 99;
    CHECK_EQ(mote_select(cs, 3, -1), 1);
    CHECK_EQ(cs[1].result, 0);
    CHECK_EQ(v, 7);
    CHECK_EQ(mote_chan_len(c), 0);
    CHECK_EQ(mote_chan_free(c), 0);
}

TEST_TASK(send_case_fires_while_buffer_has_room)
{
    mote_chan *c = mote_chan_make(sizeof(int), 1);
    int v = 0;
    mote_case snd[] = {{c, MOTE_SEND, &(int){8}, 0}, {NULL, MOTE_RECV, NULL, 0}};
    CHECK_EQ(mote_select(snd, 2, 0), 0);
    CHECK_EQ(snd[0].result, 0);
    CHECK_EQ(mote_select(snd, 2, 0), -EAGAIN); /* now full */
    CHECK_EQ(mote_chan_recv(c, &v), 0);
    CHECK_EQ(v, 8);
    CHECK_EQ(mote_chan_free(c), 0);
}

/* A peer that acts on a channel once the select has blocked (the blocked
 * count includes the selecting task), then tells so through done. */
typedef struct later {
    mote_chan *c;
    int value;
    int op; /* MOTE_SEND, MOTE_RECV, or 0: close */
    mote_wg done;
} later;

static void later_task(void *arg)
{
    later *l = arg;
    WAIT_UNTIL(test_metric("/tasks/blocked:tasks") >= 1, 60);
    if (l->op == MOTE_SEND)
        CHECK_EQ(mote_chan_send(l->c, &l->value), 0);
    else if (l->op == MOTE_RECV) {
        int v;
        CHECK_EQ(mote_chan_recv(l->c, &v), 0);
        CHECK_EQ(v, l->value);
    } else
        CHECK_EQ(mote_chan_close(l->c), 0);
    CHECK_EQ(mote_wg_done(&l->done), 0);
}

static void later_go(later *l, mote_chan *c, int value, int op)
{
    *l = (later){c, value, op, MOTE_WG_INIT};
    CHECK_EQ(mote_wg_add(&l->done, 1), 0);
    CHECK_EQ(mote_go(later_task, l), 0);
}

/* The select blocks, then a peer completes one case; none of its other
 * records stays behind in a channel. */
TEST_TASK(blocked_select_completes_with_the_peer_case)
{
    mote_chan *a = mote_chan_make(sizeof(int), 0);
    mote_chan *b = mote_chan_make(sizeof(int), 0);
    mote_chan *d = mote_chan_make(sizeof(int), 0);
    int va = -1, vb = -1;
    int out = 55;
    for (int round = 0; round < 3; round++) {
        later l;
        if (round == 1)
            later_go(&l, d, out, MOTE_RECV);
        else
            later_go(&l, b, 100 + round, MOTE_SEND);
        mote_case cs[] = {
            {a, MOTE_RECV, &va, 0}, {b, MOTE_RECV, &vb, 0}, {d, MOTE_SEND, &out, 0}};
        int r = mote_select(cs, 3, round == 2 ? 60000 * MS : -1); /* timed, or not */
        if (round == 1) {
            CHECK_EQ(r, 2);
        } else {
            CHECK_EQ(r, 1);
            CHECK_EQ(vb, 100 + round);
        }
        CHECK_EQ(cs[r].result, 0);
        CHECK_EQ(va, -1);
        CHECK_EQ(mote_wg_wait(&l.done), 0);
        /* no record of ours may remain: a later send on a must block */
        CHECK_EQ(mote_chan_trysend(a, &(int){1}), -EAGAIN);
        CHECK_EQ(mote_chan_tryrecv(d, NULL), -EAGAIN);
    }
    CHECK_EQ(mote_chan_free(a), 0);
    CHECK_EQ(mote_chan_free(b), 0);
    CHECK_EQ(mote_chan_free(d), 0);
}

TEST_TASK(close_wakes_blocked_select_with_eclosed)
{
    mote_chan *a = mote_chan_make(sizeof(int), 0);
    mote_chan *b = mote_chan_make(sizeof(int), 0);
    int va = 5, vb = -1;
    later l;
    later_go(&l, a, 0, 0);
    mote_case cs[] = {{b, MOTE_RECV, &vb, 0}, {a, MOTE_RECV, &va, 0}};
    CHECK_EQ(mote_select(cs, 2, -1), 1);
    CHECK_EQ(cs[1].result, MOTE_ECLOSED);
    CHECK_EQ(va, 0);
    CHECK_EQ(vb, -1);
    CHECK_EQ(mote_wg_wait(&l.done), 0);
    CHECK_EQ(mote_chan_trysend(b, &(int){1}), -EAGAIN); /* nothing left on b */
    CHECK_EQ(mote_chan_free(a), 0);
    CHECK_EQ(mote_chan_free(b), 0);
}

/* A select with one live case, woken by a close, after which the closer
 * frees the channel (nobody is blocked on it any more) and its memory is
 * reused: the select must not read the channel again (it read the element
 * size from the reused block and cleared that many bytes).  One worker: the
 * closer reuses the freed block from the same thread's cache. */
static mote_chan *sole_ch;
static void *sole_scribble[16 * 16];

static void sole_closer(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_chan_close(sole_ch), 0);
    CHECK_EQ(mote_chan_free(sole_ch), 0);
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++) {
            size_t n = 16 * (size_t)(k + 1);
            CHECK((sole_scribble[i * 16 + k] = mote_malloc(n)) != NULL);
            memset(sole_scribble[i * 16 + k], 0x7f, n);
        }
}

static void sole_select_main(void *arg)
{
    (void)arg;
    CHECK((sole_ch = mote_chan_make(sizeof(int64_t), 0)) != NULL);
    CHECK_EQ(mote_go(sole_closer, NULL), 0);
    int64_t v = 12345;
    mote_case cs[] = {{sole_ch, MOTE_RECV, &v, 0}, {NULL, MOTE_RECV, NULL, 0}};
    CHECK_EQ(mote_select(cs, 2, -1), 0);
    CHECK_EQ(cs[0].result, MOTE_ECLOSED);
    CHECK_EQ(v, 0);
    for (int i = 0; i < 16 * 16; i++)
        mote_free(sole_scribble[i]);
}

TEST(a_sole_case_woken_by_close_does_not_touch_the_freed_channel)
{
    CHECK_EQ(test_run_env("MOTE_WORKERS", "1", sole_select_main, NULL), 0);
}

TEST_TASK(send_case_on_closed_channel_fires_eclosed)
{
    mote_chan *a = mote_chan_make(sizeof(int), 0);
    mote_chan *b = mote_chan_make(sizeof(int), 0);
    int vb = -1, out = 55;
    CHECK_EQ(mote_chan_close(a), 0);
    mote_case sc[] = {{b, MOTE_RECV, &vb, 0}, {a, MOTE_SEND, &out, 0}};
    CHECK_EQ(mote_select(sc, 2, -1), 1);
    CHECK_EQ(sc[1].result, MOTE_ECLOSED);
    CHECK_EQ(mote_select(sc, 2, 0), 1); /* and when polled */
    CHECK_EQ(sc[1].result, MOTE_ECLOSED);
    CHECK_EQ(mote_chan_free(a), 0);
    CHECK_EQ(mote_chan_free(b), 0);
}

/* Two selects on each other's channels: one sends on x and receives on y,
 * the other the reverse; they must pair up. */
typedef struct pair_ctx {
    mote_chan *x, *y;
    mote_wg wg;
    long n;
    long got;
} pair_ctx;

static void pair_side(pair_ctx *p, mote_chan *out_c, mote_chan *in_c)
{
    for (long i = 0; i < p->n; i++) {
        long out = i, in = -1;
        mote_case cs[] = {{out_c, MOTE_SEND, &out, 0}, {in_c, MOTE_RECV, &in, 0}};
        int r = mote_select(cs, 2, -1);
        CHECK(r == 0 || r == 1);
        CHECK_EQ(cs[r].result, 0);
        if (r == 1) {
            CHECK(in >= 0 && in < p->n);
            __atomic_add_fetch(&p->got, 1, __ATOMIC_RELAXED);
        }
    }
    CHECK_EQ(mote_wg_done(&p->wg), 0);
}

static void pair_a(void *arg)
{
    pair_ctx *p = arg;
    pair_side(p, p->x, p->y);
}

static void pair_b(void *arg)
{
    pair_ctx *p = arg;
    pair_side(p, p->y, p->x);
}

TEST_TASK(crossed_selects_pair_up)
{
    pair_ctx p = {mote_chan_make(sizeof(long), 0), mote_chan_make(sizeof(long), 0),
                  MOTE_WG_INIT, TEST_SCALE(20000, 10), 0};
    CHECK_EQ(mote_wg_add(&p.wg, 2), 0);
    CHECK_EQ(mote_go(pair_a, &p), 0);
    CHECK_EQ(mote_go(pair_b, &p), 0);
    CHECK_EQ(mote_wg_wait(&p.wg), 0);
    CHECK_EQ(p.got, p.n); /* each round: exactly one side received */
    CHECK_EQ(mote_chan_free(p.x), 0);
    CHECK_EQ(mote_chan_free(p.y), 0);
}

/* A channel in both a send and a receive case of the same select. */
TEST_TASK(same_channel_in_send_and_receive_cases)
{
    mote_chan *c = mote_chan_make(sizeof(int), 1);
    int in = 0, out = 3;
    mote_case cs[] = {
        {c, MOTE_RECV, &in, 0}, {c, MOTE_SEND, &out, 0}, {c, MOTE_RECV, &in, 0}};
    CHECK_EQ(mote_select(cs, 3, -1), 1); /* empty: only the send is ready */
    int r = mote_select(cs, 3, -1);      /* full: a receive */
    CHECK(r == 0 || r == 2);
    CHECK_EQ(in, 3);
    CHECK_EQ(mote_chan_free(c), 0);

    /* unbuffered, blocking: a peer receives */
    mote_chan *u = mote_chan_make(sizeof(int), 0);
    later l;
    later_go(&l, u, 3, MOTE_RECV);
    mote_case us[] = {{u, MOTE_RECV, &in, 0}, {u, MOTE_SEND, &out, 0}};
    CHECK_EQ(mote_select(us, 2, -1), 1);
    CHECK_EQ(mote_wg_wait(&l.done), 0);
    CHECK_EQ(mote_chan_free(u), 0);
}

/* Many cases: the heap path and the heapsort lock order. */
TEST_TASK(many_cases_poll_block_and_leave_nothing_behind)
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
    later l;
    later_go(&l, ch[200], 200, MOTE_SEND);
    r = mote_select(cs, N, -1);
    CHECK(r >= 0);
    CHECK(cs[r].chan == ch[200]);
    CHECK_EQ(vals[r], 200);
    CHECK_EQ(mote_wg_wait(&l.done), 0);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(mote_chan_tryrecv(ch[i], NULL), -EAGAIN); /* nothing left */
        CHECK_EQ(mote_chan_free(ch[i]), 0);
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

/* 4 receive cases on buffered channels kept non-empty. */
TEST_TASK(choice_is_uniform_among_ready_receives)
{
    long trials = TEST_SCALE(40000, 4);
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
        CHECK_EQ(mote_chan_free(ch[i]), 0);
}

/* 8 mixed cases: 3 ready sends, 3 ready receives, 2 NULL (never). */
TEST_TASK(choice_is_uniform_among_mixed_ready_cases)
{
    long trials = TEST_SCALE(40000, 4);
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
        CHECK_EQ(mote_chan_free(in[i]), 0);
        CHECK_EQ(mote_chan_free(out[i]), 0);
    }
}

/* A select that may block is refused outside a task even when a case is
 * ready (and leaves it ready); a poll works anywhere. */
static void select_outside_a_task(void)
{
    mote_chan *c = mote_chan_make(sizeof(int), 1);
    int v = 0;
    mote_case cs[] = {{c, MOTE_RECV, &v, 0}};
    CHECK_EQ(mote_select(cs, 1, -1), -EPERM);
    CHECK_EQ(mote_select(cs, 1, 10), -EPERM);
    CHECK_EQ(mote_select(cs, 1, 0), -EAGAIN); /* polling is fine */
    CHECK_EQ(mote_select(NULL, 0, -1), -EPERM);
    CHECK_EQ(mote_chan_trysend(c, &(int){4}), 0);
    CHECK_EQ(mote_select(cs, 1, -1), -EPERM); /* ready, still refused */
    CHECK_EQ(mote_select(cs, 1, 10), -EPERM);
    CHECK_EQ(mote_chan_len(c), 1);
    CHECK_EQ(v, 0);
    CHECK_EQ(mote_select(cs, 1, 0), 0);
    CHECK_EQ(v, 4);
    CHECK_EQ(mote_chan_free(c), 0);
}

static void *plain_thread(void *arg)
{
    (void)arg;
    select_outside_a_task();
    return NULL;
}

/* Cases on one channel, the select blocked before its peer comes: the peer
 * completes a random one of them, as Go's select does (the lowest index
 * won 200 times in 200: records were queued in index order). */
TEST_TASK(a_blocked_select_picks_at_random_among_cases_on_one_channel)
{
    mote_chan *c = mote_chan_make(sizeof(int), 0);
    CHECK(c != NULL);
    enum { ROUNDS = TEST_SCALE(200, 4) };
    for (int op = 0; op < 2; op++) { /* two sends, then two receives */
        int won[2] = {0, 0};
        for (int round = 0; round < ROUNDS; round++) {
            later l;
            later_go(&l, c, 7, op == 0 ? MOTE_RECV : MOTE_SEND);
            int out = 7, in[2] = {-1, -1};
            mote_case cs[2];
            for (int k = 0; k < 2; k++)
                cs[k] = (mote_case){c, op == 0 ? MOTE_SEND : MOTE_RECV,
                                    op == 0 ? (void *)&out : (void *)&in[k], 0};
            int r = mote_select(cs, 2, -1);
            CHECK(r == 0 || r == 1);
            if (op == 1)
                CHECK_EQ(in[r], 7);
            won[r]++;
            CHECK_EQ(mote_wg_wait(&l.done), 0);
        }
        printf("%s: case 0 %d, case 1 %d of %d\n", op == 0 ? "sends" : "receives", won[0],
               won[1], ROUNDS);
        CHECK(won[0] >= ROUNDS / 5 && won[1] >= ROUNDS / 5);
    }
    CHECK_EQ(mote_chan_free(c), 0);
}

TEST_TASK(plain_thread_select_that_may_block_returns_eperm)
{
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, plain_thread, NULL), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
}

TEST(select_outside_a_run_that_may_block_returns_eperm) { select_outside_a_task(); }

TEST_MAIN()
