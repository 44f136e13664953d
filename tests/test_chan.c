/*
 * test_chan.c - channels: argument checking, rendezvous, FIFO buffering,
 * copying, close semantics, try ops, len/cap, elem_size 0, freeing while a
 * task waits, and blocking calls from a plain thread or outside any run.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "mote.h"

#define MS (1000 * 1000LL)

TEST_SETUP { setenv("MOTE_WORKERS", "2", 0); }

/* Before any runtime: every call that may block is refused, whether or not
 * it would block, and leaves the channel as it was; try ops work. */
TEST(blocking_ops_outside_a_run_return_eperm)
{
    mote_chan *c = mote_chan_make(sizeof(int), 0);
    CHECK(c != NULL);
    CHECK_EQ(mote_chan_send(c, &(int){1}), -EPERM);
    CHECK_EQ(mote_chan_recv(c, NULL), -EPERM);
    CHECK_EQ(mote_chan_trysend(c, &(int){1}), -EAGAIN);
    CHECK_EQ(mote_chan_free(c), 0);

    mote_chan *b = mote_chan_make(sizeof(int), 2);
    CHECK_EQ(mote_chan_send(b, &(int){1}), -EPERM); /* room, still refused */
    CHECK_EQ(mote_chan_len(b), 0);
    CHECK_EQ(mote_chan_trysend(b, &(int){7}), 0);
    int v = 0;
    CHECK_EQ(mote_chan_recv(b, &v), -EPERM); /* a value, still refused */
    CHECK_EQ(v, 0);
    CHECK_EQ(mote_chan_len(b), 1);
    CHECK_EQ(mote_chan_tryrecv(b, &v), 0);
    CHECK_EQ(v, 7);
    CHECK_EQ(mote_chan_close(b), 0);
    CHECK_EQ(mote_chan_recv(b, NULL), -EPERM); /* closed, still refused */
    CHECK_EQ(mote_chan_free(b), 0);
}

TEST_TASK(make_rejects_oversized_elements_and_rings)
{
    errno = 0;
    CHECK(mote_chan_make(SIZE_MAX / 2, 4) == NULL);
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK(mote_chan_make(64 * 1024 + 1, 1) == NULL); /* elements <= 64 KiB */
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK(mote_chan_make(64 * 1024, SIZE_MAX / 1024) == NULL); /* ring overflows */
    CHECK_EQ(errno, EINVAL);
    mote_chan *c = mote_chan_make(64 * 1024, 2); /* the largest element */
    CHECK(c != NULL);
    CHECK_EQ(mote_chan_cap(c), 2);
    static char big_in[64 * 1024], big_out[64 * 1024];
    memset(big_in, 'b', sizeof big_in);
    CHECK_EQ(mote_chan_send(c, big_in), 0);
    CHECK_EQ(mote_chan_recv(c, big_out), 0);
    CHECK(memcmp(big_in, big_out, sizeof big_in) == 0);
    CHECK_EQ(mote_chan_free(c), 0);
}

TEST_TASK(null_channel_and_missing_value_return_einval)
{
    mote_chan *c = mote_chan_make(sizeof(int), 3);
    CHECK(c != NULL);
    CHECK_EQ(mote_chan_cap(c), 3);
    CHECK_EQ(mote_chan_len(c), 0);
    CHECK_EQ(mote_chan_send(NULL, &(int){1}), -EINVAL);
    CHECK_EQ(mote_chan_recv(NULL, NULL), -EINVAL);
    CHECK_EQ(mote_chan_trysend(NULL, &(int){1}), -EINVAL);
    CHECK_EQ(mote_chan_tryrecv(NULL, NULL), -EINVAL);
    CHECK_EQ(mote_chan_close(NULL), -EINVAL);
    CHECK_EQ(mote_chan_len(NULL), 0);
    CHECK_EQ(mote_chan_cap(NULL), 0);
    CHECK_EQ(mote_chan_send(c, NULL), -EINVAL); /* elem_size 4: needs a value */
    CHECK_EQ(mote_chan_trysend(c, NULL), -EINVAL);
    CHECK_EQ(mote_chan_len(c), 0);
    CHECK_EQ(mote_chan_free(NULL), 0);
    CHECK_EQ(mote_chan_free(c), 0);
}

