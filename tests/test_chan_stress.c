/*
 * test_chan_stress.c - races that the protocol must survive, sized so TSan
 * can watch them: selects whose tiny timeouts race the peers that complete
 * them (a value is delivered exactly when the receiving side says so),
 * ping-pong across workers, a thousand blocked receivers woken by one close,
 * and a mutex-protected counter hammered from many tasks.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "mote.h"

enum { PAIRS = 4 };

TEST_SETUP { setenv("MOTE_WORKERS", "4", 0); }

typedef struct race {
    mote_chan *c;
    long n;
    long sent, received, sum_sent, sum_received;
    mote_wg wg;
} race;

static void race_sender(void *arg)
{
    race *r = arg;
    uint64_t s = (uintptr_t)arg | 1;
    for (long i = 1; i <= r->n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        long v = i;
        mote_case cs[] = {{r->c, MOTE_SEND, &v, 0}};
        int k = mote_select(cs, 1, (int64_t)(s % 20000)); /* <= 20 us */
        if (k == 0) {
            CHECK_EQ(cs[0].result, 0);
            r->sent++;
            r->sum_sent += v;
        } else
            CHECK(k == -ETIMEDOUT || k == -EAGAIN);
    }
    CHECK_EQ(mote_chan_close(r->c), 0);
    CHECK_EQ(mote_wg_done(&r->wg), 0);
}

static void race_receiver(void *arg)
{
    race *r = arg;
    uint64_t s = (uintptr_t)arg * 31 | 1;
    long last = 0;
    for (;;) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        long v = -1;
        mote_case cs[] = {{r->c, MOTE_RECV, &v, 0}, {NULL, MOTE_SEND, NULL, 0}};
        int k = mote_select(cs, 2, (int64_t)(s % 20000));
        if (k == -ETIMEDOUT || k == -EAGAIN)
            continue;
        CHECK_EQ(k, 0);
        if (cs[0].result == MOTE_ECLOSED)
            break;
        CHECK(v > last); /* in order, never twice */
        last = v;
        r->received++;
        r->sum_received += v;
    }
    CHECK_EQ(mote_wg_done(&r->wg), 0);
}

TEST_TASK(select_timeouts_racing_peers_lose_and_double_nothing)
{
    static race rs[PAIRS];
    for (int i = 0; i < PAIRS; i++) {
        memset(&rs[i], 0, sizeof rs[i]);
        rs[i].c = mote_chan_make(sizeof(long), (size_t)(i % 2)); /* 0 and 1 */
        rs[i].n = TEST_SCALE(20000, 10);
        CHECK_EQ(mote_wg_add(&rs[i].wg, 2), 0);
        CHECK_EQ(mote_go(race_receiver, &rs[i]), 0);
        CHECK_EQ(mote_go(race_sender, &rs[i]), 0);
    }
    long total = 0;
    for (int i = 0; i < PAIRS; i++) {
        CHECK_EQ(mote_wg_wait(&rs[i].wg), 0);
        CHECK_EQ(rs[i].sent, rs[i].received);
        CHECK_EQ(rs[i].sum_sent, rs[i].sum_received);
        total += rs[i].received;
        CHECK_EQ(mote_chan_free(rs[i].c), 0);
    }
    printf("timeout races: %ld values crossed, none lost or doubled\n", total);
}

typedef struct pp {
    mote_chan *ping, *pong;
    long n;
    mote_wg wg;
} pp;

static void ponger(void *arg)
{
    pp *p = arg;
    long v;
    while (mote_chan_recv(p->ping, &v) == 0) {
        v++;
        CHECK_EQ(mote_chan_send(p->pong, &v), 0);
    }
    CHECK_EQ(mote_wg_done(&p->wg), 0);
}

TEST_TASK(ping_pong_across_workers_keeps_every_reply)
{
    static pp p;
    p.ping = mote_chan_make(sizeof(long), 0);
    p.pong = mote_chan_make(sizeof(long), 0);
    p.n = TEST_SCALE(100000, 10);
    CHECK_EQ(mote_wg_add(&p.wg, 2), 0);
    CHECK_EQ(mote_go(ponger, &p), 0);
    CHECK_EQ(mote_go(ponger, &p), 0); /* two pongers share the channels */
    for (long i = 0; i < p.n; i++) {
        long v = i * 2;
        CHECK_EQ(mote_chan_send(p.ping, &v), 0);
        CHECK_EQ(mote_chan_recv(p.pong, &v), 0);
        CHECK_EQ(v, i * 2 + 1);
    }
    CHECK_EQ(mote_chan_close(p.ping), 0);
    CHECK_EQ(mote_wg_wait(&p.wg), 0);
    CHECK_EQ(mote_chan_free(p.ping), 0);
    CHECK_EQ(mote_chan_free(p.pong), 0);
}

typedef struct herd {
    mote_chan *gate;
    mote_wg wg;
    long woke;
} herd;

static void herd_member(void *arg)
{
    herd *h = arg;
    CHECK_EQ(mote_chan_recv(h->gate, NULL), MOTE_ECLOSED);
    __atomic_add_fetch(&h->woke, 1, __ATOMIC_RELAXED);
    CHECK_EQ(mote_wg_done(&h->wg), 0);
}

TEST_TASK(close_wakes_a_thousand_blocked_receivers)
{
    static herd h;
    int n = TEST_SCALE(1000, 4);
    h.gate = mote_chan_make(0, 0);
    CHECK_EQ(mote_wg_add(&h.wg, n), 0);
    for (int i = 0; i < n; i++)
        CHECK_EQ(mote_go(herd_member, &h), 0);
    WAIT_UNTIL(test_metric("/tasks/blocked:tasks") == (uint64_t)n, 60);
    CHECK_EQ(h.woke, 0);
    CHECK_EQ(mote_chan_close(h.gate), 0);
    CHECK_EQ(mote_wg_wait(&h.wg), 0);
    CHECK_EQ(h.woke, n);
    CHECK_EQ(mote_chan_free(h.gate), 0);
}

typedef struct counter {
    mote_mutex m;
    long value, iters;
    mote_wg wg;
} counter;

static void count_task(void *arg)
{
    counter *c = arg;
    for (long i = 0; i < c->iters; i++) {
        CHECK_EQ(mote_mutex_lock(&c->m), 0);
        c->value++; /* plain: TSan checks the mutex orders these */
        CHECK_EQ(mote_mutex_unlock(&c->m), 0);
    }
    CHECK_EQ(mote_wg_done(&c->wg), 0);
}

TEST_TASK(mutex_counter_hammered_from_many_tasks_is_exact)
{
    static counter c = {MOTE_MUTEX_INIT, 0, 0, MOTE_WG_INIT};
    enum { T = 16 };
    c.iters = TEST_SCALE(50000, 10);
    CHECK_EQ(mote_wg_add(&c.wg, T), 0);
    for (int i = 0; i < T; i++)
        CHECK_EQ(mote_go(count_task, &c), 0);
    CHECK_EQ(mote_wg_wait(&c.wg), 0);
    CHECK_EQ(c.value, T * c.iters);
}

TEST_MAIN()
