/*
 * test_chan.c - channel unit tests: argument checking, rendezvous, FIFO
 * buffering, copying, close semantics, try ops, len/cap, elem_size 0, and
 * blocking calls from a plain thread.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "mote.h"

static void test_make_and_args(void)
{
    errno = 0;
    CHECK(mote_chan_make(SIZE_MAX / 2, 4) == NULL);
    CHECK_EQ(errno, EINVAL);
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
    mote_chan_free(NULL);
    mote_chan_free(c);
}

static void test_buffered_fifo(void)
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
    for (int i = 0; i < 4; i++)
        CHECK_EQ(mote_chan_trysend(c, &i), 0);
    CHECK_EQ(mote_chan_trysend(c, &(int){9}), -EAGAIN);
    CHECK_EQ(mote_chan_len(c), 4);
    CHECK_EQ(mote_chan_recv(c, NULL), 0); /* discard 0 */
    int v;
    CHECK_EQ(mote_chan_tryrecv(c, &v), 0);
    CHECK_EQ(v, 1);
    mote_chan_free(c);
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
    memset(&b, 'y', sizeof b);         /* must not show at the receiver */
    b.bytes[0] = 'q';
    CHECK_EQ(mote_chan_send(c, &b), 0);
}

static void test_unbuffered_copy(void)
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
    mote_chan_free(c);
}

/* Rendezvous: an unbuffered send does not return before a receiver took
 * the value. */
static int rv_received;
static void rv_receiver(void *arg)
{
    mote_chan *c = arg;
    mote_sleep(20 * 1000 * 1000);
    int v;
    __atomic_store_n(&rv_received, 1, __ATOMIC_SEQ_CST);
    CHECK_EQ(mote_chan_recv(c, &v), 0);
    CHECK_EQ(v, 42);
}

static void test_rendezvous(void)
{
    mote_chan *c = mote_chan_make(sizeof(int), 0);
    rv_received = 0;
    CHECK_EQ(mote_go(rv_receiver, c), 0);
    int64_t t0 = mote_now();
    CHECK_EQ(mote_chan_send(c, &(int){42}), 0);
    CHECK(__atomic_load_n(&rv_received, __ATOMIC_SEQ_CST) == 1);
    CHECK(mote_now() - t0 >= 15 * 1000 * 1000);
    mote_chan_free(c);
}

/* Close: buffered values drain first, then MOTE_ECLOSED with a zeroed
 * element; blocked receivers and senders wake with MOTE_ECLOSED. */
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
    mote_wg_done(&x->wg);
}

static void blocked_sender(void *arg)
{
    close_ctx *x = arg;
    long v = 5;
    CHECK_EQ(mote_chan_send(x->c, &v), MOTE_ECLOSED);
    __atomic_add_fetch(&x->result, 1, __ATOMIC_SEQ_CST);
    mote_wg_done(&x->wg);
}

static void test_close(void)
{
    mote_chan *c = mote_chan_make(sizeof(long), 2);
    CHECK_EQ(mote_chan_send(c, &(long){1}), 0);
    CHECK_EQ(mote_chan_send(c, &(long){2}), 0);
    CHECK_EQ(mote_chan_close(c), 0);
    CHECK_EQ(mote_chan_close(c), MOTE_ECLOSED);
    CHECK_EQ(mote_chan_send(c, &(long){3}), MOTE_ECLOSED);
    CHECK_EQ(mote_chan_trysend(c, &(long){3}), MOTE_ECLOSED);
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
    mote_chan_free(c);

    /* blocked receivers */
    close_ctx x = {mote_chan_make(sizeof(long), 0), MOTE_WG_INIT, 0};
    mote_wg_add(&x.wg, 5);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(mote_go(blocked_receiver, &x), 0);
    mote_sleep(10 * 1000 * 1000);
    CHECK_EQ(mote_chan_close(x.c), 0);
    mote_wg_wait(&x.wg);
    CHECK_EQ(x.result, 5);
    mote_chan_free(x.c);

    /* blocked senders, buffered (full) and unbuffered */
    for (size_t cap = 0; cap < 2; cap++) {
        close_ctx y = {mote_chan_make(sizeof(long), cap), MOTE_WG_INIT, 0};
        if (cap)
            CHECK_EQ(mote_chan_send(y.c, &(long){1}), 0);
        mote_wg_add(&y.wg, 4);
        for (int i = 0; i < 4; i++)
            CHECK_EQ(mote_go(blocked_sender, &y), 0);
        mote_sleep(10 * 1000 * 1000);
        CHECK_EQ(mote_chan_close(y.c), 0);
        mote_wg_wait(&y.wg);
        CHECK_EQ(y.result, 4);
        if (cap) { /* the buffered value survives the close */
            long v2 = 0;
            CHECK_EQ(mote_chan_recv(y.c, &v2), 0);
            CHECK_EQ(v2, 1);
        }
        CHECK_EQ(mote_chan_recv(y.c, NULL), MOTE_ECLOSED);
        mote_chan_free(y.c);
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

static void test_zero_size(void)
{
    for (size_t cap = 0; cap < 3; cap++) {
        mote_chan *c = mote_chan_make(0, cap);
        CHECK(c != NULL);
        CHECK_EQ(mote_go(signaller, c), 0);
        int n = 0;
        char dummy = 'z';
        while (mote_chan_recv(c, n % 2 ? &dummy : NULL) == 0)
            n++;
        CHECK_EQ(n, 100);
        CHECK_EQ(dummy, 'z'); /* nothing written for elem_size 0 */
        mote_chan_free(c);
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

static void test_pipeline(void)
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
        mote_chan_free(p.c);
    }
}

/* From a plain thread: blocking calls fail with -EPERM, try ops work. */
static void *plain_thread(void *arg)
{
    mote_chan *c = arg;
    CHECK_EQ(mote_chan_send(c, &(int){1}), -EPERM);
    CHECK_EQ(mote_chan_recv(c, NULL), -EPERM);
    CHECK_EQ(mote_chan_trysend(c, &(int){5}), 0);
    return NULL;
}

static void test_plain_thread(void)
{
    mote_chan *c = mote_chan_make(sizeof(int), 1);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, plain_thread, c), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    int v = 0;
    CHECK_EQ(mote_chan_recv(c, &v), 0);
    CHECK_EQ(v, 5);
    mote_chan_free(c);
}

static void test_main(void *arg)
{
    (void)arg;
    test_make_and_args();
    test_buffered_fifo();
    test_unbuffered_copy();
    test_rendezvous();
    test_close();
    test_zero_size();
    test_pipeline();
    test_plain_thread();
}

int main(void)
{
    setenv("MOTE_WORKERS", "2", 0);
    /* Before any runtime: blocking ops are refused, not hung. */
    mote_chan *c = mote_chan_make(sizeof(int), 0);
    CHECK_EQ(mote_chan_send(c, &(int){1}), -EPERM);
    CHECK_EQ(mote_chan_recv(c, NULL), -EPERM);
    CHECK_EQ(mote_chan_trysend(c, &(int){1}), -EAGAIN);
    mote_chan_free(c);
    CHECK_EQ(mote_run(test_main, NULL), 0);
    TEST_PASS("test_chan");
    return 0;
}