TEST_TASK(buffered_channel_is_fifo_across_ring_wraps)
{
    mote_chan *c = mote_chan_make(sizeof(int), 4);
    for (int round = 0; round < 5; round++) { /* wraps the ring */
        for (int i = 0; i < 3; i++)
            CHECK_EQ(mote_chan_send(c, &(int){round * 10 + i}), 0);
        CHECK_EQ(mote_chan_len(c), 3);
        for (int i = 0; i < 3; i++) {
            int v = -1;
            CHECK_EQ(mote_chan_recv(c, &v), 0);
            CHECK_EQ(v, round * 10 + i);
        }
    }
    CHECK_EQ(mote_chan_len(c), 0);
    CHECK_EQ(mote_chan_free(c), 0);
}

TEST_TASK(trysend_fails_on_full_buffer_and_recv_may_discard)
{
    mote_chan *c = mote_chan_make(sizeof(int), 4);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(mote_chan_trysend(c, &i), 0);
    CHECK_EQ(mote_chan_trysend(c, &(int){9}), -EAGAIN);
    CHECK_EQ(mote_chan_len(c), 4);
    CHECK_EQ(mote_chan_recv(c, NULL), 0); /* discards 0 */
    int v;
    CHECK_EQ(mote_chan_tryrecv(c, &v), 0);
    CHECK_EQ(v, 1);
    CHECK_EQ(mote_chan_len(c), 2);
    CHECK_EQ(mote_chan_free(c), 0);
}

/* A blocked sender's value is read out of its stack; afterwards the
 * receiver's copy is independent of the sender's memory. */
typedef struct big {
    char bytes[200];
} big;

static void big_sender(void *arg)
{
    mote_chan *c = arg;
    big b;
    memset(&b, 'x', sizeof b);
    CHECK_EQ(mote_chan_send(c, &b), 0); /* unbuffered: blocks for recv */
    memset(&b, 'y', sizeof b);          /* must not show at the receiver */
    b.bytes[0] = 'q';
    CHECK_EQ(mote_chan_send(c, &b), 0);
}

TEST_TASK(unbuffered_send_copies_value)
{
    mote_chan *c = mote_chan_make(sizeof(big), 0);
    CHECK_EQ(mote_chan_trysend(c, &(big){{0}}), -EAGAIN); /* no receiver */
    CHECK_EQ(mote_chan_tryrecv(c, NULL), -EAGAIN);
    CHECK_EQ(mote_go(big_sender, c), 0);
    big r;
    CHECK_EQ(mote_chan_recv(c, &r), 0);
    for (size_t i = 0; i < sizeof r.bytes; i++)
        CHECK_EQ(r.bytes[i], 'x');
    CHECK_EQ(mote_chan_recv(c, &r), 0);
    CHECK_EQ(r.bytes[0], 'q');
    CHECK_EQ(r.bytes[1], 'y');
    CHECK_EQ(mote_chan_free(c), 0);
}

/* Rendezvous: an unbuffered send does not return before a receiver took
 * the value.  The receiver sleeps before it receives, so the send waits at
 * least that long after the receiver started its sleep (a sleep never ends
 * early); both times are taken where they cannot race. */
static int rv_received;
static int64_t rv_sleep_start;
static void rv_receiver(void *arg)
{
    mote_chan *c = arg;
    __atomic_store_n(&rv_sleep_start, mote_now(), __ATOMIC_SEQ_CST);
    mote_sleep(20 * MS);
    int v;
    __atomic_store_n(&rv_received, 1, __ATOMIC_SEQ_CST);
    CHECK_EQ(mote_chan_recv(c, &v), 0);
    CHECK_EQ(v, 42);
}

TEST_TASK(unbuffered_send_waits_for_receiver)
{
    mote_chan *c = mote_chan_make(sizeof(int), 0);
    rv_received = 0;
    rv_sleep_start = 0;
    CHECK_EQ(mote_go(rv_receiver, c), 0);
    CHECK_EQ(mote_chan_send(c, &(int){42}), 0);
    int64_t done = mote_now();
    CHECK(__atomic_load_n(&rv_received, __ATOMIC_SEQ_CST) == 1);
    int64_t start = __atomic_load_n(&rv_sleep_start, __ATOMIC_SEQ_CST);
    CHECK(start > 0);
    CHECK(done - start >= 20 * MS);
    CHECK_EQ(mote_chan_free(c), 0);
}

