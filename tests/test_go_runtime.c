/*
 * test_go_runtime.c - what Go's own tests ask of channels, select and sync,
 * asked again of mote.  Each case re-expresses (in mote's terms, not Go's
 * code) the checks of one Go test where mote has the feature; where Go
 * panics, mote returns an error, and a Go nil channel in a select is a
 * case with a NULL channel.  Covered:
 *  - src/runtime/chan_test.go: TestChan (a receive from an empty channel
 *    and a send to a full one block, values drain from a closed channel,
 *    close wakes a receiver, FIFO order, many senders and receivers, len
 *    and cap; at every capacity up to 200), TestNonblockSelectRace and
 *    TestNonblockSelectRace2 (sharpened: the poller runs on the other
 *    worker, also among 254 idle channels, and the moves are timed to land
 *    inside its poll), TestSelfSelect, TestSelectStress, TestSelectFairness,
 *    TestChanSendInterface, TestPseudoRandomSend, TestMultiConsumer,
 *    TestSelectDuplicateChannel (also woken by a close and freed at once),
 *    and TestChanSendBarrier / TestChanSendSelectBarrier (the requester
 *    frees the channels as soon as it has the reply);
 *  - src/runtime/race/testdata/chan_test.go, the NoRace cases: what a
 *    send, a receive and a close order in plain memory (ThreadSanitizer
 *    builds check it), with Go's memory model's rule for a receive that
 *    returns because of a close applied to polls too, as Go's runtime
 *    does;
 *  - test/closedchan.go (every operation on a closed channel, unbuffered
 *    and buffered, directly and through selects), test/chancap.go,
 *    test/ken/chan.go and test/ken/chan1.go;
 *  - src/sync/waitgroup_test.go: TestWaitGroup (reuse as a barrier),
 *    TestWaitGroupMisuse (-EINVAL), TestWaitGroupMisuse2/3 (mote allows
 *    what Go panics on there: reuse while waiters are still on their way
 *    out), TestWaitGroupRace;
 *  - src/sync/mutex_test.go: TestMutexFairness;
 *  - src/sync/cond_test.go: TestCondSignalGenerations, TestCondBroadcast,
 *    TestRace, TestCondSignalStealing;
 *  - a select with a timeout racing peers on two channels, as Go programs
 *    use select with time.After.
 * Blocking is shown by waiting until the tasks are parked and then a
 * little longer, never by waiting forever.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "mote.h"

#define MS (1000 * 1000LL)
#define US (1000LL)

TEST_SETUP { setenv("MOTE_WORKERS", "2", 0); }

static uint64_t blocked(void) { return test_metric("/tasks/blocked:tasks"); }

static mote_chan *mk(size_t elem_size, size_t cap)
{
    mote_chan *c = mote_chan_make(elem_size, cap);
    CHECK(c != NULL);
    return c;
}

static void go(mote_fn fn, void *arg) { CHECK_EQ(mote_go(fn, arg), 0); }

static int load(const int *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static void store(int *p, int v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
static void add(long *p, long v) { __atomic_add_fetch(p, v, __ATOMIC_RELAXED); }

/* ---- TestChan: the basic contract at every capacity ---- */

typedef struct probe {
    mote_chan *c;
    mote_wg wg;
    int done[2];
    int got;
} probe;

static void recv_keep(void *arg)
{
    probe *p = arg;
    int v = -1;
    CHECK_EQ(mote_chan_recv(p->c, &v), 0);
    store(&p->got, v);
    store(&p->done[0], 1);
    CHECK_EQ(mote_wg_done(&p->wg), 0);
}

static void recv_drop(void *arg)
{
    probe *p = arg;
    CHECK_EQ(mote_chan_recv(p->c, NULL), 0);
    store(&p->done[1], 1);
    CHECK_EQ(mote_wg_done(&p->wg), 0);
}

/* Two receivers (one keeps the value, one discards it) park on an empty
 * channel and stay parked; polls of it say it would block, alone or with
 * another idle channel in the select; two sends then go to the receivers,
 * not into the buffer. */
TEST_TASK(receive_from_an_empty_channel_blocks_at_every_capacity)
{
    size_t ncap = TEST_SCALE(200, 10);
    mote_chan *idle = mk(sizeof(int), 0);
    for (size_t cap = 0; cap < ncap; cap++) {
        probe p = {mk(sizeof(int), cap), MOTE_WG_INIT, {0, 0}, -1};
        CHECK_EQ(mote_wg_add(&p.wg, 2), 0);
        go(recv_keep, &p);
        go(recv_drop, &p);
        test_wait_blocked(2);
        mote_sleep(1 * MS);
        CHECK(!load(&p.done[0]) && !load(&p.done[1]));
        int v = -1;
        CHECK_EQ(mote_chan_tryrecv(p.c, &v), -EAGAIN);
        mote_case one[] = {{p.c, MOTE_RECV, &v, 0}};
        CHECK_EQ(mote_select(one, 1, 0), -EAGAIN);
        mote_case two[] = {{idle, MOTE_RECV, &v, 0}, {p.c, MOTE_RECV, NULL, 0}};
        CHECK_EQ(mote_select(two, 2, 0), -EAGAIN);
        CHECK_EQ(v, -1);
        CHECK_EQ(mote_chan_send(p.c, &(int){11}), 0);
        CHECK_EQ(mote_chan_send(p.c, &(int){22}), 0);
        CHECK_EQ(mote_chan_len(p.c), 0); /* both went to a waiting receiver */
        CHECK_EQ(mote_wg_wait(&p.wg), 0);
        CHECK(p.got == 11 || p.got == 22);
        CHECK_EQ(mote_chan_free(p.c), 0);
    }
    CHECK_EQ(mote_chan_free(idle), 0);
}

typedef struct late {
    mote_chan *c;
    int value;
    int sent;
    mote_wg wg;
} late;