/* Close: buffered values drain first, then MOTE_ECLOSED with a zeroed
 * element; blocked receivers and senders wake with MOTE_ECLOSED. */
TEST_TASK(close_drains_buffer_then_reports_closed)
{
    mote_chan *c = mote_chan_make(sizeof(long), 2);
    CHECK_EQ(mote_chan_send(c, &(long){1}), 0);
    CHECK_EQ(mote_chan_send(c, &(long){2}), 0);
    CHECK_EQ(mote_chan_close(c), 0);
    CHECK_EQ(mote_chan_close(c), MOTE_ECLOSED);
    CHECK_EQ(mote_chan_send(c, &(long){3}), MOTE_ECLOSED);
    CHECK_EQ(mote_chan_trysend(c, &(long){3}), MOTE_ECLOSED);
    CHECK_EQ(mote_chan_len(c), 2);
    long v = 0;
    CHECK_EQ(mote_chan_recv(c, &v), 0);
    CHECK_EQ(v, 1);
    CHECK_EQ(mote_chan_tryrecv(c, &v), 0);
    CHECK_EQ(v, 2);
    v = 9;
    CHECK_EQ(mote_chan_recv(c, &v), MOTE_ECLOSED);
    CHECK_EQ(v, 0);
    v = 9;
    CHECK_EQ(mote_chan_tryrecv(c, &v), MOTE_ECLOSED);
    CHECK_EQ(v, 0);
    CHECK_EQ(mote_chan_recv(c, NULL), MOTE_ECLOSED);
    CHECK_EQ(mote_chan_free(c), 0);
}

typedef struct close_ctx {
    mote_chan *c;
    mote_wg wg;
    int result;
} close_ctx;

static void blocked_receiver(void *arg)
{
    close_ctx *x = arg;
    long v = 77;
    int r = mote_chan_recv(x->c, &v);
    CHECK_EQ(r, MOTE_ECLOSED);
    CHECK_EQ(v, 0);
    __atomic_add_fetch(&x->result, 1, __ATOMIC_SEQ_CST);
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

static void blocked_sender(void *arg)
{
    close_ctx *x = arg;
    long v = 5;
    CHECK_EQ(mote_chan_send(x->c, &v), MOTE_ECLOSED);
    __atomic_add_fetch(&x->result, 1, __ATOMIC_SEQ_CST);
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

TEST_TASK(close_wakes_blocked_receivers)
{
    close_ctx x = {mote_chan_make(sizeof(long), 0), MOTE_WG_INIT, 0};
    CHECK_EQ(mote_wg_add(&x.wg, 5), 0);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(mote_go(blocked_receiver, &x), 0);
    test_wait_blocked(5);
    CHECK_EQ(x.result, 0);
    CHECK_EQ(mote_chan_close(x.c), 0);
    CHECK_EQ(mote_wg_wait(&x.wg), 0);
    CHECK_EQ(x.result, 5);
    CHECK_EQ(mote_chan_free(x.c), 0);
}

/* Blocked senders, on a full buffered channel and an unbuffered one. */
TEST_TASK(close_wakes_blocked_senders)
{
    for (size_t cap = 0; cap < 2; cap++) {
        close_ctx y = {mote_chan_make(sizeof(long), cap), MOTE_WG_INIT, 0};
        if (cap)
            CHECK_EQ(mote_chan_send(y.c, &(long){1}), 0);
        CHECK_EQ(mote_wg_add(&y.wg, 4), 0);
        for (int i = 0; i < 4; i++)
            CHECK_EQ(mote_go(blocked_sender, &y), 0);
        test_wait_blocked(4);
        CHECK_EQ(y.result, 0);
        CHECK_EQ(mote_chan_close(y.c), 0);
        CHECK_EQ(mote_wg_wait(&y.wg), 0);
        CHECK_EQ(y.result, 4);
        if (cap) { /* the buffered value survives the close */
            long v2 = 0;
            CHECK_EQ(mote_chan_recv(y.c, &v2), 0);
            CHECK_EQ(v2, 1);
        }
        CHECK_EQ(mote_chan_recv(y.c, NULL), MOTE_ECLOSED);
        CHECK_EQ(mote_chan_free(y.c), 0);
    }
}

/* elem_size 0: a signal channel, buffered and not. */
static void signaller(void *arg)
{
    mote_chan *c = arg;
    for (int i = 0; i < 100; i++)
        CHECK_EQ(mote_chan_send(c, NULL), 0);
    CHECK_EQ(mote_chan_close(c), 0);
}

TEST_TASK(zero_size_elements_carry_signals)
{
    for (size_t cap = 0; cap < 3; cap++) {
        mote_chan *c = mote_chan_make(0, cap);
        CHECK(c != NULL);
        CHECK_EQ(mote_go(signaller, c), 0);
        int n = 0, r;
        char dummy = 'z';
        while ((r = mote_chan_recv(c, n % 2 ? &dummy : NULL)) == 0)
            n++;
        CHECK_EQ(r, MOTE_ECLOSED);
        CHECK_EQ(n, 100);
        CHECK_EQ(dummy, 'z'); /* nothing written for elem_size 0 */
        CHECK_EQ(mote_chan_free(c), 0);
    }
}

/* Many values through a small buffer between tasks on different workers. */
typedef struct pipe_ctx {
    mote_chan *c;
    long n;
} pipe_ctx;

static void pipe_producer(void *arg)
{
    pipe_ctx *p = arg;
    for (long i = 0; i < p->n; i++)
        CHECK_EQ(mote_chan_send(p->c, &i), 0);
    CHECK_EQ(mote_chan_close(p->c), 0);
}

TEST_TASK(pipeline_keeps_order_across_workers)
{
    long n = TEST_SCALE(200000, 20);
    for (size_t cap = 0; cap < 40; cap += 13) {
        pipe_ctx p = {mote_chan_make(sizeof(long), cap), n};
        CHECK_EQ(mote_go(pipe_producer, &p), 0);
        long expect = 0, v;
        int r;
        while ((r = mote_chan_recv(p.c, &v)) == 0) {
            CHECK_EQ(v, expect);
            expect++;
        }
        CHECK_EQ(r, MOTE_ECLOSED);
        CHECK_EQ(expect, n);
        CHECK_EQ(mote_chan_free(p.c), 0);
    }
}

/* From a plain thread during a run: blocking calls fail with -EPERM even
 * when they would not block; try ops work. */
static void *plain_thread(void *arg)
{
    mote_chan *c = arg; /* cap 1, empty */
    CHECK_EQ(mote_chan_send(c, &(int){1}), -EPERM);
    CHECK_EQ(mote_chan_len(c), 0);
    CHECK_EQ(mote_chan_recv(c, NULL), -EPERM);
    CHECK_EQ(mote_chan_trysend(c, &(int){5}), 0);
    CHECK_EQ(mote_chan_recv(c, NULL), -EPERM); /* a value waits: refused */
    CHECK_EQ(mote_chan_len(c), 1);
    return NULL;
}

TEST_TASK(plain_thread_blocking_ops_return_eperm)
{
    mote_chan *c = mote_chan_make(sizeof(int), 1);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, plain_thread, c), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    int v = 0;
    CHECK_EQ(mote_chan_recv(c, &v), 0);
    CHECK_EQ(v, 5);
    CHECK_EQ(mote_chan_free(c), 0);
}

/* mote_chan_free refuses (-EBUSY, nothing freed) while a task is blocked on
 * the channel, receiving or sending; the channel keeps working. */
typedef struct busy_ctx {
    mote_chan *c;
    mote_wg done;
    int got;
} busy_ctx;

static void busy_receiver(void *arg)
{
    busy_ctx *x = arg;
    CHECK_EQ(mote_chan_recv(x->c, &x->got), 0);
    CHECK_EQ(mote_wg_done(&x->done), 0);
}

static void busy_sender(void *arg)
{
    busy_ctx *x = arg;
    CHECK_EQ(mote_chan_send(x->c, &(int){31}), 0);
    CHECK_EQ(mote_wg_done(&x->done), 0);
}

TEST_TASK(free_returns_ebusy_while_a_task_is_blocked)
{
    busy_ctx x = {mote_chan_make(sizeof(int), 0), MOTE_WG_INIT, 0};
    CHECK_EQ(mote_wg_add(&x.done, 1), 0);
    CHECK_EQ(mote_go(busy_receiver, &x), 0);
    test_wait_blocked(1);
    CHECK_EQ(mote_chan_free(x.c), -EBUSY);
    CHECK_EQ(mote_chan_trysend(x.c, &(int){17}), 0); /* live: the receiver takes it */
    CHECK_EQ(mote_wg_wait(&x.done), 0);
    CHECK_EQ(x.got, 17);

    CHECK_EQ(mote_wg_add(&x.done, 1), 0);
    CHECK_EQ(mote_go(busy_sender, &x), 0);
    test_wait_blocked(1);
    CHECK_EQ(mote_chan_free(x.c), -EBUSY);
    int v = 0;
    CHECK_EQ(mote_chan_recv(x.c, &v), 0);
    CHECK_EQ(v, 31);
    CHECK_EQ(mote_wg_wait(&x.done), 0);

    CHECK_EQ(mote_chan_free(x.c), 0); /* nobody waits now */
    CHECK_EQ(mote_chan_free(x.c), -EINVAL);
}

/* A channel freed twice after the heap gave its memory back (a big ring is
 * its own mapping, unmapped at free; a small one's segment goes with
 * mote_mem_release): the second free and any use say -EINVAL (they read
 * the unmapped magic number: a crash). */
/* Go's TestNonblockRecvRace: a channel holding one value is closed and
 * drained while a plain thread polls it without blocking.  It is ready
 * throughout (a value, then closed), so the poll takes the value or sees
 * it closed, and never says it would block: the lock-free answer reads
 * the buffer before the close flag for that reason. */
enum { RACE_ROUNDS = 1000 }; /* (valgrind runs this file too: ~12 s) */
static _Atomic(mote_chan *) race_chan;
static _Atomic long race_go, race_done, race_bad;

static void *race_poller(void *arg)
{
    (void)arg;
    for (long i = 1; i <= RACE_ROUNDS; i++) {
        while (atomic_load(&race_go) != i)
            sched_yield();
        mote_chan *c = atomic_load(&race_chan);
        int v = -1, r;
        if (i & 1) {
            r = mote_chan_tryrecv(c, &v);
        } else {
            mote_case cs[2] = {{NULL, MOTE_SEND, NULL, 0}, {c, MOTE_RECV, &v, -1}};
            r = mote_select(cs, 2, 0);
            r = r == 1 ? cs[1].result : r;
        }
        if (!((r == 0 && v == 7) || (r == MOTE_ECLOSED && v == 0)))
            atomic_fetch_add(&race_bad, 1);
        atomic_store(&race_done, i);
    }
    return NULL;
}

TEST_TASK(a_poll_racing_a_close_never_finds_a_ready_channel_blocked)
{
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, race_poller, NULL), 0);
    for (long i = 1; i <= RACE_ROUNDS; i++) {
        mote_chan *c = mote_chan_make(sizeof(int), 1);
        CHECK(c != NULL);
        int seven = 7, v = -1;
        CHECK_EQ(mote_chan_send(c, &seven), 0);
        atomic_store(&race_chan, c);
        atomic_store(&race_go, i);
        CHECK_EQ(mote_chan_close(c), 0);
        int r = mote_chan_recv(c, &v);
        CHECK((r == 0 && v == 7) || (r == MOTE_ECLOSED && v == 0));
        while (atomic_load(&race_done) != i) /* parks: valgrind runs one */
            mote_sleep(20 * 1000);           /* thread at a time */
        CHECK_EQ(mote_chan_free(c), 0);
    }
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(atomic_load(&race_bad), 0);
}

TEST(a_channel_freed_twice_after_its_memory_went_back_is_refused)
{
    mote_chan *big = mote_chan_make(8, 1 << 20); /* an 8 MiB ring */
    CHECK(big != NULL);
    CHECK_EQ(mote_chan_free(big), 0);
    CHECK_EQ(mote_chan_free(big), -EINVAL);
    CHECK_EQ(mote_chan_close(big), -EINVAL);
    CHECK_EQ(mote_chan_trysend(big, &(long){1}), -EINVAL);
    CHECK_EQ(mote_chan_len(big), 0);
    mote_chan *small = mote_chan_make(8, 4);
    CHECK(small != NULL);
    CHECK_EQ(mote_chan_free(small), 0);
    mote_mem_release();
    CHECK_EQ(mote_chan_free(small), -EINVAL);
    CHECK_EQ(mote_chan_len(small), 0);
}

TEST_MAIN()