static void send_late(void *arg)
{
    late *x = arg;
    CHECK_EQ(mote_chan_send(x->c, &x->value), 0);
    store(&x->sent, 1);
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

/* A sender on a full channel parks and stays parked; polls say it would
 * block and leave the buffer alone; the first receive lets it in, and its
 * value comes out after every value that was buffered before it. */
TEST_TASK(send_to_a_full_channel_blocks_at_every_capacity)
{
    size_t ncap = TEST_SCALE(200, 10);
    mote_chan *idle = mk(sizeof(int), 0);
    for (size_t cap = 0; cap < ncap; cap++) {
        late x = {mk(sizeof(int), cap), (int)cap, 0, MOTE_WG_INIT};
        for (int i = 0; i < (int)cap; i++)
            CHECK_EQ(mote_chan_send(x.c, &i), 0);
        CHECK_EQ(mote_wg_add(&x.wg, 1), 0);
        go(send_late, &x);
        test_wait_blocked(1);
        mote_sleep(1 * MS);
        CHECK(!load(&x.sent));
        int no = -1;
        CHECK_EQ(mote_chan_trysend(x.c, &no), -EAGAIN);
        mote_case one[] = {{x.c, MOTE_SEND, &no, 0}};
        CHECK_EQ(mote_select(one, 1, 0), -EAGAIN);
        mote_case two[] = {{idle, MOTE_SEND, &no, 0}, {x.c, MOTE_SEND, &no, 0}};
        CHECK_EQ(mote_select(two, 2, 0), -EAGAIN);
        CHECK_EQ(mote_chan_len(x.c), cap); /* the parked value is not in it */
        for (int i = 0; i <= (int)cap; i++) {
            int v = -1;
            CHECK_EQ(mote_chan_recv(x.c, &v), 0);
            CHECK_EQ(v, i);
        }
        CHECK_EQ(mote_wg_wait(&x.wg), 0);
        CHECK(load(&x.sent));
        CHECK_EQ(mote_chan_len(x.c), 0);
        CHECK_EQ(mote_chan_free(x.c), 0);
    }
    CHECK_EQ(mote_chan_free(idle), 0);
}

static void recv_expect_closed(void *arg)
{
    probe *p = arg;
    long v = 77;
    CHECK_EQ(mote_chan_recv(p->c, &v), MOTE_ECLOSED);
    CHECK_EQ(v, 0);
    store(&p->done[0], 1);
    CHECK_EQ(mote_wg_done(&p->wg), 0);
}

/* A closed channel still yields what it buffered, in order, then zero
 * values with MOTE_ECLOSED however it is received; a receiver parked on
 * an empty channel wakes from the close with a zero value. */
TEST_TASK(a_closed_channel_yields_its_buffer_then_zeros_at_every_capacity)
{
    size_t ncap = TEST_SCALE(200, 10);
    for (size_t cap = 0; cap < ncap; cap++) {
        mote_chan *c = mk(sizeof(long), cap);
        for (long i = 0; i < (long)cap; i++)
            CHECK_EQ(mote_chan_send(c, &(long){i + 1}), 0);
        CHECK_EQ(mote_chan_close(c), 0);
        CHECK_EQ(mote_chan_len(c), cap);
        for (long i = 0; i < (long)cap; i++) {
            long v = 0;
            CHECK_EQ(mote_chan_recv(c, &v), 0);
            CHECK_EQ(v, i + 1);
        }
        long v = 99;
        CHECK_EQ(mote_chan_recv(c, &v), MOTE_ECLOSED);
        CHECK_EQ(v, 0);
        v = 99;
        CHECK_EQ(mote_chan_tryrecv(c, &v), MOTE_ECLOSED);
        CHECK_EQ(v, 0);
        v = 99;
        mote_case one[] = {{c, MOTE_RECV, &v, 0}};
        CHECK_EQ(mote_select(one, 1, -1), 0);
        CHECK_EQ(one[0].result, MOTE_ECLOSED);
        CHECK_EQ(v, 0);
        CHECK_EQ(mote_chan_free(c), 0);

        probe p = {mk(sizeof(long), cap), MOTE_WG_INIT, {0, 0}, 0};
        CHECK_EQ(mote_wg_add(&p.wg, 1), 0);
        go(recv_expect_closed, &p);
        test_wait_blocked(1);
        CHECK(!load(&p.done[0]));
        CHECK_EQ(mote_chan_close(p.c), 0);
        CHECK_EQ(mote_wg_wait(&p.wg), 0);
        CHECK(load(&p.done[0]));
        CHECK_EQ(mote_chan_free(p.c), 0);
    }
}

enum { FAN = 4, FAN_VALUES = 1000 };

typedef struct fan {
    mote_chan *c;
    int count[FAN_VALUES];
    mote_wg wg;
} fan;

static void fan_sender(void *arg)
{
    fan *f = arg;
    for (int i = 0; i < FAN_VALUES; i++)
        CHECK_EQ(mote_chan_send(f->c, &i), 0);
    CHECK_EQ(mote_wg_done(&f->wg), 0);
}

static void fan_receiver(void *arg)
{
    fan *f = arg;
    for (int i = 0; i < FAN_VALUES; i++) {
        int v = -1;
        CHECK_EQ(mote_chan_recv(f->c, &v), 0);
        CHECK(v >= 0 && v < FAN_VALUES);
        __atomic_add_fetch(&f->count[v], 1, __ATOMIC_RELAXED);
    }
    CHECK_EQ(mote_wg_done(&f->wg), 0);
}

static void seq_sender(void *arg)
{
    fan *f = arg;
    for (int i = 0; i < 100; i++)
        CHECK_EQ(mote_chan_send(f->c, &i), 0);
    CHECK_EQ(mote_wg_done(&f->wg), 0);
}

/* One sender's 100 values arrive in order; then four senders each send
 * 0..999 to four receivers, and every value arrives exactly four times. */
TEST_TASK(values_arrive_in_order_and_exactly_once_at_every_capacity)
{
    size_t ncap = TEST_SCALE(200, 20);
    static fan f;
    for (size_t cap = 0; cap < ncap; cap++) {
        memset(&f, 0, sizeof f);
        f.c = mk(sizeof(int), cap);
        CHECK_EQ(mote_wg_add(&f.wg, 1), 0);
        go(seq_sender, &f);
        for (int i = 0; i < 100; i++) {
            int v = -1;
            CHECK_EQ(mote_chan_recv(f.c, &v), 0);
            CHECK_EQ(v, i);
        }
        CHECK_EQ(mote_wg_wait(&f.wg), 0);

        CHECK_EQ(mote_wg_add(&f.wg, 2 * FAN), 0);
        for (int p = 0; p < FAN; p++) {
            go(fan_sender, &f);
            go(fan_receiver, &f);
        }
        CHECK_EQ(mote_wg_wait(&f.wg), 0);
        for (int v = 0; v < FAN_VALUES; v++)
            CHECK_EQ(f.count[v], FAN);
        CHECK_EQ(mote_chan_len(f.c), 0);
        CHECK_EQ(mote_chan_free(f.c), 0);
    }
}

/* TestChan's len/cap and test/chancap.go: len counts buffered values only,
 * cap is what make was given, and neither changes at close. */
TEST_TASK(len_and_cap_follow_the_buffer_at_every_capacity)
{
    mote_chan *c = mk(sizeof(int), 10);
    CHECK_EQ(mote_chan_len(c), 0);
    CHECK_EQ(mote_chan_cap(c), 10);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(mote_chan_send(c, &i), 0);
    CHECK_EQ(mote_chan_len(c), 3);
    CHECK_EQ(mote_chan_cap(c), 10);
    CHECK_EQ(mote_chan_free(c), 0);
    c = mk(sizeof(int), 0);
    CHECK_EQ(mote_chan_len(c), 0);
    CHECK_EQ(mote_chan_cap(c), 0);
    CHECK_EQ(mote_chan_free(c), 0);

    size_t ncap = TEST_SCALE(200, 10);
    for (size_t cap = 0; cap < ncap; cap++) {
        c = mk(sizeof(int), cap);
        CHECK_EQ(mote_chan_len(c), 0);
        CHECK_EQ(mote_chan_cap(c), cap);
        for (int i = 0; i < (int)cap; i++) {
            CHECK_EQ(mote_chan_send(c, &i), 0);
            CHECK_EQ(mote_chan_len(c), (size_t)i + 1);
        }
        CHECK_EQ(mote_chan_cap(c), cap);
        if (cap) {
            CHECK_EQ(mote_chan_recv(c, NULL), 0);
            CHECK_EQ(mote_chan_len(c), cap - 1);
        }
        CHECK_EQ(mote_chan_close(c), 0);
        CHECK_EQ(mote_chan_len(c), cap ? cap - 1 : 0);
        CHECK_EQ(mote_chan_cap(c), cap);
        CHECK_EQ(mote_chan_free(c), 0);
    }
}

/* ---- test/closedchan.go: every operation on a closed channel ---- */

/* The three ways closedchan.go reaches a channel: the operation itself, a
 * select with that one case, and a select with a second case on a
 * channel that never becomes ready. */
enum { DIRECT, SELECT_ONE, SELECT_TWO, WAYS };
static mote_chan *never; /* unbuffered, nobody ever on the other side */

/* A receive (into v, which may be NULL) the given way, blocking or
 * polling: 0 or MOTE_ECLOSED, or -EAGAIN from a poll. */
static int recv_way(int way, mote_chan *c, int *v, int block)
{
    if (way == DIRECT)
        return block ? mote_chan_recv(c, v) : mote_chan_tryrecv(c, v);
    int other = -5;
    mote_case cs[2] = {{never, MOTE_RECV, &other, 0}, {c, MOTE_RECV, v, 1}};
    mote_case *first = way == SELECT_ONE ? &cs[1] : &cs[0];
    int r = mote_select(first, way == SELECT_ONE ? 1 : 2, block ? -1 : 0);
    if (r < 0)
        return r;
    CHECK_EQ(&first[r], &cs[1]); /* the idle case never fires */
    CHECK_EQ(other, -5);
    return cs[1].result;
}

static int send_way(int way, mote_chan *c, int v, int block)
{
    if (way == DIRECT)
        return block ? mote_chan_send(c, &v) : mote_chan_trysend(c, &v);
    mote_case cs[2] = {{never, MOTE_RECV, NULL, 0}, {c, MOTE_SEND, &v, 1}};
    mote_case *first = way == SELECT_ONE ? &cs[1] : &cs[0];
    int r = mote_select(first, way == SELECT_ONE ? 1 : 2, block ? -1 : 0);
    if (r < 0)
        return r;
    CHECK_EQ(&first[r], &cs[1]);
    return cs[1].result;
}

/* closedchan.go's test1 on a closed, drained channel. */
static void closed_and_drained(int way, mote_chan *c)
{
    for (int round = 0; round < 3; round++) {
        int v = 99;
        CHECK_EQ(recv_way(way, c, &v, 1), MOTE_ECLOSED);
        CHECK_EQ(v, 0);
        CHECK_EQ(recv_way(way, c, NULL, 1), MOTE_ECLOSED);
        v = 99; /* a poll fires (it did not have to wait), with a zero */
        CHECK_EQ(recv_way(way, c, &v, 0), MOTE_ECLOSED);
        CHECK_EQ(v, 0);
        CHECK_EQ(recv_way(way, c, NULL, 0), MOTE_ECLOSED);
    }
    /* where Go panics, mote says closed, and the value is not kept */
    CHECK_EQ(send_way(way, c, 1, 0), MOTE_ECLOSED);
    int v = 99;
    CHECK_EQ(recv_way(way, c, &v, 1), MOTE_ECLOSED);
    CHECK_EQ(v, 0);
    CHECK_EQ(send_way(way, c, 2, 1), MOTE_ECLOSED);
    v = 99;
    CHECK_EQ(recv_way(way, c, &v, 1), MOTE_ECLOSED);
    CHECK_EQ(v, 0);
    CHECK_EQ(mote_chan_len(c), 0);
    CHECK_EQ(mote_chan_close(c), MOTE_ECLOSED);
}

TEST_TASK(every_operation_on_a_closed_channel_answers_at_once_in_every_way)
{
    never = mk(sizeof(int), 0);
    for (int way = 0; way < WAYS; way++) {
        mote_chan *c = mk(sizeof(int), 0); /* closedsync */
        CHECK_EQ(mote_chan_close(c), 0);
        closed_and_drained(way, c);
        CHECK_EQ(mote_chan_free(c), 0);
        for (int block = 0; block < 2; block++) { /* closedasync */
            c = mk(sizeof(int), 2);
            CHECK_EQ(mote_chan_send(c, &(int){1}), 0);
            CHECK_EQ(mote_chan_close(c), 0);
            int v = 0; /* the last value first, by a receive or a poll */
            CHECK_EQ(recv_way(way, c, &v, block), 0);
            CHECK_EQ(v, 1);
            closed_and_drained(way, c);
            CHECK_EQ(mote_chan_free(c), 0);
        }
    }
    CHECK_EQ(mote_chan_close(NULL), -EINVAL); /* Go: close of a nil channel */
    CHECK_EQ(mote_chan_len(never), 0);
    CHECK_EQ(mote_chan_free(never), 0);
}

/* ---- TestNonblockSelectRace, TestNonblockSelectRace2 ---- */

/* Spins (never parking, so the caller's worker runs nothing else) until
 * *flag is not `from`, and returns the new value.  A task started while
 * its spawner spins runs on another worker: the two sides truly race. */
static long spin_while(const long *flag, long from)
{
    int64_t end = mote_now() + 60 * 1000 * MS;
    long v;
    for (unsigned n = 0; (v = __atomic_load_n(flag, __ATOMIC_ACQUIRE)) == from; n++) {
        if (n % 64 == 63) {
            CHECK(mote_now() < end);
            sched_yield(); /* the other side may be off its CPU */
        }
    }
    return v;
}

enum { NB_IDLE = 254 };

typedef struct nb {
    mote_chan *c1, *c2;
    mote_chan *idle[NB_IDLE]; /* never ready */
    long round, answered;     /* handshakes, atomic; round -1: stop */
    int64_t published, took;  /* when the round began; its poll's end */
    long empty;               /* rounds whose poll found nothing */
} nb;

static void nb_poller(void *arg)
{
    nb *x = arg;
    __atomic_store_n(&x->answered, 0, __ATOMIC_RELEASE); /* started */
    for (long i = 0; (i = spin_while(&x->round, i)) > 0;) {
        int v;
        mote_case cs[2 + NB_IDLE] = {{x->c1, MOTE_RECV, &v, 0},
                                     {x->c2, MOTE_RECV, &v, 0}};
        for (int k = 0; k < NB_IDLE; k++)
            cs[2 + k] = (mote_case){x->idle[k], MOTE_RECV, &v, 0};
        /* Go's two cases; or the two among idle ones, which spread the
         * poll over a longer time (the channels lie in a random order) */
        if (mote_select(cs, i % 2 ? 2 : 2 + NB_IDLE, 0) < 0)
            x->empty++;
        x->took = mote_now() - x->published;
        __atomic_store_n(&x->answered, i, __ATOMIC_RELEASE);
    }
}

/* c1 holds a value; a task on the other worker polls c1 and c2 while the
 * main task makes c2 ready (a value, or a close) and then empties c1 if it
 * still can.  One of the two is ready at every moment of the poll, so it
 * must never come back empty: a select acts on one instant, not on a
 * smeared window.  Each round is a handshake between two spinning threads,
 * slow on a loaded machine: the rounds stop after 2 s once 500 ran. */
static void nonblock_select_race(int close_c2)
{
    static nb x;
    memset(&x, 0, sizeof x);
    x.answered = -1;
    for (int k = 0; k < NB_IDLE; k++)
        x.idle[k] = mk(sizeof(int), 0);
    go(nb_poller, &x);
    spin_while(&x.answered, -1); /* it runs on the other worker */
    uint64_t seed = 0x2545f4914f6cdd1dull;
    int64_t span[2] = {2000, 2000}; /* ns from a round's start to its poll's end */
    long i, n = TEST_SCALE(100000, 50);
    int64_t t0 = mote_now();
    for (i = 1; i <= n && (i <= 500 || mote_now() - t0 < 2000 * MS); i++) {
        x.c1 = mk(sizeof(int), 1);
        x.c2 = mk(sizeof(int), close_c2 ? 0 : 1);
        CHECK_EQ(mote_chan_send(x.c1, &(int){1}), 0);
        x.published = mote_now();
        __atomic_store_n(&x.round, i, __ATOMIC_RELEASE);
        /* the poll's head start: random, up to its usual length, so that
         * the moves below land anywhere in it */
        int64_t go_at =
            x.published + (int64_t)(test_rnd(&seed) % (uint64_t)(span[i % 2] + 1));
        while (mote_now() < go_at) {
        }
        if (close_c2)
            CHECK_EQ(mote_chan_close(x.c2), 0);
        else
            CHECK_EQ(mote_chan_send(x.c2, &(int){1}), 0);
        int r = mote_chan_tryrecv(x.c1, NULL);
        CHECK(r == 0 || r == -EAGAIN);
        spin_while(&x.answered, i - 1);
        if (x.empty)
            fprintf(stderr, "round %ld: the poll found neither channel ready\n", i);
        CHECK_EQ(x.empty, 0);
        if (x.took < 1000 * US) /* (not a round the poller lost its CPU in) */
            span[i % 2] += (x.took - span[i % 2]) / 8;
        CHECK_EQ(mote_chan_free(x.c1), 0);
        CHECK_EQ(mote_chan_free(x.c2), 0);
    }
    __atomic_store_n(&x.round, -1, __ATOMIC_RELEASE);
    printf("%ld rounds; polls took %lld ns (2 cases), %lld ns (%d cases)\n", i - 1,
           (long long)span[1], (long long)span[0], 2 + NB_IDLE);
    WAIT_UNTIL(test_metric("/tasks/live:tasks") == 1, 60); /* the poller left */
    for (int k = 0; k < NB_IDLE; k++)
        CHECK_EQ(mote_chan_free(x.idle[k]), 0);
}

static void value_moves_main(void *arg)
{
    (void)arg;
    nonblock_select_race(0);
}

static void close_replaces_main(void *arg)
{
    (void)arg;
    nonblock_select_race(1);
}

/* (two workers whatever MOTE_WORKERS says: one spins for each side) */
TEST(a_poll_of_two_channels_sees_one_ready_while_a_value_moves_between_them)
{
    CHECK_EQ(test_run_env("MOTE_WORKERS", "2", value_moves_main, NULL), 0);
}

TEST(a_poll_of_two_channels_sees_one_ready_while_a_close_replaces_a_value)
{
    CHECK_EQ(test_run_env("MOTE_WORKERS", "2", close_replaces_main, NULL), 0);
}

/* ---- TestSelfSelect ---- */

typedef struct self {
    mote_chan *c;
    size_t cap;
    long iters;
    long sent[3], got[3];
    mote_wg wg;
} self;

static void self_select(self *x, int me)
{
    for (long i = 0; i < x->iters; i++) {
        int out = me, in = -1;
        int send_first = me == 1 || i % 2 == 0;
        mote_case cs[2];
        cs[send_first ? 0 : 1] = (mote_case){x->c, MOTE_SEND, &out, 0};
        cs[send_first ? 1 : 0] = (mote_case){x->c, MOTE_RECV, &in, 0};
        int r = mote_select(cs, 2, -1);
        CHECK(r == 0 || r == 1);
        CHECK_EQ(cs[r].result, 0);
        if (cs[r].op == MOTE_RECV) {
            CHECK(in == 1 || in == 2);
            if (x->cap == 0 && in == me) {
                fprintf(stderr, "task %d received its own value\n", me);
                CHECK(0);
            }
            x->got[me]++;
        } else {
            x->sent[me]++;
        }
    }
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

static void self_one(void *arg) { self_select(arg, 1); }
static void self_two(void *arg) { self_select(arg, 2); }

/* Two tasks select between sending on and receiving from one channel.
 * Unbuffered, a select can only pair with the other task's, never with
 * its own other case; the counts say every value sent was received. */
TEST_TASK(a_select_sending_and_receiving_on_one_channel_never_meets_itself)
{
    for (size_t cap = 0; cap <= 10; cap += 10) {
        static self x;
        memset(&x, 0, sizeof x);
        x.c = mk(sizeof(int), cap);
        x.cap = cap;
        x.iters = TEST_SCALE(10000, 10);
        CHECK_EQ(mote_wg_add(&x.wg, 2), 0);
        go(self_one, &x);
        go(self_two, &x);
        CHECK_EQ(mote_wg_wait(&x.wg), 0);
        if (cap == 0) {
            CHECK_EQ(x.sent[1], x.got[2]);
            CHECK_EQ(x.sent[2], x.got[1]);
        }
        CHECK_EQ(x.sent[1] + x.sent[2], x.got[1] + x.got[2] + (long)mote_chan_len(x.c));
        CHECK_EQ(mote_chan_free(x.c), 0);
    }
}

/* ---- TestSelectStress ---- */

typedef struct stress {
    mote_chan *c[4];
    long n;
    long sum[4];
    mote_wg wg;
} stress;

typedef struct stress_arg {
    stress *s;
    int k;
} stress_arg;

static void stress_sender(void *arg)
{
    stress_arg *a = arg;
    long v = a->k + 1;
    for (long i = 0; i < a->s->n; i++)
        CHECK_EQ(mote_chan_send(a->s->c[a->k], &v), 0);
    CHECK_EQ(mote_wg_done(&a->s->wg), 0);
}

static void stress_receiver(void *arg)
{
    stress_arg *a = arg;
    for (long i = 0; i < a->s->n; i++) {
        long v = 0;
        CHECK_EQ(mote_chan_recv(a->s->c[a->k], &v), 0);
        add(&a->s->sum[a->k], v);
    }
    CHECK_EQ(mote_wg_done(&a->s->wg), 0);
}

/* Sends n values on each channel from one select, dropping a channel from
 * it (a NULL case) once its n are sent. */
static void stress_select_sender(void *arg)
{
    stress *s = arg;
    static const int order[4] = {3, 2, 0, 1};
    long vals[4], n[4] = {0};
    mote_chan *live[4];
    for (int k = 0; k < 4; k++) {
        vals[k] = (k + 1) * 1000L;
        live[k] = s->c[k];
    }
    for (long i = 0; i < 4 * s->n; i++) {
        mote_case cs[4];
        for (int j = 0; j < 4; j++)
            cs[j] = (mote_case){live[order[j]], MOTE_SEND, &vals[order[j]], 0};
        int r = mote_select(cs, 4, -1);
        CHECK(r >= 0 && r < 4);
        CHECK_EQ(cs[r].result, 0);
        int k = order[r];
        if (++n[k] == s->n)
            live[k] = NULL;
    }
    CHECK_EQ(mote_wg_done(&s->wg), 0);
}

static void stress_select_receiver(void *arg)
{
    stress *s = arg;
    long n[4] = {0}, v[4];
    mote_chan *live[4];
    for (int k = 0; k < 4; k++)
        live[k] = s->c[k];
    for (long i = 0; i < 4 * s->n; i++) {
        mote_case cs[4];
        for (int k = 0; k < 4; k++)
            cs[k] = (mote_case){live[k], MOTE_RECV, &v[k], 0};
        int r = mote_select(cs, 4, -1);
        CHECK(r >= 0 && r < 4);
        CHECK_EQ(cs[r].result, 0);
        add(&s->sum[r], v[r]);
        if (++n[r] == s->n)
            live[r] = NULL;
    }
    CHECK_EQ(mote_wg_done(&s->wg), 0);
}

static void select_stress_main(void *arg)
{
    (void)arg;
    static stress s;
    static stress_arg args[4];
    memset(&s, 0, sizeof s);
    s.c[0] = mk(sizeof(long), 0);
    s.c[1] = mk(sizeof(long), 0);
    s.c[2] = mk(sizeof(long), 2);
    s.c[3] = mk(sizeof(long), 3);
    s.n = TEST_SCALE(50000, 25);
    CHECK_EQ(mote_wg_add(&s.wg, 10), 0);
    for (int k = 0; k < 4; k++) {
        args[k] = (stress_arg){&s, k};
        go(stress_sender, &args[k]);
        go(stress_receiver, &args[k]);
    }
    go(stress_select_sender, &s);
    go(stress_select_receiver, &s);
    CHECK_EQ(mote_wg_wait(&s.wg), 0);
    for (int k = 0; k < 4; k++) {
        CHECK_EQ(s.sum[k], s.n * (k + 1) * 1001L);
        CHECK_EQ(mote_chan_len(s.c[k]), 0);
        CHECK_EQ(mote_chan_free(s.c[k]), 0);
    }
}

/* Four plain senders, four plain receivers, a select sending on all four
 * channels and a select receiving from all four, on channels of capacity
 * 0, 0, 2 and 3: all finish (a deadlock fails the run), and what was
 * received on each channel is exactly what was sent on it. */
TEST(selects_and_plain_operations_on_four_channels_all_finish)
{
    CHECK_EQ(test_run_env("MOTE_WORKERS", "4", select_stress_main, NULL), 0);
}

/* ---- TestSelectFairness ---- */

typedef struct fair {
    mote_chan *c1, *c2, *c3, *c4, *out, *done;
    mote_wg wg;
} fair;

static void fair_task(void *arg)
{
    fair *f = arg;
    for (;;) {
        char b = 0;
        mote_case in[] = {{f->c3, MOTE_RECV, &b, 0},
                          {f->c4, MOTE_RECV, &b, 0},
                          {f->c1, MOTE_RECV, &b, 0},
                          {f->c2, MOTE_RECV, &b, 0}};
        int r = mote_select(in, 4, -1);
        CHECK(r == 2 || r == 3);
        CHECK_EQ(in[r].result, 0);
        mote_case fwd[] = {{f->out, MOTE_SEND, &b, 0}, {f->done, MOTE_RECV, NULL, 0}};
        r = mote_select(fwd, 2, -1);
        if (r == 1) {
            CHECK_EQ(fwd[1].result, MOTE_ECLOSED);
            break;
        }
        CHECK_EQ(r, 0);
        CHECK_EQ(fwd[0].result, 0);
    }
    CHECK_EQ(mote_wg_done(&f->wg), 0);
}

/* A select over two always-ready buffered channels and two idle unbuffered
 * ones picks the two ready ones about equally often: within 10 standard
 * deviations of half, as Go allows (500 in 10000; always the same one
 * would miss by 5000). */
TEST_TASK(a_select_between_two_ready_and_two_idle_channels_is_fair)
{
    long trials = TEST_SCALE(10000, 4);
    fair f = {mk(1, (size_t)trials + 1),
              mk(1, (size_t)trials + 1),
              mk(1, 0),
              mk(1, 0),
              mk(1, 0),
              mk(0, 0),
              MOTE_WG_INIT};
    for (long i = 0; i < trials + 1; i++) {
        CHECK_EQ(mote_chan_send(f.c1, &(char){1}), 0);
        CHECK_EQ(mote_chan_send(f.c2, &(char){2}), 0);
    }
    CHECK_EQ(mote_wg_add(&f.wg, 1), 0);
    go(fair_task, &f);
    long cnt[3] = {0};
    for (long i = 0; i < trials; i++) {
        char b = 0;
        CHECK_EQ(mote_chan_recv(f.out, &b), 0);
        CHECK(b == 1 || b == 2);
        cnt[(int)b]++;
    }
    CHECK_EQ(mote_chan_close(f.done), 0);
    CHECK_EQ(mote_wg_wait(&f.wg), 0);
    double mean = trials * 0.5, sd = sqrt(trials * 0.25);
    printf("fairness: %ld from c1, %ld from c2 of %ld (limit +-%.0f)\n", cnt[1], cnt[2],
           trials, 10 * sd);
    CHECK(fabs((double)cnt[1] - mean) <= 10 * sd);
    mote_chan *all[] = {f.c1, f.c2, f.c3, f.c4, f.out, f.done};
    for (int i = 0; i < 6; i++)
        CHECK_EQ(mote_chan_free(all[i]), 0);
}

/* ---- TestChanSendInterface ---- */

typedef struct boxed {
    void *self;
    uint64_t tag;
    char text[40];
} boxed;

/* Polling sends into a full channel, one case or two, and a timed-out
 * select of two sends, leave the buffered value exactly as it was. */
TEST_TASK(sends_that_find_a_channel_full_leave_its_value_alone)
{
    mote_chan *c = mk(sizeof(boxed), 1);
    boxed m = {&m, 0x1111222233334444ull, "the value that was sent first"};
    boxed other = {&other, 0x5555666677778888ull, "a value that must not get in"};
    CHECK_EQ(mote_chan_send(c, &m), 0);
    mote_case one[] = {{c, MOTE_SEND, &m, 0}};
    CHECK_EQ(mote_select(one, 1, 0), -EAGAIN);
    mote_case two[] = {{c, MOTE_SEND, &m, 0}, {c, MOTE_SEND, &other, 0}};
    CHECK_EQ(mote_select(two, 2, 0), -EAGAIN);
    CHECK_EQ(mote_select(two, 2, 1 * MS), -ETIMEDOUT);
    CHECK_EQ(mote_chan_len(c), 1);
    boxed r;
    memset(&r, 0, sizeof r);
    CHECK_EQ(mote_chan_recv(c, &r), 0);
    CHECK(memcmp(&r, &m, sizeof r) == 0);
    CHECK_EQ(mote_chan_tryrecv(c, &r), -EAGAIN); /* nothing of the selects got in */
    CHECK_EQ(mote_chan_free(c), 0);
}

/* ---- TestPseudoRandomSend ---- */

typedef struct prs {
    mote_chan *c;
    mote_mutex m;
    int n;
    int l[1000];
} prs;

static void prs_receiver(void *arg)
{
    prs *x = arg;
    for (int i = 0; i < x->n; i++) {
        mote_yield();
        CHECK_EQ(mote_chan_recv(x->c, &x->l[i]), 0);
    }
    CHECK_EQ(mote_mutex_unlock(&x->m), 0); /* locked by the main task */
}

/* A select of two sends on one channel, one sending 1 and one 0, sends
 * both about equally often, unbuffered (it mostly waits for the receiver)
 * and buffered (it never waits): within 8 standard deviations of half. */
TEST_TASK(a_select_of_two_sends_on_one_channel_picks_either_at_random)
{
    static prs x;
    int n = TEST_SCALE(1000, 4);
    for (int pass = 0; pass < 2; pass++) {
        memset(&x, 0, sizeof x);
        x.c = mk(sizeof(int), pass ? (size_t)n : 0);
        x.m = (mote_mutex)MOTE_MUTEX_INIT;
        x.n = n;
        CHECK_EQ(mote_mutex_lock(&x.m), 0);
        go(prs_receiver, &x);
        int one = 1, zero = 0;
        for (int i = 0; i < n; i++) {
            mote_case cs[] = {{x.c, MOTE_SEND, &one, 0}, {x.c, MOTE_SEND, &zero, 0}};
            int r = mote_select(cs, 2, -1);
            CHECK(r == 0 || r == 1);
            CHECK_EQ(cs[r].result, 0);
        }
        CHECK_EQ(mote_mutex_lock(&x.m), 0); /* the receiver is done */
        CHECK_EQ(mote_mutex_unlock(&x.m), 0);
        int ones = 0;
        for (int i = 0; i < n; i++) {
            CHECK(x.l[i] == 0 || x.l[i] == 1);
            ones += x.l[i];
        }
        double sd = sqrt(n * 0.25);
        printf("cap %d: %d ones, %d zeros (limit +-%.0f)\n", pass ? n : 0, ones, n - ones,
               8 * sd);
        CHECK(fabs(ones - n * 0.5) <= 8 * sd);
        CHECK_EQ(mote_chan_free(x.c), 0);
    }
}

/* ---- TestMultiConsumer ---- */

enum { MC_WORKERS = 23 };
static const int mc_pn[10] = {2, 3, 7, 11, 13, 17, 19, 23, 27, 31};

typedef struct mc {
    mote_chan *q, *r;
    long niter;
    mote_wg wg;
} mc;

typedef struct mc_arg {
    mc *m;
    int w;
} mc_arg;

static void mc_worker(void *arg)
{
    mc_arg *a = arg;
    int v, r;
    while ((r = mote_chan_recv(a->m->q, &v)) == 0) {
        if (mc_pn[a->w % 10] == v) /* disturb the queue's order */
            mote_yield();
        CHECK_EQ(mote_chan_send(a->m->r, &v), 0);
    }
    CHECK_EQ(r, MOTE_ECLOSED);
    CHECK_EQ(mote_wg_done(&a->m->wg), 0);
}

static void mc_feeder(void *arg)
{
    mc *m = arg;
    for (long i = 0; i < m->niter; i++)
        CHECK_EQ(mote_chan_send(m->q, &mc_pn[i % 10]), 0);
    CHECK_EQ(mote_chan_close(m->q), 0);
    CHECK_EQ(mote_wg_wait(&m->wg), 0);
    CHECK_EQ(mote_chan_close(m->r), 0);
}

/* 23 workers drain a closed-when-done queue into a results channel that
 * the feeder closes once they all stopped: every item comes out once. */
TEST_TASK(workers_draining_a_closed_queue_forward_every_item_once)
{
    static mc m;
    static mc_arg args[MC_WORKERS];
    m = (mc){mk(sizeof(int), MC_WORKERS * 3), mk(sizeof(int), MC_WORKERS * 3),
             TEST_SCALE(271828, 20), MOTE_WG_INIT};
    long expect = 0;
    for (long i = 0; i < m.niter; i++)
        expect += mc_pn[i % 10];
    CHECK_EQ(mote_wg_add(&m.wg, MC_WORKERS), 0);
    for (int w = 0; w < MC_WORKERS; w++) {
        args[w] = (mc_arg){&m, w};
        go(mc_worker, &args[w]);
    }
    go(mc_feeder, &m);
    long n = 0, sum = 0;
    int v, r;
    while ((r = mote_chan_recv(m.r, &v)) == 0) {
        n++;
        sum += v;
    }
    CHECK_EQ(r, MOTE_ECLOSED);
    CHECK_EQ(n, m.niter);
    CHECK_EQ(sum, expect);
    CHECK_EQ(mote_chan_free(m.q), 0);
    CHECK_EQ(mote_chan_free(m.r), 0);
}

/* ---- TestChanSendBarrier, TestChanSendSelectBarrier ---- */

typedef struct reply {
    unsigned char *block; /* 1 KiB, every byte == (tag & 0xff) */
    uint64_t tag;
    int err;
} reply;

typedef struct request {
    mote_chan *ch, *done;
    uint64_t tag;
    int by_select;
} request;

static void responder(void *arg)
{
    request *q = arg; /* the requester's: read before the send, never after */
    mote_chan *ch = q->ch, *done = q->done;
    reply r = {malloc(1024), q->tag, 7};
    int by_select = q->by_select;
    CHECK(r.block != NULL);
    memset(r.block, (int)(r.tag & 0xff), 1024);
    if (by_select) {
        mote_case cs[] = {{ch, MOTE_SEND, &r, 0}, {done, MOTE_RECV, NULL, 0}};
        CHECK_EQ(mote_select(cs, 2, -1), 0);
        CHECK_EQ(cs[0].result, 0);
    } else {
        CHECK_EQ(mote_chan_send(ch, &r), 0);
    }
}

typedef struct client {
    long inner;
    int id;
    mote_wg *wg;
} client;

static void client_task(void *arg)
{
    client *cl = arg;
    for (long j = 0; j < cl->inner; j++) {
        request q = {mk(sizeof(reply), 0), mk(0, 0),
                     ((uint64_t)cl->id << 32) | (uint64_t)j, (int)((j + cl->id) % 2)};
        go(responder, &q);
        reply r = {NULL, 0, 0};
        CHECK_EQ(mote_chan_recv(q.ch, &r), 0);
        /* free both at once: a select may still hold them a moment */
        CHECK_EQ(mote_chan_free(q.ch), 0);
        CHECK_EQ(mote_chan_free(q.done), 0);
        mote_yield();
        CHECK_EQ(r.tag, q.tag);
        CHECK_EQ(r.err, 7);
        CHECK(r.block != NULL);
        for (int i = 0; i < 1024; i++)
            CHECK_EQ(r.block[i], q.tag & 0xff);
        free(r.block);
    }
    CHECK_EQ(mote_wg_done(cl->wg), 0);
}

/* Many request/response pairs, each on fresh channels: a response sent by
 * a plain send or by a select arrives whole (a pointer and a tag), and the
 * requester may free both channels as soon as it has it. */
TEST_TASK(responses_sent_plain_or_by_select_arrive_whole_on_channels_freed_at_once)
{
    enum { OUTER = 10 };
    static client cls[OUTER];
    mote_wg wg = MOTE_WG_INIT;
    CHECK_EQ(mote_wg_add(&wg, OUTER), 0);
    for (int i = 0; i < OUTER; i++) {
        cls[i] = (client){TEST_SCALE(20000, 1000), i, &wg};
        go(client_task, &cls[i]);
    }
    CHECK_EQ(mote_wg_wait(&wg), 0);
}

/* ---- TestSelectDuplicateChannel ---- */

typedef struct dupsel {
    mote_chan *c, *d, *e, *fin;
    int op; /* the duplicated cases' operation */
    int chosen, fin_value;
    int b_value;
    mote_wg wg;
} dupsel;

static void dup_a(void *arg)
{
    dupsel *x = arg;
    int in0 = -1, in1 = -1, dv = -1, out = 99;
    mote_case cs[] = {{x->c, x->op, x->op == MOTE_SEND ? &out : &in0, 0},
                      {x->c, x->op, x->op == MOTE_SEND ? &out : &in1, 0},
                      {x->d, MOTE_RECV, &dv, 0}};
    x->chosen = mote_select(cs, 3, -1);
    CHECK_EQ(cs[2].result, 0);
    CHECK_EQ(dv, 7);
    CHECK_EQ(mote_chan_send(x->e, &(int){9}), 0);
    /* parked again elsewhere: a record left behind on c would now be
     * claimable, and c's next partner would wake this task instead */
    CHECK_EQ(mote_chan_recv(x->fin, &x->fin_value), 0);
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

static void dup_b(void *arg)
{
    dupsel *x = arg;
    if (x->op == MOTE_RECV)
        CHECK_EQ(mote_chan_recv(x->c, &x->b_value), 0);
    else
        CHECK_EQ(mote_chan_send(x->c, &(int){8}), 0);
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

/* A select with two cases on c (and one on d) queues twice on c, ahead of
 * a plain task B on c.  d fires; the select must take both its records
 * off c, so c's next partner meets B, not the select's task. */
TEST_TASK(a_select_queued_twice_on_a_channel_leaves_it_clean_for_the_next_task)
{
    for (int round = 0; round < 2 * TEST_SCALE(20, 4); round++) {
        dupsel x = {mk(sizeof(int), 0),
                    mk(sizeof(int), 0),
                    mk(sizeof(int), 1), /* e: A never waits to send on it */
                    mk(sizeof(int), 0),
                    round % 2 ? MOTE_SEND : MOTE_RECV,
                    -1,
                    -1,
                    -1,
                    MOTE_WG_INIT};
        CHECK_EQ(mote_wg_add(&x.wg, 2), 0);
        go(dup_a, &x);
        test_wait_blocked(1); /* A is queued on c first */
        go(dup_b, &x);
        test_wait_blocked(2); /* then B */
        CHECK_EQ(mote_chan_send(x.d, &(int){7}), 0);
        int e = 0;
        CHECK_EQ(mote_chan_recv(x.e, &e), 0);
        CHECK_EQ(e, 9);
        CHECK_EQ(x.chosen, 2);
        test_wait_blocked(2); /* A on fin (its only wait), B still on c */
        if (x.op == MOTE_RECV) {
            CHECK_EQ(mote_chan_send(x.c, &(int){8}), 0);
        } else {
            int v = 0;
            CHECK_EQ(mote_chan_recv(x.c, &v), 0);
            CHECK_EQ(v, 8); /* B's value, not the select's 99 */
        }
        CHECK_EQ(mote_chan_send(x.fin, &(int){5}), 0);
        CHECK_EQ(mote_wg_wait(&x.wg), 0);
        CHECK_EQ(x.fin_value, 5);
        if (x.op == MOTE_RECV)
            CHECK_EQ(x.b_value, 8);
        mote_chan *all[] = {x.c, x.d, x.e, x.fin};
        for (int i = 0; i < 4; i++)
            CHECK_EQ(mote_chan_free(all[i]), 0);
    }
}

static mote_chan *twice_ch;
static void *twice_scribble[64];

static void twice_selector(void *arg)
{
    int *result = arg;
    long a = 1, b = 2;
    mote_case cs[] = {{twice_ch, MOTE_RECV, &a, 0}, {twice_ch, MOTE_RECV, &b, 0}};
    int r = mote_select(cs, 2, -1);
    CHECK(r == 0 || r == 1);
    CHECK_EQ(cs[r].result, MOTE_ECLOSED);
    CHECK_EQ(r == 0 ? a : b, 0);
    CHECK_EQ(r == 0 ? b : a, r == 0 ? 2 : 1); /* the other case untouched */
    store(result, r);
}

static void twice_main(void *arg)
{
    (void)arg;
    for (int round = 0; round < TEST_SCALE(200, 10); round++) {
        twice_ch = mk(sizeof(long), 0);
        int r = -1;
        go(twice_selector, &r);
        test_wait_blocked(1);
        CHECK_EQ(mote_chan_close(twice_ch), 0);
        CHECK_EQ(mote_chan_free(twice_ch), 0); /* the select still holds it */
        for (int i = 0; i < 64; i++) {         /* blocks of a channel's size, reused */
            CHECK((twice_scribble[i] = mote_malloc(16 * (size_t)(i % 16 + 1))) != NULL);
            memset(twice_scribble[i], 0x7f, 16 * (size_t)(i % 16 + 1));
        }
        WAIT_UNTIL(load(&r) >= 0, 60);
        for (int i = 0; i < 64; i++)
            mote_free(twice_scribble[i]);
    }
}

/* The same select, queued twice on one channel, is woken by a close, and
 * the closer frees the channel at once and reuses memory (one worker: the
 * same thread cache): the select's second record keeps the channel alive
 * until it has taken both records off. */
TEST(a_select_queued_twice_on_a_channel_survives_its_close_and_free)
{
    CHECK_EQ(test_run_env("MOTE_WORKERS", "1", twice_main, NULL), 0);
}

/* ---- test/ken/chan.go ---- */

enum { KEN_END = 10000 };

typedef struct ken {
    mote_chan *c[4];
    long tots, totr;
    mote_wg wg;
} ken;

typedef struct ken_arg {
    ken *k;
    int i;
    uint64_t seed;
} ken_arg;

/* The value after v on its channel's sequence X00, X01, ..., X75. */
static int ken_next(int v, int expected)
{
    CHECK_EQ(v, expected);
    return v % 100 == 75 ? KEN_END : v + 1;
}

static void ken_yields(uint64_t *seed, int most)
{
    for (int r = (int)(test_rnd(seed) % (uint64_t)most); r >= 0; r--)
        mote_yield();
}

static void ken_send(void *arg)
{
    ken_arg *a = arg;
    for (int v = (a->i + 1) * 100; v != KEN_END;) {
        ken_yields(&a->seed, 10);
        CHECK_EQ(mote_chan_send(a->k->c[a->i], &v), 0);
        add(&a->k->tots, 1);
        v = ken_next(v, v);
    }
    CHECK_EQ(mote_wg_done(&a->k->wg), 0);
}

static void ken_recv(void *arg)
{
    ken_arg *a = arg;
    int expect = (a->i + 1) * 100;
    for (int i = 0; i < 100 && expect != KEN_END; i++) {
        ken_yields(&a->seed, 10);
        int v = -1;
        CHECK_EQ(mote_chan_recv(a->k->c[a->i], &v), 0);
        add(&a->k->totr, 1);
        expect = ken_next(v, expect);
    }
    CHECK_EQ(expect, KEN_END);
    CHECK_EQ(mote_wg_done(&a->k->wg), 0);
}

static void ken_selsend(void *arg)
{
    ken_arg *a = arg;
    int v[4], running = 4;
    mote_chan *live[4];
    for (int i = 0; i < 4; i++) {
        v[i] = (i + 1) * 100;
        live[i] = a->k->c[i];
    }
    while (running > 0) {
        ken_yields(&a->seed, 5);
        mote_case cs[4];
        for (int i = 0; i < 4; i++)
            cs[i] = (mote_case){live[i], MOTE_SEND, &v[i], 0};
        int r = mote_select(cs, 4, -1);
        CHECK(r >= 0 && r < 4);
        CHECK_EQ(cs[r].result, 0);
        v[r] = ken_next(v[r], v[r]);
        if (v[r] == KEN_END) {
            live[r] = NULL;
            running--;
        }
        add(&a->k->tots, 1);
    }
    CHECK_EQ(mote_wg_done(&a->k->wg), 0);
}

static void ken_selrecv(void *arg)
{
    ken_arg *a = arg;
    int expect[4], running = 4;
    for (int i = 0; i < 4; i++)
        expect[i] = (i + 1) * 100;
    while (running > 0) {
        ken_yields(&a->seed, 5);
        int v = -1;
        mote_case cs[4];
        for (int i = 0; i < 4; i++)
            cs[i] = (mote_case){a->k->c[i], MOTE_RECV, &v, 0};
        int r = mote_select(cs, 4, -1);
        CHECK(r >= 0 && r < 4);
        CHECK_EQ(cs[r].result, 0);
        expect[r] = ken_next(v, expect[r]);
        if (expect[r] == KEN_END)
            running--;
        add(&a->k->totr, 1);
    }
    CHECK_EQ(mote_wg_done(&a->k->wg), 0);
}

/* Four channels each carry X00..X75 in order: from plain senders to plain
 * receivers, from plain senders to one receiving select, and from one
 * sending select to plain receivers, with random yields between
 * operations, at capacities 0, 1, 10 and 100; 3648 values in all. */
TEST_TASK(plain_and_select_senders_and_receivers_keep_each_channel_in_order)
{
    static ken k;
    static ken_arg args[9];
    static const size_t caps[4] = {0, 1, 10, 100};
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    memset(&k, 0, sizeof k);
    int na = 0;
    for (int ci = 0; ci < 4; ci++) {
        for (int test = 0; test < 3; test++) {
            for (int i = 0; i < 4; i++)
                k.c[i] = mk(sizeof(int), caps[ci]);
            na = 0;
            CHECK_EQ(mote_wg_add(&k.wg, test == 0 ? 8 : 5), 0);
            for (int i = 0; i < 4; i++) {
                args[na] = (ken_arg){&k, i, test_rnd(&seed)};
                go(test == 2 ? ken_recv : ken_send, &args[na++]);
                if (test == 0) {
                    args[na] = (ken_arg){&k, i, test_rnd(&seed)};
                    go(ken_recv, &args[na++]);
                }
            }
            if (test > 0) {
                args[na] = (ken_arg){&k, 0, test_rnd(&seed)};
                go(test == 1 ? ken_selrecv : ken_selsend, &args[na++]);
            }
            CHECK_EQ(mote_wg_wait(&k.wg), 0);
            CHECK_EQ(k.tots, k.totr);
            for (int i = 0; i < 4; i++) {
                CHECK_EQ(mote_chan_len(k.c[i]), 0);
                CHECK_EQ(mote_chan_free(k.c[i]), 0);
            }
        }
    }
    CHECK_EQ(k.tots, 3648);
    CHECK_EQ(k.totr, 3648);
}

/* ---- test/ken/chan1.go ---- */

enum { K1_N = 1000, K1_M = 10 };

typedef struct ken1 {
    mote_chan *c;
    int h[K1_N]; /* plain: 0 unsent, 1 sent, 2 received */
    mote_wg wg;
} ken1;

static void ken1_receiver(void *arg)
{
    ken1 *k = arg;
    for (;;) {
        int r = -1;
        mote_case cs[] = {{k->c, MOTE_RECV, &r, 0}};
        CHECK_EQ(mote_select(cs, 1, -1), 0);
        if (cs[0].result == MOTE_ECLOSED)
            break;
        CHECK(r >= 0 && r < K1_N);
        if (k->h[r] != 1) {
            fprintf(stderr, "value %d received in state %d\n", r, k->h[r]);
            CHECK(0);
        }
        k->h[r] = 2;
    }
    CHECK_EQ(mote_wg_done(&k->wg), 0);
}

/* Ten receivers, each in a select, share a channel of capacity 2: each
 * value is received once, and only after its sender marked it sent (the
 * marks are plain memory, ordered by the channel). */
TEST_TASK(select_receivers_take_each_value_once_after_it_was_sent)
{
    static ken1 k;
    memset(&k, 0, sizeof k);
    k.c = mk(sizeof(int), 2);
    CHECK_EQ(mote_wg_add(&k.wg, K1_M), 0);
    for (int m = 0; m < K1_M; m++) {
        go(ken1_receiver, &k);
        mote_yield();
    }
    mote_yield();
    for (int n = 0; n < K1_N; n++) {
        CHECK_EQ(k.h[n], 0);
        k.h[n] = 1;
        CHECK_EQ(mote_chan_send(k.c, &n), 0);
    }
    CHECK_EQ(mote_chan_close(k.c), 0);
    CHECK_EQ(mote_wg_wait(&k.wg), 0);
    for (int n = 0; n < K1_N; n++)
        CHECK_EQ(k.h[n], 2);
    CHECK_EQ(mote_chan_free(k.c), 0);
}

/* ---- runtime/race/testdata/chan_test.go: the order channels give ----
 * The data below is plain memory: under ThreadSanitizer, an access that
 * the channel operation does not order is reported and fails the case;
 * elsewhere the values are checked. */

static int mm_data;

typedef struct mm {
    mote_chan *c;
    int *box;
    mote_wg wg;
} mm;

static void mm_write_then_send(void *arg)
{
    mm *x = arg;
    mm_data = 1;
    CHECK_EQ(mote_chan_send(x->c, &(int){0}), 0);
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

static void mm_send_then_write(void *arg)
{
    mm *x = arg;
    CHECK_EQ(mote_chan_send(x->c, &(int){0}), 0);
    mm_data = 2;
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

static void mm_blocked_sender(void *arg)
{
    mm *x = arg;
    *x->box = 42;
    CHECK_EQ(mote_chan_send(x->c, &x->box), 0); /* the buffer is full */
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

/* A send is ordered before the receive that takes its value (unbuffered
 * and buffered); an unbuffered receive is ordered before the send it
 * pairs with returns; a sender parked on a full channel is ordered before
 * the receive that finally takes its value, plain or in a select. */
TEST_TASK(a_send_and_its_receive_order_the_memory_around_them)
{
    int rounds = TEST_SCALE(300, 10);
    mote_chan *never_ready = mk(sizeof(int *), 0);
    for (int i = 0; i < rounds; i++) {
        for (size_t cap = 0; cap <= 10; cap += 10) { /* NoRaceChanSync, Async */
            mm x = {mk(sizeof(int), cap), NULL, MOTE_WG_INIT};
            CHECK_EQ(mote_wg_add(&x.wg, 1), 0);
            go(mm_write_then_send, &x);
            CHECK_EQ(mote_chan_recv(x.c, NULL), 0);
            CHECK_EQ(mm_data, 1);
            mm_data = 2;
            CHECK_EQ(mote_wg_wait(&x.wg), 0);
            CHECK_EQ(mote_chan_free(x.c), 0);
        }
        { /* NoRaceChanSyncRev */
            mm x = {mk(sizeof(int), 0), NULL, MOTE_WG_INIT};
            CHECK_EQ(mote_wg_add(&x.wg, 1), 0);
            go(mm_send_then_write, &x);
            mm_data = 1;
            CHECK_EQ(mote_chan_recv(x.c, NULL), 0);
            CHECK_EQ(mote_wg_wait(&x.wg), 0);
            CHECK_EQ(mm_data, 2);
            CHECK_EQ(mote_chan_free(x.c), 0);
        }
        for (int sel = 0; sel < 2; sel++) { /* NoRaceBlocked(Select)SendSync */
            int *box = malloc(sizeof *box);
            CHECK(box != NULL);
            mm x = {mk(sizeof(int *), 1), box, MOTE_WG_INIT};
            int *filler = NULL, *p = NULL;
            CHECK_EQ(mote_chan_send(x.c, &filler), 0);
            CHECK_EQ(mote_wg_add(&x.wg, 1), 0);
            go(mm_blocked_sender, &x);
            if (i % 8 == 0)
                test_wait_blocked(1); /* most rounds leave it to chance */
            CHECK_EQ(mote_chan_recv(x.c, &p), 0);
            CHECK(p == NULL);
            if (sel) {
                mote_case cs[] = {{x.c, MOTE_RECV, &p, 0},
                                  {never_ready, MOTE_RECV, NULL, 0}};
                CHECK_EQ(mote_select(cs, 2, -1), 0);
            } else {
                CHECK_EQ(mote_chan_recv(x.c, &p), 0);
            }
            CHECK(p == box);
            CHECK_EQ(*p, 42);
            CHECK_EQ(mote_wg_wait(&x.wg), 0);
            free(box);
            CHECK_EQ(mote_chan_free(x.c), 0);
        }
    }
    CHECK_EQ(mote_chan_free(never_ready), 0);
}

static void mm_write_then_close(void *arg)
{
    mm *x = arg;
    mm_data = 1;
    CHECK_EQ(mote_chan_close(x->c), 0);
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

/* A close is ordered before a receive that returns because of it:
 * unbuffered and buffered, a plain receive, a select of one case and a
 * select of two (NoRaceChan{Sync,Async}CloseRecv*). */
TEST_TASK(a_close_is_ordered_before_a_receive_that_sees_it)
{
    int rounds = TEST_SCALE(300, 10);
    mote_chan *never_ready = mk(sizeof(int), 0);
    for (int i = 0; i < rounds; i++) {
        for (int way = 0; way < 6; way++) {
            mm x = {mk(sizeof(int), way % 2 ? 10 : 0), NULL, MOTE_WG_INIT};
            CHECK_EQ(mote_wg_add(&x.wg, 1), 0);
            go(mm_write_then_close, &x);
            int v = 3, r;
            if (way / 2 == 0) {
                r = mote_chan_recv(x.c, &v);
            } else {
                mote_case cs[] = {{x.c, MOTE_RECV, &v, 0},
                                  {never_ready, MOTE_RECV, NULL, 0}};
                r = mote_select(cs, way / 2 == 1 ? 1 : 2, -1);
                CHECK_EQ(r, 0);
                r = cs[0].result;
            }
            CHECK_EQ(r, MOTE_ECLOSED);
            CHECK_EQ(v, 0);
            CHECK_EQ(mm_data, 1);
            mm_data = 2;
            CHECK_EQ(mote_wg_wait(&x.wg), 0);
            CHECK_EQ(mote_chan_free(x.c), 0);
        }
    }
    CHECK_EQ(mote_chan_free(never_ready), 0);
}

static void *mm_thread_closer(void *arg)
{
    mm_data = 42;
    CHECK_EQ(mote_chan_close(arg), 0);
    return NULL;
}

/* The same for a receive that does not wait: a try receive, or a select
 * that polls, which finds the channel closed (and drained) must see what
 * the closer wrote before the close, as Go's non-blocking receive does.
 * The closer is a plain thread, so the two sides run on two threads. */
TEST_TASK(a_close_is_ordered_before_a_poll_that_sees_it)
{
    int rounds = TEST_SCALE(40, 4);
    mote_chan *never_ready = mk(sizeof(int), 0);
    for (int i = 0; i < rounds; i++) {
        for (int way = 0; way < 6; way++) {
            mote_chan *c = mk(sizeof(int), way % 2 ? 10 : 0);
            mm_data = 0;
            pthread_t t;
            CHECK_EQ(pthread_create(&t, NULL, mm_thread_closer, c), 0);
            int v, r;
            for (;;) {
                v = 3;
                if (way / 2 == 0) {
                    r = mote_chan_tryrecv(c, &v);
                } else {
                    mote_case cs[] = {{c, MOTE_RECV, &v, 0},
                                      {never_ready, MOTE_RECV, NULL, 0}};
                    r = mote_select(cs, way / 2 == 1 ? 1 : 2, 0);
                    if (r >= 0) {
                        CHECK_EQ(r, 0);
                        r = cs[0].result;
                    }
                }
                if (r != -EAGAIN)
                    break;
                mote_sleep(20 * US);
            }
            CHECK_EQ(r, MOTE_ECLOSED);
            CHECK_EQ(v, 0);
            CHECK_EQ(mm_data, 42); /* ordered by the close alone */
            CHECK_EQ(pthread_join(t, NULL), 0);
            CHECK_EQ(mote_chan_free(c), 0);
        }
    }
    CHECK_EQ(mote_chan_free(never_ready), 0);
}

typedef struct sem {
    mote_chan *mtx, *aux;
    long data; /* plain: the channel of capacity 1 guards it */
    long iters;
    int by_select;
    mote_wg wg;
} sem;

static void sem_acquire(sem *s)
{
    char t = 1;
    if (!s->by_select) {
        CHECK_EQ(mote_chan_send(s->mtx, &t), 0);
        return;
    }
    mote_case cs[] = {{s->mtx, MOTE_SEND, &t, 0}, {s->aux, MOTE_RECV, NULL, 0}};
    CHECK_EQ(mote_select(cs, 2, -1), 0);
}

static void sem_release(sem *s)
{
    if (!s->by_select) {
        CHECK_EQ(mote_chan_recv(s->mtx, NULL), 0);
        return;
    }
    mote_case cs[] = {{s->mtx, MOTE_RECV, NULL, 0}, {s->aux, MOTE_RECV, NULL, 0}};
    CHECK_EQ(mote_select(cs, 2, -1), 0);
}

static void sem_task(void *arg)
{
    sem *s = arg;
    for (long i = 0; i < s->iters; i++) {
        sem_acquire(s);
        s->data++;
        if (i % 16 == 0)
            mote_yield();
        sem_release(s);
    }
    CHECK_EQ(mote_wg_done(&s->wg), 0);
}

typedef struct slot {
    mote_chan *gate;
    int *cell;
} slot;

static void slot_task(void *arg)
{
    slot *s = arg;
    *s->cell = 42;
    CHECK_EQ(mote_chan_recv(s->gate, NULL), 0);
}

/* The k-th receive from a channel of capacity C is ordered before the
 * (k+C)-th send completes: a channel of capacity 1 works as a mutex,
 * plainly or through selects (NoRaceChanMutex, NoRaceSelectMutex), and
 * one of capacity N/2 as a wait group (NoRaceChanWaitGroup). */
TEST_TASK(a_channel_of_capacity_one_orders_memory_as_a_mutex_does)
{
    for (int by_select = 0; by_select < 2; by_select++) {
        static sem s;
        memset(&s, 0, sizeof s);
        s.mtx = mk(1, 1);
        s.aux = mk(0, 0);
        s.iters = TEST_SCALE(20000, 20);
        s.by_select = by_select;
        enum { T = 4 };
        CHECK_EQ(mote_wg_add(&s.wg, T), 0);
        for (int i = 0; i < T; i++)
            go(sem_task, &s);
        CHECK_EQ(mote_wg_wait(&s.wg), 0);
        CHECK_EQ(s.data, T * s.iters);
        CHECK_EQ(mote_chan_len(s.mtx), 0);
        CHECK_EQ(mote_chan_free(s.mtx), 0);
        CHECK_EQ(mote_chan_free(s.aux), 0);
    }
    enum { N = 10 };
    for (int round = 0; round < TEST_SCALE(100, 10); round++) {
        static int cells[N];
        static slot slots[N];
        mote_chan *gate = mk(0, N / 2);
        memset(cells, 0, sizeof cells);
        for (int i = 0; i < N; i++) {
            CHECK_EQ(mote_chan_send(gate, NULL), 0);
            slots[i] = (slot){gate, &cells[i]};
            go(slot_task, &slots[i]);
        }
        for (int i = 0; i < N / 2; i++) /* every slot task has received */
            CHECK_EQ(mote_chan_send(gate, NULL), 0);
        for (int i = 0; i < N; i++)
            CHECK_EQ(cells[i], 42);
        CHECK_EQ(mote_chan_len(gate), N / 2);
        CHECK_EQ(mote_chan_free(gate), 0);
    }
}

/* ---- src/sync/waitgroup_test.go ---- */

typedef struct barrier {
    mote_wg wg1, wg2;
    mote_chan *exited;
} barrier;

static void barrier_task(void *arg)
{
    barrier *b = arg;
    CHECK_EQ(mote_wg_done(&b->wg1), 0);
    CHECK_EQ(mote_wg_wait(&b->wg2), 0);
    CHECK_EQ(mote_chan_send(b->exited, &(int){1}), 0);
}

/* TestWaitGroup: two wait groups used as a barrier eight times over; no
 * task passes wg2 before its last done, and all pass after it.  Then
 * TestWaitGroupMisuse: a done below zero is -EINVAL and changes nothing. */
TEST_TASK(a_wait_group_reused_as_a_barrier_releases_nobody_early)
{
    enum { N = 16 };
    static barrier b;
    b = (barrier){MOTE_WG_INIT, MOTE_WG_INIT, mk(sizeof(int), N)};
    for (int round = 0; round < 8; round++) {
        CHECK_EQ(mote_wg_add(&b.wg1, N), 0);
        CHECK_EQ(mote_wg_add(&b.wg2, N), 0);
        for (int i = 0; i < N; i++)
            go(barrier_task, &b);
        CHECK_EQ(mote_wg_wait(&b.wg1), 0);
        test_wait_blocked(N); /* every task waits on wg2 */
        for (int i = 0; i < N; i++) {
            if (i == N - 1) { /* give an early release time to show */
                mote_sleep(1 * MS);
                CHECK_EQ(blocked(), N);
            }
            CHECK_EQ(mote_chan_tryrecv(b.exited, NULL), -EAGAIN);
            CHECK_EQ(mote_wg_done(&b.wg2), 0);
        }
        for (int i = 0; i < N; i++)
            CHECK_EQ(mote_chan_recv(b.exited, NULL), 0);
    }
    CHECK_EQ(mote_wg_done(&b.wg1), -EINVAL);
    CHECK_EQ(mote_wg_add(&b.wg2, -1), -EINVAL);
    CHECK_EQ(mote_wg_wait(&b.wg1), 0);
    CHECK_EQ(mote_wg_wait(&b.wg2), 0);
    CHECK_EQ(mote_wg_add(&b.wg1, 1), 0); /* still usable */
    CHECK_EQ(mote_wg_done(&b.wg1), 0);
    CHECK_EQ(mote_wg_done(&b.wg1), -EINVAL);
    CHECK_EQ(mote_chan_free(b.exited), 0);
}

typedef struct wg_reuse {
    mote_wg *wg;
    mote_chan *done;
    int n;
} wg_reuse;

static void wg_done_task(void *arg) { CHECK_EQ(mote_wg_done(arg), 0); }

static void wg_add_done_task(void *arg)
{
    wg_reuse *x = arg;
    CHECK_EQ(mote_wg_add(x->wg, 1), 0); /* Go: Add racing Wait */
    CHECK_EQ(mote_wg_done(x->wg), 0);
    CHECK_EQ(mote_chan_send(x->done, &(int){1}), 0);
}

static void wg_wait_task(void *arg)
{
    wg_reuse *x = arg;
    CHECK_EQ(mote_wg_wait(x->wg), 0);
    CHECK_EQ(mote_chan_send(x->done, &(int){1}), 0);
}

static void wg_rewait_task(void *arg)
{
    wg_reuse *x = arg;
    CHECK_EQ(mote_wg_wait(x->wg), 0);
    CHECK_EQ(mote_wg_add(x->wg, 1), 0); /* Go: reused before Wait returned */
    go(wg_done_task, x->wg);
    CHECK_EQ(mote_wg_wait(x->wg), 0);
    CHECK_EQ(mote_chan_send(x->done, &(int){1}), 0);
}

static void wg_count_task(void *arg)
{
    wg_reuse *x = arg;
    __atomic_add_fetch(&x->n, 1, __ATOMIC_SEQ_CST);
    CHECK_EQ(mote_wg_done(x->wg), 0);
}

/* TestWaitGroupRace: wait returns only after both dones (never early),
 * and the group may be freed the moment it returns.  TestWaitGroupMisuse2
 * and 3, which Go panics on and mote allows: an add racing a wait, and a
 * group reused while a wait on it is still returning; every wait returns
 * (a lost wake-up is a deadlock). */
TEST_TASK(a_wait_group_freed_or_reused_as_soon_as_wait_returns_stays_exact)
{
    long rounds = TEST_SCALE(2000, 100);
    mote_chan *done = mk(sizeof(int), 2);
    for (long i = 0; i < rounds; i++) {
        mote_wg *wg = malloc(sizeof *wg);
        CHECK(wg != NULL);
        *wg = (mote_wg)MOTE_WG_INIT;
        wg_reuse x = {wg, done, 0};
        CHECK_EQ(mote_wg_add(wg, 1), 0);
        go(wg_count_task, &x);
        CHECK_EQ(mote_wg_add(wg, 1), 0);
        go(wg_count_task, &x);
        CHECK_EQ(mote_wg_wait(wg), 0);
        CHECK_EQ(load(&x.n), 2);

        CHECK_EQ(mote_wg_add(wg, 1), 0); /* Misuse2 */
        go(wg_wait_task, &x);
        go(wg_add_done_task, &x);
        CHECK_EQ(mote_wg_done(wg), 0);
        CHECK_EQ(mote_chan_recv(done, NULL), 0);
        CHECK_EQ(mote_chan_recv(done, NULL), 0);

        CHECK_EQ(mote_wg_add(wg, 1), 0); /* Misuse3 */
        go(wg_done_task, wg);
        go(wg_rewait_task, &x);
        CHECK_EQ(mote_wg_wait(wg), 0);
        CHECK_EQ(mote_chan_recv(done, NULL), 0);
        free(wg); /* whoever changed it last is done with it */
    }
    CHECK_EQ(mote_chan_free(done), 0);
}

typedef struct wg_gen {
    mote_wg wg, fin;
    int released;
} wg_gen;

static void wg_gen_waiter(void *arg)
{
    wg_gen *g = arg;
    CHECK_EQ(mote_wg_wait(&g->wg), 0);
    __atomic_add_fetch(&g->released, 1, __ATOMIC_SEQ_CST);
    CHECK_EQ(mote_wg_done(&g->fin), 0);
}

/* Waiters parked when the counter reaches zero are all released, even
 * though the same task adds to it again before any of them runs; a
 * waiter that comes after that add waits for the next zero. */
TEST_TASK(waiters_released_at_zero_return_though_the_count_rises_again_at_once)
{
    enum { N = 8 };
    static wg_gen g;
    for (int round = 0; round < TEST_SCALE(50, 5); round++) {
        g = (wg_gen){MOTE_WG_INIT, MOTE_WG_INIT, 0};
        CHECK_EQ(mote_wg_add(&g.wg, 1), 0);
        CHECK_EQ(mote_wg_add(&g.fin, N + 1), 0);
        for (int i = 0; i < N; i++)
            go(wg_gen_waiter, &g);
        test_wait_blocked(N);
        CHECK_EQ(mote_wg_done(&g.wg), 0);
        CHECK_EQ(mote_wg_add(&g.wg, 1), 0); /* before any waiter ran */
        WAIT_UNTIL(load(&g.released) == N, 60);
        go(wg_gen_waiter, &g);
        test_wait_blocked(1);
        mote_sleep(1 * MS);
        CHECK_EQ(load(&g.released), N);
        CHECK_EQ(mote_wg_done(&g.wg), 0);
        CHECK_EQ(mote_wg_wait(&g.fin), 0);
        CHECK_EQ(g.released, N + 1);
    }
}

/* ---- src/sync/mutex_test.go: TestMutexFairness ---- */

typedef struct mfair {
    mote_mutex mu;
    mote_chan *stop, *done;
    mote_wg wg;
} mfair;

static void mfair_hog(void *arg)
{
    mfair *f = arg;
    for (;;) {
        CHECK_EQ(mote_mutex_lock(&f->mu), 0);
        mote_sleep(100 * US); /* parked, holding it */
        CHECK_EQ(mote_mutex_unlock(&f->mu), 0);
        if (mote_chan_tryrecv(f->stop, NULL) == MOTE_ECLOSED)
            break;
    }
    CHECK_EQ(mote_wg_done(&f->wg), 0);
}

static void mfair_other(void *arg)
{
    mfair *f = arg;
    for (int i = 0; i < 10; i++) {
        mote_sleep(100 * US);
        CHECK_EQ(mote_mutex_lock(&f->mu), 0);
        CHECK_EQ(mote_mutex_unlock(&f->mu), 0);
    }
    CHECK_EQ(mote_chan_send(f->done, NULL), 0);
    CHECK_EQ(mote_wg_done(&f->wg), 0);
}

/* A task that holds the mutex almost all the time (it sleeps holding it
 * and takes it back at once) cannot keep another out: the other gets it
 * ten times.  The 60 s bound only tells starvation from a slow machine. */
TEST_TASK(a_mutex_held_almost_always_still_lets_a_waiter_in)
{
    static mfair f;
    f = (mfair){MOTE_MUTEX_INIT, mk(0, 0), mk(0, 0), MOTE_WG_INIT};
    CHECK_EQ(mote_wg_add(&f.wg, 2), 0);
    go(mfair_hog, &f);
    go(mfair_other, &f);
    int64_t t0 = mote_now();
    mote_case cs[] = {{f.done, MOTE_RECV, NULL, 0}};
    int r = mote_select(cs, 1, 60000 * MS);
    printf("the waiter got the mutex 10 times in %.1f ms\n", (mote_now() - t0) / 1e6);
    CHECK_EQ(r, 0);
    CHECK_EQ(mote_chan_close(f.stop), 0);
    CHECK_EQ(mote_wg_wait(&f.wg), 0);
    CHECK_EQ(mote_chan_free(f.stop), 0);
    CHECK_EQ(mote_chan_free(f.done), 0);
}

/* ---- src/sync/cond_test.go ---- */

typedef struct gens {
    mote_mutex m;
    mote_cond c;
    mote_chan *running, *awake;
} gens;

typedef struct gens_arg {
    gens *g;
    int i;
} gens_arg;

static void gens_waiter(void *arg)
{
    gens_arg *a = arg;
    gens *g = a->g;
    CHECK_EQ(mote_mutex_lock(&g->m), 0);
    CHECK_EQ(mote_chan_send(g->running, &a->i), 0);
    CHECK_EQ(mote_cond_wait(&g->c, &g->m), 0);
    CHECK_EQ(mote_chan_send(g->awake, &a->i), 0);
    CHECK_EQ(mote_mutex_unlock(&g->m), 0);
}

/* TestCondSignalGenerations: waiters start one at a time, and each signal
 * is sent when exactly one task waits; the task it wakes is that one, so
 * they wake in the order they started. */
TEST_TASK(a_cond_signal_wakes_the_task_that_waited_when_it_was_sent)
{
    enum { N = 100 };
    static gens g;
    static gens_arg args[N];
    g = (gens){MOTE_MUTEX_INIT, MOTE_COND_INIT, mk(sizeof(int), N), mk(sizeof(int), N)};
    for (int i = 0; i < N; i++) {
        args[i] = (gens_arg){&g, i};
        go(gens_waiter, &args[i]);
        int a = -1;
        if (i > 0) {
            CHECK_EQ(mote_chan_recv(g.awake, &a), 0);
            CHECK_EQ(a, i - 1);
        }
        CHECK_EQ(mote_chan_recv(g.running, &a), 0);
        CHECK_EQ(a, i);
        CHECK_EQ(mote_mutex_lock(&g.m), 0); /* so task i waits on c */
        CHECK_EQ(mote_cond_signal(&g.c), 0);
        CHECK_EQ(mote_mutex_unlock(&g.m), 0);
    }
    int a = -1;
    CHECK_EQ(mote_chan_recv(g.awake, &a), 0);
    CHECK_EQ(a, N - 1);
    CHECK_EQ(mote_chan_free(g.running), 0);
    CHECK_EQ(mote_chan_free(g.awake), 0);
}

typedef struct bcast {
    mote_mutex m;
    mote_cond c;
    int exit; /* under m */
    mote_chan *running, *awake;
    mote_wg wg;
} bcast;

typedef struct bcast_arg {
    bcast *b;
    int i;
} bcast_arg;

static void bcast_waiter(void *arg)
{
    bcast_arg *a = arg;
    bcast *b = a->b;
    CHECK_EQ(mote_mutex_lock(&b->m), 0);
    while (!b->exit) {
        CHECK_EQ(mote_chan_send(b->running, &a->i), 0);
        CHECK_EQ(mote_cond_wait(&b->c, &b->m), 0);
        CHECK_EQ(mote_chan_send(b->awake, &a->i), 0);
    }
    CHECK_EQ(mote_mutex_unlock(&b->m), 0);
    CHECK_EQ(mote_wg_done(&b->wg), 0);
}

/* TestCondBroadcast: n tasks wait; each broadcast wakes every one of them
 * exactly once, none before it; n rounds, then they all leave. */
TEST_TASK(a_cond_broadcast_wakes_every_waiter_once_per_round)
{
    int n = TEST_SCALE(200, 4);
    static bcast b;
    static bcast_arg args[200];
    static char seen[200];
    b = (bcast){MOTE_MUTEX_INIT,
                MOTE_COND_INIT,
                0,
                mk(sizeof(int), (size_t)n),
                mk(sizeof(int), (size_t)n),
                MOTE_WG_INIT};
    CHECK_EQ(mote_wg_add(&b.wg, n), 0);
    for (int i = 0; i < n; i++) {
        args[i] = (bcast_arg){&b, i};
        go(bcast_waiter, &args[i]);
    }
    for (int round = 0; round < n; round++) {
        for (int i = 0; i < n; i++) /* all n wait (or are about to) */
            CHECK_EQ(mote_chan_recv(b.running, NULL), 0);
        CHECK_EQ(mote_mutex_lock(&b.m), 0);
        if (round == n - 1)
            b.exit = 1;
        CHECK_EQ(mote_chan_tryrecv(b.awake, NULL), -EAGAIN);
        CHECK_EQ(mote_cond_broadcast(&b.c), 0);
        CHECK_EQ(mote_mutex_unlock(&b.m), 0);
        memset(seen, 0, sizeof seen);
        for (int i = 0; i < n; i++) {
            int g = -1;
            CHECK_EQ(mote_chan_recv(b.awake, &g), 0);
            CHECK(g >= 0 && g < n);
            CHECK(!seen[g]); /* woke twice */
            seen[g] = 1;
        }
    }
    CHECK_EQ(mote_wg_wait(&b.wg), 0);
    CHECK_EQ(mote_chan_tryrecv(b.running, NULL), -EAGAIN); /* all left */
    CHECK_EQ(mote_cond_broadcast(&b.c), 0);
    CHECK_EQ(mote_chan_free(b.running), 0);
    CHECK_EQ(mote_chan_free(b.awake), 0);
}

typedef struct relay {
    mote_mutex m;
    mote_cond c;
    int x; /* plain, under m */
    mote_wg wg;
} relay;

static void relay_first(void *arg)
{
    relay *r = arg;
    CHECK_EQ(mote_mutex_lock(&r->m), 0);
    r->x = 1;
    CHECK_EQ(mote_cond_wait(&r->c, &r->m), 0);
    CHECK_EQ(r->x, 2);
    r->x = 3;
    CHECK_EQ(mote_cond_signal(&r->c), 0);
    CHECK_EQ(mote_mutex_unlock(&r->m), 0);
    CHECK_EQ(mote_wg_done(&r->wg), 0);
}

static void relay_second(void *arg)
{
    relay *r = arg;
    CHECK_EQ(mote_mutex_lock(&r->m), 0);
    while (r->x != 1) {
        CHECK_EQ(mote_mutex_unlock(&r->m), 0);
        mote_yield();
        CHECK_EQ(mote_mutex_lock(&r->m), 0);
    }
    r->x = 2;
    CHECK_EQ(mote_cond_signal(&r->c), 0);
    CHECK_EQ(mote_mutex_unlock(&r->m), 0);
    CHECK_EQ(mote_wg_done(&r->wg), 0);
}

static void relay_third(void *arg)
{
    relay *r = arg;
    CHECK_EQ(mote_mutex_lock(&r->m), 0);
    for (;;) {
        if (r->x == 2) {
            CHECK_EQ(mote_cond_wait(&r->c, &r->m), 0);
            CHECK_EQ(r->x, 3);
            break;
        }
        if (r->x == 3)
            break;
        CHECK_EQ(mote_mutex_unlock(&r->m), 0);
        mote_yield();
        CHECK_EQ(mote_mutex_lock(&r->m), 0);
    }
    CHECK_EQ(mote_mutex_unlock(&r->m), 0);
    CHECK_EQ(mote_wg_done(&r->wg), 0);
}

/* TestRace (cond): a value under the mutex passes 1 -> 2 -> 3 between
 * three tasks that wait and signal; each sees the step before its own. */
TEST_TASK(cond_waiters_pass_a_value_along_in_turn)
{
    for (int round = 0; round < TEST_SCALE(500, 10); round++) {
        static relay r;
        r = (relay){MOTE_MUTEX_INIT, MOTE_COND_INIT, 0, MOTE_WG_INIT};
        CHECK_EQ(mote_wg_add(&r.wg, 3), 0);
        go(relay_first, &r);
        go(relay_second, &r);
        go(relay_third, &r);
        CHECK_EQ(mote_wg_wait(&r.wg), 0);
        CHECK_EQ(r.x, 3);
    }
}

typedef struct steal {
    mote_mutex m;
    mote_cond c;
    mote_chan *ch;
    int done; /* under m */
    mote_wg wg;
} steal;

static void steal_first(void *arg)
{
    steal *s = arg;
    CHECK_EQ(mote_mutex_lock(&s->m), 0);
    CHECK_EQ(mote_chan_send(s->ch, NULL), 0);
    CHECK_EQ(mote_cond_wait(&s->c, &s->m), 0); /* once: no spurious wake-ups */
    CHECK_EQ(mote_mutex_unlock(&s->m), 0);
    CHECK_EQ(mote_chan_send(s->ch, NULL), 0);
    CHECK_EQ(mote_wg_done(&s->wg), 0);
}

static void steal_broadcaster(void *arg)
{
    steal *s = arg;
    CHECK_EQ(mote_cond_broadcast(&s->c), 0);
    CHECK_EQ(mote_wg_done(&s->wg), 0);
}

static void steal_second(void *arg)
{
    steal *s = arg;
    CHECK_EQ(mote_mutex_lock(&s->m), 0);
    while (!s->done)
        CHECK_EQ(mote_cond_wait(&s->c, &s->m), 0);
    CHECK_EQ(mote_mutex_unlock(&s->m), 0);
    CHECK_EQ(mote_wg_done(&s->wg), 0);
}

/* TestCondSignalStealing: a broadcast racing a new waiter may or may not
 * wake the newcomer, but must wake the task that was already waiting. */
TEST_TASK(a_broadcast_racing_a_new_waiter_still_wakes_the_old_one)
{
    static steal s;
    for (int iter = 0; iter < TEST_SCALE(1000, 20); iter++) {
        s = (steal){MOTE_MUTEX_INIT, MOTE_COND_INIT, mk(0, 0), 0, MOTE_WG_INIT};
        CHECK_EQ(mote_wg_add(&s.wg, 3), 0);
        go(steal_first, &s);
        CHECK_EQ(mote_chan_recv(s.ch, NULL), 0);
        CHECK_EQ(mote_mutex_lock(&s.m), 0); /* the first now waits on c */
        CHECK_EQ(mote_mutex_unlock(&s.m), 0);
        go(steal_broadcaster, &s);
        go(steal_second, &s);
        mote_case cs[] = {{s.ch, MOTE_RECV, NULL, 0}};
        int r = mote_select(cs, 1, 60000 * MS);
        if (r != 0)
            fprintf(stderr, "iteration %d: the first waiter missed the broadcast\n",
                    iter);
        CHECK_EQ(r, 0);
        CHECK_EQ(mote_mutex_lock(&s.m), 0);
        s.done = 1;
        CHECK_EQ(mote_mutex_unlock(&s.m), 0);
        CHECK_EQ(mote_cond_broadcast(&s.c), 0);
        CHECK_EQ(mote_wg_wait(&s.wg), 0);
        CHECK_EQ(mote_chan_free(s.ch), 0);
    }
}

/* ---- a select with a timeout racing peers on two channels ---- */

typedef struct tpeer {
    mote_chan *a, *b;
    long sent_a, sent_a_n; /* by the peer on a */
    long recv_b, recv_b_n; /* by the peer on b */
    mote_wg wg;
} tpeer;

/* Now and then a peer is away for up to 30 us, so that selects time out
 * often and not only when the two sides meet. */
static void tpeer_pause(uint64_t *seed)
{
    uint64_t r = test_rnd(seed);
    if (r % 4 == 0)
        mote_sleep((int64_t)(r / 4 % 30000));
}

static void tpeer_a(void *arg)
{
    tpeer *t = arg;
    uint64_t seed = 0x1234567 + (uintptr_t)t;
    long v = 1;
    for (;;) {
        mote_case cs[] = {{t->a, MOTE_SEND, &v, 0}};
        int r = mote_select(cs, 1, (int64_t)(test_rnd(&seed) % 20000));
        if (r == 0) {
            if (cs[0].result == MOTE_ECLOSED)
                break;
            CHECK_EQ(cs[0].result, 0);
            t->sent_a += v;
            t->sent_a_n++;
            v++;
        } else {
            CHECK(r == -ETIMEDOUT || r == -EAGAIN);
        }
        tpeer_pause(&seed);
    }
    CHECK_EQ(mote_wg_done(&t->wg), 0);
}

static void tpeer_b(void *arg)
{
    tpeer *t = arg;
    uint64_t seed = 0x7654321 + (uintptr_t)t;
    long last = 0;
    for (;;) {
        long v = -1;
        mote_case cs[] = {{t->b, MOTE_RECV, &v, 0}};
        int r = mote_select(cs, 1, (int64_t)(test_rnd(&seed) % 20000));
        if (r == 0) {
            if (cs[0].result == MOTE_ECLOSED)
                break;
            CHECK(v > last); /* in order, never twice */
            last = v;
            t->recv_b += v;
            t->recv_b_n++;
        } else {
            CHECK(r == -ETIMEDOUT || r == -EAGAIN);
        }
        tpeer_pause(&seed);
    }
    CHECK_EQ(mote_wg_done(&t->wg), 0);
}

/* A select of a receive on a and a send on b, with a random timeout of at
 * most 20 us, against a peer sending on a and a peer receiving on b, both
 * with random timeouts too: each select completes one case or none, and
 * in the end each side's account of both channels agrees exactly. */
TEST_TASK(a_timed_select_over_two_channels_completes_one_case_or_none)
{
    for (size_t bcap = 0; bcap < 2; bcap++) {
        static tpeer t;
        memset(&t, 0, sizeof t);
        t.a = mk(sizeof(long), 0);
        t.b = mk(sizeof(long), bcap);
        CHECK_EQ(mote_wg_add(&t.wg, 2), 0);
        go(tpeer_a, &t);
        go(tpeer_b, &t);
        uint64_t seed = 0xabcdef;
        long got_a = 0, got_a_n = 0, put_b = 0, put_b_n = 0, none = 0;
        long k = TEST_SCALE(20000, 10);
        for (long i = 0; i < k; i++) {
            long in = -1, out = i + 1;
            mote_case cs[] = {{t.a, MOTE_RECV, &in, 0}, {t.b, MOTE_SEND, &out, 0}};
            int r = mote_select(cs, 2, (int64_t)(test_rnd(&seed) % 20000));
            if (r == 0) {
                CHECK_EQ(cs[0].result, 0);
                CHECK_EQ(in, got_a_n + 1); /* a's values in order, none lost */
                got_a += in;
                got_a_n++;
            } else if (r == 1) {
                CHECK_EQ(cs[1].result, 0);
                CHECK_EQ(in, -1);
                put_b += out;
                put_b_n++;
            } else {
                CHECK(r == -ETIMEDOUT || r == -EAGAIN);
                CHECK_EQ(in, -1);
                none++;
            }
        }
        CHECK_EQ(mote_chan_close(t.a), 0);
        CHECK_EQ(mote_chan_close(t.b), 0);
        CHECK_EQ(mote_wg_wait(&t.wg), 0);
        printf("b cap %zu: %ld received on a, %ld sent on b, %ld timed out\n", bcap,
               got_a_n, put_b_n, none);
        CHECK_EQ(got_a_n + put_b_n + none, k);
        /* Both peers keep offering their side (each case completes in
         * about 45% of the selects here): a select that never completes
         * one of the two cases is broken, not unlucky. */
        CHECK(got_a_n > 0 && put_b_n > 0);
        CHECK_EQ(t.sent_a_n, got_a_n);
        CHECK_EQ(t.sent_a, got_a);
        CHECK_EQ(t.recv_b_n, put_b_n);
        CHECK_EQ(t.recv_b, put_b);
        CHECK_EQ(mote_chan_free(t.a), 0);
        CHECK_EQ(mote_chan_free(t.b), 0);
    }
}

TEST_MAIN()
