/*
 * test_go_chan.c - the behaviour Go's own channel test programs check
 * (golang/go, test/chan/), re-expressed for mote: doubleselect.go (one
 * select, one send), fifo.go (buffered and unbuffered order), goroutines.go
 * (a chain of 10,000 tasks), nonblock.go (polling sends and receives of
 * several element sizes), select.go (a default case, channels turned off by
 * NULL), select2.go (a select loop keeps its memory), select3.go (what
 * blocks and what never does), select4.go (an unchosen case writes
 * nothing), select6.go (issue 2075: a select that lost leaves the other
 * queue working), select7.go (discarded values through every send and
 * receive form), select8.go (one-, two- and three-case selects),
 * sieve1.go and sieve2.go (prime sieves of chained tasks, and of merged
 * generators behind a select proxy), zerosize.go (channels of size-0
 * elements) and powser1.go (McIlroy's power series over rationals,
 * demand-driven through thousands of channels).
 *
 * The mapping: where Go panics (a send on, or a close of, a closed
 * channel) mote returns MOTE_ECLOSED; a Go nil channel is a case with chan
 * NULL, which never fires, while a plain send or receive on NULL is
 * -EINVAL; a select's default is a timeout of 0 (-EAGAIN); what Go blocks
 * on forever is shown still blocked by a task the run then discards, or
 * given a finite timeout.  Go's endless generators run in cases that call
 * mote_run themselves, so their channels can be freed once the run is
 * over.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mote.h"

#define MS               (1000 * 1000LL)
#define US               (1000LL)
/* Under TSan a task costs ~2 ms to start and a switch between tasks
 * ~0.5 ms: cases that start hundreds take the first size there. */
#define TSAN_OR(tsan, n) (TEST_TSAN ? (tsan) : (n))

TEST_SETUP { setenv("MOTE_WORKERS", "2", 0); }

static mote_chan *chan(size_t elem_size, size_t cap)
{
    mote_chan *c = mote_chan_make(elem_size, cap);
    CHECK(c != NULL);
    return c;
}

/* A select of one case: its result, or the select's error. */
static int select1(mote_chan *c, int op, void *elem, int64_t timeout_ns)
{
    mote_case cs[] = {{c, op, elem, -1}};
    int r = mote_select(cs, 1, timeout_ns);
    if (r < 0)
        return r;
    CHECK_EQ(r, 0);
    return cs[0].result;
}

/* ---- what runs past its case: channels and blocks kept for after the run ----
 * Go's generators never end.  Cases that have them run their own mote_run
 * and give everything back once it returned (the run discards the tasks
 * still blocked, and takes them out of the channels' queues). */

static mote_mutex keep_mu = MOTE_MUTEX_INIT;
static mote_chan **keep_chans;
static size_t keep_nchans, keep_capchans;
static void **keep_blocks;
static size_t keep_nblocks, keep_capblocks;

static void keep_push(void ***arr, size_t *n, size_t *cap, void *p)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 256;
        *arr = realloc(*arr, *cap * sizeof **arr);
        CHECK(*arr != NULL);
    }
    (*arr)[(*n)++] = p;
}

static mote_chan *keep_chan(size_t elem_size, size_t cap)
{
    mote_chan *c = chan(elem_size, cap);
    CHECK_EQ(mote_mutex_lock(&keep_mu), 0);
    keep_push((void ***)&keep_chans, &keep_nchans, &keep_capchans, c);
    CHECK_EQ(mote_mutex_unlock(&keep_mu), 0);
    return c;
}

static void *keep_alloc(size_t n)
{
    void *p = calloc(1, n);
    CHECK(p != NULL);
    CHECK_EQ(mote_mutex_lock(&keep_mu), 0);
    keep_push(&keep_blocks, &keep_nblocks, &keep_capblocks, p);
    CHECK_EQ(mote_mutex_unlock(&keep_mu), 0);
    return p;
}

/* After the run: every kept channel has nobody blocked on it any more. */
static size_t keep_release(void)
{
    size_t n = keep_nchans;
    for (size_t i = 0; i < keep_nchans; i++)
        CHECK_EQ(mote_chan_free(keep_chans[i]), 0);
    for (size_t i = 0; i < keep_nblocks; i++)
        free(keep_blocks[i]);
    free(keep_chans);
    free(keep_blocks);
    keep_chans = NULL;
    keep_blocks = NULL;
    keep_nchans = keep_capchans = keep_nblocks = keep_capblocks = 0;
    return n;
}

/* ---- doubleselect.go ----
 * One sender picks among four unbuffered channels in a select; four
 * forwarders merge them into one channel.  A select that completed two
 * of its cases would deliver a value twice. */

enum { DS_WAYS = 4 };

typedef struct ds_ctx {
    mote_chan *way[DS_WAYS], *merged, *done;
    long n;
    long carried[DS_WAYS];
    mote_wg wg;
} ds_ctx;

typedef struct ds_fwd {
    ds_ctx *d;
    int k;
} ds_fwd;

static void ds_sender(void *arg)
{
    ds_ctx *d = arg;
    for (long i = 0; i < d->n; i++) {
        mote_case cs[DS_WAYS];
        for (int k = 0; k < DS_WAYS; k++)
            cs[k] = (mote_case){d->way[k], MOTE_SEND, &i, -1};
        int r = mote_select(cs, DS_WAYS, -1);
        CHECK(r >= 0 && r < DS_WAYS);
        for (int k = 0; k < DS_WAYS; k++)
            CHECK_EQ(cs[k].result, k == r ? 0 : -1); /* the others untouched */
    }
    for (int k = 0; k < DS_WAYS; k++)
        CHECK_EQ(mote_chan_close(d->way[k]), 0);
    CHECK_EQ(mote_wg_done(&d->wg), 0);
}

static void ds_forward(void *arg)
{
    ds_fwd *f = arg;
    ds_ctx *d = f->d;
    long v, n = 0;
    int r;
    while ((r = mote_chan_recv(d->way[f->k], &v)) == 0) {
        CHECK_EQ(mote_chan_send(d->merged, &v), 0);
        n++;
    }
    CHECK_EQ(r, MOTE_ECLOSED);
    d->carried[f->k] = n;
    CHECK_EQ(mote_chan_send(d->done, NULL), 0);
    CHECK_EQ(mote_wg_done(&d->wg), 0);
}

static void ds_closer(void *arg)
{
    ds_ctx *d = arg;
    for (int k = 0; k < DS_WAYS; k++)
        CHECK_EQ(mote_chan_recv(d->done, NULL), 0);
    CHECK_EQ(mote_chan_close(d->merged), 0);
    CHECK_EQ(mote_wg_done(&d->wg), 0);
}

TEST_TASK(a_select_over_four_sends_delivers_each_value_exactly_once)
{
    ds_ctx d = {.n = TEST_SCALE(100000, 10), .wg = MOTE_WG_INIT};
    ds_fwd f[DS_WAYS];
    for (int k = 0; k < DS_WAYS; k++)
        d.way[k] = chan(sizeof(long), 0);
    d.merged = chan(sizeof(long), 0);
    d.done = chan(0, 0);
    CHECK_EQ(mote_wg_add(&d.wg, DS_WAYS + 2), 0);
    CHECK_EQ(mote_go(ds_sender, &d), 0);
    for (int k = 0; k < DS_WAYS; k++) {
        f[k] = (ds_fwd){&d, k};
        CHECK_EQ(mote_go(ds_forward, &f[k]), 0);
    }
    CHECK_EQ(mote_go(ds_closer, &d), 0);
    unsigned char *seen = calloc((size_t)d.n, 1);
    CHECK(seen != NULL);
    long v, got = 0;
    int r;
    while ((r = mote_chan_recv(d.merged, &v)) == 0) {
        CHECK(v >= 0 && v < d.n);
        CHECK_EQ(seen[v], 0);
        seen[v] = 1;
        got++;
    }
    CHECK_EQ(r, MOTE_ECLOSED);
    CHECK_EQ(got, d.n);
    CHECK_EQ(mote_wg_wait(&d.wg), 0);
    long sum = 0;
    for (int k = 0; k < DS_WAYS; k++) {
        CHECK(d.carried[k] > 0); /* three idle forwarders wait at every select */
        sum += d.carried[k];
        CHECK_EQ(mote_chan_free(d.way[k]), 0);
    }
    CHECK_EQ(sum, d.n);
    free(seen);
    CHECK_EQ(mote_chan_free(d.merged), 0);
    CHECK_EQ(mote_chan_free(d.done), 0);
}

/* ---- fifo.go ---- */

TEST_TASK(a_buffered_channel_gives_values_back_in_send_order)
{
    static const size_t caps[] = {10, 1, 1000};
    for (size_t t = 0; t < sizeof caps / sizeof caps[0]; t++) {
        long n = (long)caps[t];
        mote_chan *c = chan(sizeof(long), caps[t]);
        for (long i = 0; i < n; i++) /* room for each: never blocks */
            CHECK_EQ(mote_chan_send(c, &i), 0);
        CHECK_EQ(mote_chan_len(c), n);
        CHECK_EQ(mote_chan_trysend(c, &n), -EAGAIN);
        for (long i = 0; i < n; i++) {
            long v = -1;
            CHECK_EQ(mote_chan_recv(c, &v), 0);
            CHECK_EQ(v, i);
        }
        CHECK_EQ(mote_chan_tryrecv(c, NULL), -EAGAIN);
        CHECK_EQ(mote_chan_free(c), 0);
    }
}

/* A relay of receivers: link i waits for its turn, takes one value from
 * the shared unbuffered channel (it must be i), then passes the turn on.
 * The values are sent back to back by one task. */
typedef struct fifo_link {
    mote_chan *values, *turn, *next;
    long expect;
    mote_wg *wg;
} fifo_link;

static void fifo_link_task(void *arg)
{
    fifo_link *l = arg;
    CHECK_EQ(mote_chan_recv(l->turn, NULL), 0);
    long v = -1;
    CHECK_EQ(mote_chan_recv(l->values, &v), 0);
    CHECK_EQ(v, l->expect);
    CHECK_EQ(mote_chan_send(l->next, NULL), 0);
    CHECK_EQ(mote_wg_done(l->wg), 0);
}

TEST_TASK(unbuffered_values_reach_a_relay_of_receivers_in_send_order)
{
    long n = TSAN_OR(100, TEST_SCALE(2000, 4));
    mote_wg wg = MOTE_WG_INIT;
    mote_chan *values = chan(sizeof(long), 0);
    mote_chan **turn = calloc((size_t)n + 1, sizeof *turn);
    fifo_link *links = calloc((size_t)n, sizeof *links);
    CHECK(turn != NULL && links != NULL);
    for (long i = 0; i <= n; i++)
        turn[i] = chan(0, 0);
    CHECK_EQ(mote_wg_add(&wg, n), 0);
    for (long i = 0; i < n; i++) {
        links[i] = (fifo_link){values, turn[i], turn[i + 1], i, &wg};
        CHECK_EQ(mote_go(fifo_link_task, &links[i]), 0);
    }
    CHECK_EQ(mote_chan_send(turn[0], NULL), 0);
    for (long i = 0; i < n; i++)
        CHECK_EQ(mote_chan_send(values, &i), 0);
    CHECK_EQ(mote_chan_recv(turn[n], NULL), 0);
    CHECK_EQ(mote_wg_wait(&wg), 0);
    for (long i = 0; i <= n; i++)
        CHECK_EQ(mote_chan_free(turn[i]), 0);
    CHECK_EQ(mote_chan_free(values), 0);
    free(turn);
    free(links);
}

/* ---- goroutines.go ----
 * Ten thousand tasks, each waiting on the channel to its right and
 * passing what comes (plus one) to its left. */

typedef struct relay {
    mote_chan *left, *right;
    mote_wg *wg;
} relay;

static void relay_task(void *arg)
{
    relay *r = arg;
    long v = -1;
    CHECK_EQ(mote_chan_recv(r->right, &v), 0);
    v++;
    CHECK_EQ(mote_chan_send(r->left, &v), 0);
    CHECK_EQ(mote_wg_done(r->wg), 0);
}

static void relay_feed(void *arg)
{
    relay *r = arg;
    long one = 1;
    CHECK_EQ(mote_chan_send(r->right, &one), 0);
    CHECK_EQ(mote_wg_done(r->wg), 0);
}

TEST_TASK(a_chain_of_ten_thousand_tasks_hands_a_value_end_to_end)
{
    long n = TSAN_OR(150, TEST_SCALE(10000, 5));
    mote_wg wg = MOTE_WG_INIT;
    mote_chan **ch = calloc((size_t)n + 1, sizeof *ch);
    relay *links = calloc((size_t)n + 1, sizeof *links);
    CHECK(ch != NULL && links != NULL);
    for (long i = 0; i <= n; i++)
        ch[i] = chan(sizeof(long), 0);
    CHECK_EQ(mote_wg_add(&wg, n + 1), 0);
    for (long i = 0; i < n; i++) {
        links[i] = (relay){ch[i], ch[i + 1], &wg};
        CHECK_EQ(mote_go(relay_task, &links[i]), 0);
    }
    test_wait_blocked((uint64_t)n); /* every link parked on its right-hand channel */
    CHECK_EQ(mote_chan_len(ch[0]), 0);
    links[n] = (relay){NULL, ch[n], &wg};
    CHECK_EQ(mote_go(relay_feed, &links[n]), 0);
    long v = -1;
    CHECK_EQ(mote_chan_recv(ch[0], &v), 0);
    CHECK_EQ(v, 1 + n); /* every link passed it on once */
    CHECK_EQ(mote_wg_wait(&wg), 0);
    for (long i = 0; i <= n; i++)
        CHECK_EQ(mote_chan_free(ch[i]), 0);
    free(ch);
    free(links);
}

/* ---- nonblock.go ----
 * Sends and receives that must not block (a select with timeout 0, or the
 * try calls) on channels of 4-, 8-, 1- and 24-byte elements, unbuffered
 * and with one slot: they fail with -EAGAIN while no peer is there, and
 * one polling loop completes once a peer comes. */

typedef struct nb_peer {
    mote_chan *c, *sync;
    const void *value;
    size_t size;
} nb_peer;

static void nb_receiver(void *arg)
{
    nb_peer *p = arg;
    unsigned char got[32];
    memset(got, 0xee, sizeof got);
    CHECK_EQ(mote_chan_recv(p->c, got), 0);
    CHECK(memcmp(got, p->value, p->size) == 0);
    CHECK_EQ(mote_chan_send(p->sync, NULL), 0);
}

static void nb_sender(void *arg)
{
    nb_peer *p = arg;
    CHECK_EQ(mote_chan_send(p->c, p->value), 0);
    CHECK_EQ(mote_chan_send(p->sync, NULL), 0);
}

/* Polls op on c until it completes, napping between tries as Go's test
 * does; every other try is the try call instead of a select. */
static void nb_poll(mote_chan *c, int op, void *elem)
{
    int64_t end = mote_now() + 60000 * MS; /* a bug fails; load does not */
    for (long tries = 0;; tries++) {
        int r;
        if (tries % 2)
            r = op == MOTE_SEND ? mote_chan_trysend(c, elem) : mote_chan_tryrecv(c, elem);
        else
            r = select1(c, op, elem, 0);
        if (r == 0)
            return;
        CHECK_EQ(r, -EAGAIN);
        CHECK(mote_now() < end);
        mote_sleep(10 * US);
        mote_yield();
    }
}

TEST_TASK(polling_sends_and_receives_complete_once_a_peer_comes)
{
    static const int32_t i32_to = 123, i32_from = 234;
    static const int64_t i64_to = 123456, i64_from = 234567;
    static const bool b_to = true, b_from = true;
    static const char s_to[24] = "hello", s_from[24] = "hello again";
    static const struct {
        size_t size;
        const void *to_peer, *from_peer;
    } kinds[] = {{sizeof i32_to, &i32_to, &i32_from},
                 {sizeof i64_to, &i64_to, &i64_from},
                 {sizeof b_to, &b_to, &b_from},
                 {sizeof s_to, s_to, s_from}};
    mote_chan *sync = chan(0, 0);
    for (size_t buffer = 0; buffer < 2; buffer++) {
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            size_t size = kinds[k].size;
            mote_chan *c = chan(size, buffer);
            unsigned char buf[32];
            memset(buf, 0xee, sizeof buf);
            /* nobody sends: a poll finds nothing and writes nothing */
            CHECK_EQ(select1(c, MOTE_RECV, buf, 0), -EAGAIN);
            CHECK_EQ(mote_chan_tryrecv(c, buf), -EAGAIN);
            CHECK_EQ(buf[0], 0xee);
            if (buffer == 0) { /* nobody receives */
                CHECK_EQ(select1(c, MOTE_SEND, (void *)kinds[k].to_peer, 0), -EAGAIN);
                CHECK_EQ(mote_chan_trysend(c, kinds[k].to_peer), -EAGAIN);
            }

            nb_peer p = {c, sync, kinds[k].to_peer, size};
            CHECK_EQ(mote_go(nb_receiver, &p), 0);
            nb_poll(c, MOTE_SEND, (void *)kinds[k].to_peer);
            CHECK_EQ(mote_chan_recv(sync, NULL), 0);

            nb_peer q = {c, sync, kinds[k].from_peer, size};
            CHECK_EQ(mote_go(nb_sender, &q), 0);
            if (buffer > 0) /* the send went into the buffer */
                CHECK_EQ(mote_chan_recv(sync, NULL), 0);
            nb_poll(c, MOTE_RECV, buf);
            CHECK(memcmp(buf, kinds[k].from_peer, size) == 0);
            CHECK_EQ(buf[size], 0xee); /* exactly the element's bytes */
            if (buffer == 0)
                CHECK_EQ(mote_chan_recv(sync, NULL), 0);
            CHECK_EQ(mote_chan_len(c), 0);
            CHECK_EQ(mote_chan_free(c), 0);
        }
    }
    CHECK_EQ(mote_chan_free(sync), 0);
}

/* ---- select.go ----
 * A select of two sends with a default, in a loop: each fire turns its
 * case off (its channel NULL, Go's nil), until the default is taken.  Each
 * value is 1 << (how many sends fired before). */

static int send_until_default(mote_chan *a, mote_chan *b, unsigned *shift, int *first)
{
    mote_case cs[2] = {{a, MOTE_SEND, NULL, -1}, {b, MOTE_SEND, NULL, -1}};
    for (int n = 0;; n++) {
        unsigned v = 1u << *shift;
        cs[0].elem = cs[1].elem = &v;
        cs[0].result = cs[1].result = -1;
        int r = mote_select(cs, 2, 0);
        if (r == -EAGAIN)
            return n;
        CHECK(r == 0 || r == 1);
        CHECK(cs[r].chan != NULL); /* a NULL case never fires */
        CHECK_EQ(cs[r].result, 0);
        CHECK_EQ(cs[1 - r].result, -1);
        if (n == 0 && first)
            *first = r;
        cs[r].chan = NULL;
        (*shift)++;
    }
}

TEST_TASK(a_select_with_default_sends_once_on_each_free_channel_then_defaults)
{
    enum { ROUNDS = 200 };
    int a_first = 0;
    for (int round = 0; round < ROUNDS; round++) {
        mote_chan *a = chan(sizeof(unsigned), 1), *b = chan(sizeof(unsigned), 1);
        unsigned shift = 0, av = 0, bv = 0;
        int first = -1;
        CHECK_EQ(send_until_default(a, b, &shift, &first), 2);
        CHECK_EQ(shift, 2);
        CHECK_EQ(mote_chan_recv(a, &av), 0);
        CHECK_EQ(mote_chan_recv(b, &bv), 0);
        CHECK_EQ(av | bv, 3);
        CHECK_EQ(first == 0 ? av : bv, 1); /* the first send carried 1 << 0 */
        a_first += first == 0;
        CHECK_EQ(send_until_default(a, NULL, &shift, NULL), 1);
        CHECK_EQ(shift, 3);
        CHECK_EQ(mote_chan_recv(a, &av), 0);
        CHECK_EQ(av, 4);
        CHECK_EQ(mote_chan_len(b), 0);
        CHECK_EQ(send_until_default(NULL, NULL, &shift, NULL), 0);
        CHECK_EQ(mote_chan_free(a), 0);
        CHECK_EQ(mote_chan_free(b), 0);
    }
    /* both channels free: which goes first is a coin toss (2^-199 to fail) */
    CHECK(a_first > 0 && a_first < ROUNDS);
}

/* ---- select2.go ----
 * Rounds of n values, each received by a select that also waits on idle
 * channels: Go's two cases; twelve (records on the heap); two with a
 * timeout that never fires (a timer armed and cancelled each time); and
 * selects that time out on idle channels only.  After a warm-up round,
 * two more must leave the heap and the RSS where they were. */

enum { S2_IDLE = 11 };

typedef struct s2_ctx {
    mote_chan *c, *idle[S2_IDLE];
    long n;
    mote_wg wg;
} s2_ctx;

static void s2_sender(void *arg)
{
    s2_ctx *x = arg;
    for (long i = 0; i < x->n; i++)
        CHECK_EQ(mote_chan_send(x->c, &i), 0);
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

static void s2_round(s2_ctx *x)
{
    for (int kind = 0; kind < 3; kind++) {
        CHECK_EQ(mote_wg_add(&x->wg, 1), 0);
        CHECK_EQ(mote_go(s2_sender, x), 0);
        size_t n = kind == 1 ? 1 + S2_IDLE : 2;
        int64_t timeout = kind == 2 ? 600000 * MS : -1;
        for (long i = 0; i < x->n; i++) {
            long v = -1, junk = -1;
            mote_case cs[1 + S2_IDLE];
            for (size_t k = 0; k + 1 < n; k++)
                cs[k] = (mote_case){x->idle[k], MOTE_RECV, &junk, -1};
            cs[n - 1] = (mote_case){x->c, MOTE_RECV, &v, -1};
            CHECK_EQ(mote_select(cs, n, timeout), (int)n - 1);
            CHECK_EQ(v, i);
            CHECK_EQ(junk, -1);
        }
        CHECK_EQ(mote_wg_wait(&x->wg), 0);
    }
    for (long i = 0; i < x->n / 20; i++) {
        long junk = -1;
        mote_case cs[3];
        for (size_t k = 0; k < 3; k++)
            cs[k] = (mote_case){x->idle[k], MOTE_RECV, &junk, -1};
        CHECK_EQ(mote_select(cs, 1 + (size_t)i % 3, 1), -ETIMEDOUT);
        CHECK_EQ(junk, -1);
    }
}

/* One worker: the sender and the receiver take turns on it, so every
 * other select blocks, and n can be large; two: they meet across threads
 * (30 us a hand-off on a VM whose idle worker sleeps), with a smaller n. */
static void s2_main(void *arg)
{
    s2_ctx x = {.c = chan(sizeof(long), 0), .n = *(long *)arg, .wg = MOTE_WG_INIT};
    for (int k = 0; k < S2_IDLE; k++)
        x.idle[k] = chan(sizeof(long), 0);
    s2_round(&x); /* warm-up: caches, pools and timer heaps fill */
    uint64_t heap0 = test_metric("/heap/inuse:bytes");
    uint64_t rss0 = test_metric("/process/rss:bytes");
    s2_round(&x);
    s2_round(&x);
    int64_t heap = (int64_t)(test_metric("/heap/inuse:bytes") - heap0);
    int64_t rss = (int64_t)(test_metric("/process/rss:bytes") - rss0);
    long selects = 2 * (3 * x.n + x.n / 20);
    printf("%ld selects on %llu workers: heap in use %+lld bytes, rss %+lld bytes\n",
           selects, (unsigned long long)test_metric("/sched/workers:threads"),
           (long long)heap, (long long)rss);
    /* 2 bytes a select would pass the first bound (a record is dozens);
     * the slack is for a block another worker freed and its owner has
     * not collected yet */
    CHECK(heap < selects * 2 + 32 * 1024);
    CHECK(TEST_TSAN || rss < 64 * 1024 * 1024); /* (TSan's own clocks grow) */
    CHECK_EQ(mote_chan_free(x.c), 0);
    for (int k = 0; k < S2_IDLE; k++)
        CHECK_EQ(mote_chan_free(x.idle[k]), 0);
}

TEST(a_loop_of_selects_leaves_the_heap_and_rss_where_they_were)
{
    long one = TSAN_OR(10000, TEST_SCALE(100000, 5)), two = TEST_SCALE(4000, 4);
    CHECK_EQ(test_run_env("MOTE_WORKERS", "1", s2_main, &one), 0);
    CHECK_EQ(test_run_env("MOTE_WORKERS", "2", s2_main, &two), 0);
}

/* ---- select3.go ---- */

TEST_TASK(a_null_channel_case_never_fires_and_a_plain_op_on_null_is_einval)
{
    int v = 7;
    CHECK_EQ(mote_chan_send(NULL, &v), -EINVAL); /* Go: blocks forever */
    CHECK_EQ(mote_chan_recv(NULL, &v), -EINVAL);
    CHECK_EQ(mote_chan_trysend(NULL, &v), -EINVAL);
    CHECK_EQ(mote_chan_tryrecv(NULL, &v), -EINVAL);
    CHECK_EQ(v, 7);
    mote_case s[] = {{NULL, MOTE_SEND, &v, -1}};
    mote_case r[] = {{NULL, MOTE_RECV, &v, -1}};
    mote_case both[] = {{NULL, MOTE_RECV, &v, -1}, {NULL, MOTE_SEND, &v, -1}};
    CHECK_EQ(mote_select(s, 1, 0), -EAGAIN); /* with a default: the default */
    CHECK_EQ(mote_select(r, 1, 0), -EAGAIN);
    CHECK_EQ(mote_select(both, 2, 0), -EAGAIN);
    CHECK_EQ(s[0].result + r[0].result + both[0].result + both[1].result, -4);
    CHECK_EQ(v, 7);
    /* beside a ready channel, the ready one fires every time */
    mote_chan *c = chan(sizeof(int), 1);
    for (int i = 0; i < 1000; i++) {
        CHECK_EQ(mote_chan_trysend(c, &i), 0);
        mote_case cs[] = {
            {NULL, MOTE_RECV, &v, -1}, {c, MOTE_RECV, &v, -1}, {NULL, MOTE_SEND, &v, -1}};
        CHECK_EQ(mote_select(cs, 3, i % 2 ? -1 : 0), 1);
        CHECK_EQ(v, i);
        CHECK_EQ(cs[0].result + cs[2].result, -2);
    }
    CHECK_EQ(mote_chan_free(c), 0);
}

/* Everything here returns without any peer: were one to block, the run
 * would have no task left to wake it and mote_run would fail with
 * -EDEADLK (the selects with a timeout fail with -ETIMEDOUT instead). */
TEST_TASK(operations_go_never_blocks_on_complete_without_a_peer)
{
    mote_chan *closed = chan(sizeof(int), 0);
    CHECK_EQ(mote_chan_close(closed), 0);
    int v;

    /* a send with room in the buffer */
    mote_chan *c = chan(sizeof(int), 1);
    CHECK_EQ(mote_chan_send(c, &(int){7}), 0);
    CHECK_EQ(mote_chan_len(c), 1);
    CHECK_EQ(mote_chan_recv(c, &v), 0);
    CHECK_EQ(v, 7);

    /* receives from a closed channel: the zero value, and "closed" */
    for (int i = 0; i < 10; i++) {
        v = 9;
        CHECK_EQ(mote_chan_recv(closed, &v), MOTE_ECLOSED);
        CHECK_EQ(v, 0);
        v = 9;
        CHECK_EQ(mote_chan_tryrecv(closed, &v), MOTE_ECLOSED);
        CHECK_EQ(v, 0);
        CHECK_EQ(mote_chan_recv(closed, NULL), MOTE_ECLOSED);
    }

    /* a send on a closed channel and a second close: Go panics */
    CHECK_EQ(mote_chan_send(closed, &(int){7}), MOTE_ECLOSED);
    CHECK_EQ(mote_chan_trysend(closed, &(int){7}), MOTE_ECLOSED);
    CHECK_EQ(mote_chan_close(closed), MOTE_ECLOSED);

    /* a select with only a default, or NULL channels and a default */
    CHECK_EQ(mote_select(NULL, 0, 0), -EAGAIN);
    mote_case nulls[] = {{NULL, MOTE_RECV, &v, -1}, {NULL, MOTE_SEND, &v, -1}};
    CHECK_EQ(mote_select(nulls, 1, 0), -EAGAIN);
    CHECK_EQ(mote_select(nulls + 1, 1, 0), -EAGAIN);

    /* selects with a ready channel, with and without a default */
    for (int t = 0; t < 3; t++) {
        int64_t timeout = t == 0 ? 0 : t == 1 ? -1 : 600000 * MS;
        CHECK_EQ(select1(c, MOTE_SEND, &(int){8}, timeout), 0);
        v = 0;
        CHECK_EQ(select1(c, MOTE_RECV, &v, timeout), 0);
        CHECK_EQ(v, 8);

        /* selects on a closed channel behave as the plain operations */
        v = 9;
        CHECK_EQ(select1(closed, MOTE_RECV, &v, timeout), MOTE_ECLOSED);
        CHECK_EQ(v, 0);
        CHECK_EQ(select1(closed, MOTE_RECV, NULL, timeout), MOTE_ECLOSED);
        CHECK_EQ(select1(closed, MOTE_SEND, &(int){7}, timeout), MOTE_ECLOSED);
        /* beside an idle channel */
        mote_chan *idle = chan(sizeof(int), 0);
        int w = 5;
        v = 9;
        mote_case cs[] = {{idle, MOTE_RECV, &w, -1}, {closed, MOTE_RECV, &v, -1}};
        CHECK_EQ(mote_select(cs, 2, timeout), 1);
        CHECK_EQ(cs[1].result, MOTE_ECLOSED);
        CHECK_EQ(v, 0);
        CHECK_EQ(w, 5);
        CHECK_EQ(mote_chan_free(idle), 0);
    }
    CHECK_EQ(mote_chan_free(c), 0);
    CHECK_EQ(mote_chan_free(closed), 0);
}

/* What Go always blocks on.  The plain operations have no timeout; the
 * selects take timeout_ns. */
enum {
    BK_RECV,        /* receive on an unbuffered channel, no sender */
    BK_SEND,        /* send on an unbuffered channel, no receiver */
    BK_SEND_FULL,   /* send on a full buffered channel */
    BK_SELECT_NONE, /* select {} */
    BK_SELECT_NULL_RECV,
    BK_SELECT_NULL_SEND,
    BK_SELECT_NULL_BOTH,
    BK_SELECT_IDLE,   /* a receive case on a channel nobody sends on */
    BK_SELECT_ITSELF, /* a send and a receive case on one unbuffered channel */
    BK_SELECT_MANY,   /* twelve of those (the records go on the heap) */
    BK_N
};

static int always_blocks(int kind, mote_chan *c, int *v, int64_t timeout_ns)
{
    int out = 5;
    mote_case cs[12];
    switch (kind) {
    case BK_RECV: return mote_chan_recv(c, v);
    case BK_SEND:
    case BK_SEND_FULL: return mote_chan_send(c, &out);
    case BK_SELECT_NONE: return mote_select(NULL, 0, timeout_ns);
    case BK_SELECT_NULL_RECV:
        cs[0] = (mote_case){NULL, MOTE_RECV, v, -1};
        return mote_select(cs, 1, timeout_ns);
    case BK_SELECT_NULL_SEND:
        cs[0] = (mote_case){NULL, MOTE_SEND, &out, -1};
        return mote_select(cs, 1, timeout_ns);
    case BK_SELECT_NULL_BOTH:
        cs[0] = (mote_case){NULL, MOTE_RECV, v, -1};
        cs[1] = (mote_case){NULL, MOTE_SEND, &out, -1};
        return mote_select(cs, 2, timeout_ns);
    case BK_SELECT_IDLE:
        cs[0] = (mote_case){c, MOTE_RECV, v, -1};
        return mote_select(cs, 1, timeout_ns);
    default:
        for (int k = 0; k < 12; k++)
            cs[k] = (mote_case){c, k % 2 ? MOTE_RECV : MOTE_SEND,
                                k % 2 ? (void *)v : &out, -1};
        return mote_select(cs, kind == BK_SELECT_ITSELF ? 2 : 12, timeout_ns);
    }
}

static mote_chan *bk_make(int kind)
{
    switch (kind) {
    case BK_RECV:
    case BK_SEND:
    case BK_SELECT_IDLE:
    case BK_SELECT_ITSELF:
    case BK_SELECT_MANY: return chan(sizeof(int), 0);
    case BK_SEND_FULL: {
        mote_chan *c = chan(sizeof(int), 1);
        CHECK_EQ(mote_chan_trysend(c, &(int){42}), 0);
        return c;
    }
    default: return NULL;
    }
}

typedef struct bk_ctx {
    int kind;
    mote_chan *c;
    int v;
    atomic_int returned;
} bk_ctx;

static bk_ctx bk[BK_N];

static void bk_task(void *arg)
{
    bk_ctx *b = arg;
    always_blocks(b->kind, b->c, &b->v, -1);
    atomic_store(&b->returned, 1);
}

static void bk_main(void *arg)
{
    (void)arg;
    for (int k = 0; k < BK_N; k++)
        CHECK_EQ(mote_go(bk_task, &bk[k]), 0);
    test_wait_blocked(BK_N);
    int64_t t0 = mote_now();
    CHECK_EQ(mote_sleep(50 * MS), 0);
    CHECK(mote_now() - t0 >= 50 * MS);
    for (int k = 0; k < BK_N; k++) {
        CHECK_EQ(atomic_load(&bk[k].returned), 0);
        if (bk[k].c) /* a task is blocked on it */
            CHECK_EQ(mote_chan_free(bk[k].c), -EBUSY);
    }
    CHECK(test_metric("/tasks/blocked:tasks") >= BK_N);
    /* returning ends the run: the blocked tasks are discarded */
}

TEST(operations_go_always_blocks_on_stay_blocked_until_the_run_ends)
{
    for (int k = 0; k < BK_N; k++) {
        bk[k] = (bk_ctx){.kind = k, .c = bk_make(k), .v = -7};
        atomic_init(&bk[k].returned, 0);
    }
    CHECK_EQ(mote_run(bk_main, NULL), 0);
    for (int k = 0; k < BK_N; k++) {
        CHECK_EQ(atomic_load(&bk[k].returned), 0); /* discarded, never woken */
        CHECK_EQ(bk[k].v, -7);                     /* nothing received */
    }
    /* the queues are empty now; the full channel kept its value */
    CHECK_EQ(mote_chan_len(bk[BK_SEND_FULL].c), 1);
    int v = 0;
    CHECK_EQ(mote_chan_tryrecv(bk[BK_SEND_FULL].c, &v), 0);
    CHECK_EQ(v, 42);
    CHECK_EQ(mote_chan_trysend(bk[BK_RECV].c, &v), -EAGAIN); /* no receiver left */
    CHECK_EQ(mote_chan_tryrecv(bk[BK_SEND].c, &v), -EAGAIN); /* no sender left */
    for (int k = BK_SELECT_ITSELF; k <= BK_SELECT_MANY; k++) {
        CHECK_EQ(mote_chan_trysend(bk[k].c, &v), -EAGAIN);
        CHECK_EQ(mote_chan_tryrecv(bk[k].c, &v), -EAGAIN);
    }
    for (int k = 0; k < BK_N; k++)
        CHECK_EQ(mote_chan_free(bk[k].c), 0);
}

TEST_TASK(selects_go_always_blocks_on_time_out_when_given_a_timeout)
{
    for (int k = BK_SELECT_NONE; k < BK_N; k++) {
        mote_chan *c = bk_make(k);
        int v = -7;
        int64_t t0 = mote_now();
        CHECK_EQ(always_blocks(k, c, &v, 30 * MS), -ETIMEDOUT);
        CHECK(mote_now() - t0 >= 30 * MS);
        CHECK_EQ(v, -7);
        if (c) { /* nothing of the select stayed behind */
            CHECK_EQ(mote_chan_trysend(c, &v), -EAGAIN);
            CHECK_EQ(mote_chan_tryrecv(c, &v), -EAGAIN);
        }
        CHECK_EQ(always_blocks(k, c, &v, 0), -EAGAIN); /* with a default */
        CHECK_EQ(mote_chan_free(c), 0);
    }
}

/* ---- select4.go ----
 * Only the case that fires writes its element: the other receive case's
 * destination is left alone, whether the select found its case ready,
 * blocked for it, or found its channel closed. */

typedef struct later_send {
    mote_chan *c;
    int value;
    mote_wg done;
} later_send;

static void later_send_task(void *arg)
{
    later_send *l = arg;
    test_wait_blocked(1); /* the select waits */
    CHECK_EQ(mote_chan_send(l->c, &l->value), 0);
    CHECK_EQ(mote_wg_done(&l->done), 0);
}

TEST_TASK(only_the_chosen_receive_case_writes_its_element)
{
    mote_chan *c = chan(sizeof(int), 1), *idle = chan(sizeof(int), 0);
    int x = -1, y = -2;
    mote_case cs[] = {{idle, MOTE_RECV, &y, -1}, {c, MOTE_RECV, &x, -1}};

    CHECK_EQ(mote_chan_send(c, &(int){42}), 0); /* ready */
    CHECK_EQ(mote_select(cs, 2, -1), 1);
    CHECK_EQ(cs[1].result, 0);
    CHECK_EQ(x, 42);
    CHECK_EQ(y, -2);
    CHECK_EQ(cs[0].result, -1);

    later_send l = {c, 43, MOTE_WG_INIT}; /* completed by a peer */
    CHECK_EQ(mote_wg_add(&l.done, 1), 0);
    CHECK_EQ(mote_go(later_send_task, &l), 0);
    CHECK_EQ(mote_select(cs, 2, -1), 1);
    CHECK_EQ(x, 43);
    CHECK_EQ(y, -2);
    CHECK_EQ(cs[0].result, -1);
    CHECK_EQ(mote_wg_wait(&l.done), 0);

    CHECK_EQ(mote_chan_close(c), 0); /* closed: zeroes its own element only */
    CHECK_EQ(mote_select(cs, 2, -1), 1);
    CHECK_EQ(cs[1].result, MOTE_ECLOSED);
    CHECK_EQ(x, 0);
    CHECK_EQ(y, -2);
    CHECK_EQ(cs[0].result, -1);
    CHECK_EQ(mote_chan_free(c), 0);
    CHECK_EQ(mote_chan_free(idle), 0);
}

/* ---- select6.go (Go issue 2075) ----
 * A select waiting on c1 and c2 sits in c1's queue among plain receivers
 * (after them, and before others); c2 fires.  Its record left in c1's
 * queue must not cost anyone a wake-up: every later send on c1 finds a
 * receiver. */

typedef struct s6_ctx {
    mote_chan *c1, *c2, *c3;
    mote_wg wg;
} s6_ctx;

static void s6_receiver(void *arg)
{
    s6_ctx *x = arg;
    CHECK_EQ(mote_chan_recv(x->c1, NULL), 0);
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

static void s6_selector(void *arg)
{
    s6_ctx *x = arg;
    bool t = false;
    mote_case cs[] = {{x->c1, MOTE_RECV, &t, -1}, {x->c2, MOTE_RECV, &t, -1}};
    CHECK_EQ(mote_select(cs, 2, -1), 1); /* nobody sends on c1 yet */
    CHECK(t);
    CHECK_EQ(mote_chan_send(x->c3, &t), 0);
    CHECK_EQ(mote_chan_recv(x->c1, NULL), 0);
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

static void s6_sender(void *arg)
{
    s6_ctx *x = arg;
    CHECK_EQ(mote_chan_send(x->c2, &(bool){true}), 0);
    CHECK_EQ(mote_wg_done(&x->wg), 0);
}

TEST_TASK(a_select_that_lost_on_a_channel_leaves_its_queue_working)
{
    s6_ctx x = {chan(sizeof(bool), 0), chan(sizeof(bool), 0), chan(sizeof(bool), 0),
                MOTE_WG_INIT};
    int rounds = TSAN_OR(40, TEST_SCALE(300, 3));
    for (int round = 0; round < rounds; round++) {
        int before = round % 3, after = (round / 3) % 2; /* Go's: 1 and 0 */
        CHECK_EQ(mote_wg_add(&x.wg, before + after + 2), 0);
        for (int i = 0; i < before; i++) {
            CHECK_EQ(mote_go(s6_receiver, &x), 0);
            test_wait_blocked((uint64_t)i + 1);
        }
        CHECK_EQ(mote_go(s6_selector, &x), 0);
        test_wait_blocked((uint64_t)before + 1);
        for (int i = 0; i < after; i++) {
            CHECK_EQ(mote_go(s6_receiver, &x), 0);
            test_wait_blocked((uint64_t)before + 2 + i);
        }
        CHECK_EQ(mote_go(s6_sender, &x), 0);
        bool t = false;
        CHECK_EQ(mote_chan_recv(x.c3, &t), 0);
        CHECK(t);
        for (int i = 0; i < before + after + 1; i++) /* one per receiver */
            CHECK_EQ(select1(x.c1, MOTE_SEND, &(bool){true}, 600000 * MS), 0);
        CHECK_EQ(mote_wg_wait(&x.wg), 0);
        CHECK_EQ(mote_chan_trysend(x.c1, &t), -EAGAIN); /* nobody left */
    }
    CHECK_EQ(mote_chan_free(x.c1), 0);
    CHECK_EQ(mote_chan_free(x.c2), 0);
    CHECK_EQ(mote_chan_free(x.c3), 0);
}

/* ---- select7.go ----
 * A value sent and discarded by the receiver (elem NULL), for each of a
 * plain operation, a one-case select and a two-case select on either
 * side, with the receiver blocked first and with the sender blocked
 * first. */

enum { FORM_PLAIN, FORM_SELECT1, FORM_SELECT2, FORM_N };

static int form_op(int form, mote_chan *c, int op, void *elem)
{
    if (form == FORM_PLAIN)
        return op == MOTE_SEND ? mote_chan_send(c, elem) : mote_chan_recv(c, elem);
    if (form == FORM_SELECT1)
        return select1(c, op, elem, -1);
    mote_chan *idle = chan(sizeof(int), 0);
    int spare = 3;
    mote_case cs[] = {{c, op, elem, -1}, {idle, op, &spare, -1}};
    int r = mote_select(cs, 2, -1);
    CHECK_EQ(r, 0);
    CHECK_EQ(mote_chan_free(idle), 0);
    return cs[0].result;
}

typedef struct s7_ctx {
    mote_chan *c;
    int form, sender_first;
    mote_wg done;
} s7_ctx;

static void s7_receiver(void *arg)
{
    s7_ctx *x = arg;
    if (x->sender_first)
        test_wait_blocked(1);
    CHECK_EQ(form_op(x->form, x->c, MOTE_RECV, NULL), 0);
    CHECK_EQ(mote_wg_done(&x->done), 0);
}

TEST_TASK(a_discarded_value_passes_between_every_send_and_receive_form)
{
    int reps = TSAN_OR(3, TEST_SCALE(20, 4));
    for (int rep = 0; rep < reps; rep++)
        for (int rf = 0; rf < FORM_N; rf++)
            for (int sf = 0; sf < FORM_N; sf++)
                for (int order = 0; order < 2; order++) {
                    s7_ctx x = {chan(sizeof(int), 0), rf, order, MOTE_WG_INIT};
                    CHECK_EQ(mote_wg_add(&x.done, 1), 0);
                    CHECK_EQ(mote_go(s7_receiver, &x), 0);
                    if (!order)
                        test_wait_blocked(1);
                    int one = 1;
                    CHECK_EQ(form_op(sf, x.c, MOTE_SEND, &one), 0);
                    CHECK_EQ(mote_wg_wait(&x.done), 0);
                    CHECK_EQ(mote_chan_tryrecv(x.c, NULL), -EAGAIN);
                    CHECK_EQ(mote_chan_free(x.c), 0);
                }
}

/* ---- select8.go ----
 * A producer offers 5 on ch without end.  A one-case receive takes it; a
 * select of only a default takes the default; a receive with a default
 * takes a 5 or the default; a send case on ch beside the receive never
 * fires, as nothing ever receives on ch but us (a select does not pair
 * with itself).  Every value taken is one the producer counted. */

typedef struct s8_ctx {
    mote_chan *ch, *quit;
    long sent;
    mote_wg done;
} s8_ctx;

static void s8_producer(void *arg)
{
    s8_ctx *x = arg;
    int five = 5;
    for (;;) {
        mote_case cs[] = {{x->ch, MOTE_SEND, &five, -1}, {x->quit, MOTE_RECV, NULL, -1}};
        int r = mote_select(cs, 2, -1);
        if (r == 1) {
            CHECK_EQ(cs[1].result, MOTE_ECLOSED);
            break;
        }
        CHECK_EQ(r, 0);
        CHECK_EQ(cs[0].result, 0);
        x->sent++;
    }
    CHECK_EQ(mote_wg_done(&x->done), 0);
}

TEST_TASK(one_two_and_three_case_selects_take_only_what_is_offered)
{
    s8_ctx x = {chan(sizeof(int), 0), chan(0, 0), 0, MOTE_WG_INIT};
    CHECK_EQ(mote_wg_add(&x.done, 1), 0);
    CHECK_EQ(mote_go(s8_producer, &x), 0);
    long got = 0;
    int v = 0, ten = 10;
    CHECK_EQ(select1(x.ch, MOTE_RECV, &v, -1), 0);
    CHECK_EQ(v, 5);
    got++;
    CHECK_EQ(mote_select(NULL, 0, 0), -EAGAIN);
    for (int i = 0; i < 2000; i++) {
        v = 0;
        int r = select1(x.ch, MOTE_RECV, &v, 0);
        CHECK(r == -EAGAIN || (r == 0 && v == 5));
        got += r == 0;
        mote_case cs[] = {{x.ch, MOTE_RECV, &v, -1}, {x.ch, MOTE_SEND, &ten, -1}};
        v = 0;
        r = mote_select(cs, 2, i % 2 ? -1 : 0);
        if (i % 2) /* blocking: the receive is the only case that can fire */
            CHECK_EQ(r, 0);
        else
            CHECK(r == 0 || r == -EAGAIN);
        if (r == 0) {
            CHECK_EQ(v, 5);
            CHECK_EQ(cs[0].result, 0);
            CHECK_EQ(cs[1].result, -1);
            got++;
        }
    }
    CHECK_EQ(mote_chan_close(x.quit), 0);
    CHECK_EQ(mote_wg_wait(&x.done), 0);
    CHECK_EQ(x.sent, got);
    CHECK_EQ(mote_chan_free(x.ch), 0);
    CHECK_EQ(mote_chan_free(x.quit), 0);
}

/* ---- sieve1.go ----
 * The daisy chain: a generator sends 2..limit, then closes; each prime
 * found starts a filter task that passes on what it does not divide.  The
 * close travels down the chain, so every task ends. */

static long *primes_upto(long limit, long *count)
{
    char *composite = calloc((size_t)limit + 1, 1);
    long *p = malloc(((size_t)limit + 1) * sizeof *p);
    CHECK(composite != NULL && p != NULL);
    long n = 0;
    for (long i = 2; i <= limit; i++) {
        if (composite[i])
            continue;
        p[n++] = i;
        for (long j = i * i; j <= limit; j += i)
            composite[j] = 1;
    }
    free(composite);
    *count = n;
    return p;
}

typedef struct sv_ctx {
    long limit;
    mote_chan *primes;
    mote_chan **chans; /* every channel of the chain, for the end */
    long nchans;
    struct sv_filter *filters;
    mote_wg wg;
} sv_ctx;

typedef struct sv_filter {
    sv_ctx *s;
    mote_chan *in, *out;
    long prime;
} sv_filter;

static void sv_generate(void *arg)
{
    sv_ctx *s = arg;
    for (long i = 2; i <= s->limit; i++)
        CHECK_EQ(mote_chan_send(s->chans[0], &i), 0);
    CHECK_EQ(mote_chan_close(s->chans[0]), 0);
    CHECK_EQ(mote_wg_done(&s->wg), 0);
}

static void sv_filter_task(void *arg)
{
    sv_filter *f = arg;
    long v;
    int r;
    while ((r = mote_chan_recv(f->in, &v)) == 0)
        if (v % f->prime != 0)
            CHECK_EQ(mote_chan_send(f->out, &v), 0);
    CHECK_EQ(r, MOTE_ECLOSED);
    CHECK_EQ(mote_chan_close(f->out), 0);
    CHECK_EQ(mote_wg_done(&f->s->wg), 0);
}

static void sv_sieve(void *arg)
{
    sv_ctx *s = arg;
    mote_chan *ch = s->chans[0];
    long prime;
    int r;
    while ((r = mote_chan_recv(ch, &prime)) == 0) {
        CHECK_EQ(mote_chan_send(s->primes, &prime), 0);
        mote_chan *next = chan(sizeof(long), 0);
        s->chans[s->nchans] = next;
        sv_filter *f = &s->filters[s->nchans++];
        *f = (sv_filter){s, ch, next, prime};
        CHECK_EQ(mote_wg_add(&s->wg, 1), 0);
        CHECK_EQ(mote_go(sv_filter_task, f), 0);
        ch = next;
    }
    CHECK_EQ(r, MOTE_ECLOSED);
    CHECK_EQ(mote_chan_close(s->primes), 0);
    CHECK_EQ(mote_wg_done(&s->wg), 0);
}

TEST_TASK(a_chain_of_filter_tasks_yields_the_primes_in_order)
{
    sv_ctx s = {.limit = TEST_SCALE(3000, 6),
                .primes = chan(sizeof(long), 0),
                .wg = MOTE_WG_INIT};
    s.chans = calloc((size_t)s.limit + 2, sizeof *s.chans);
    s.filters = calloc((size_t)s.limit + 2, sizeof *s.filters);
    CHECK(s.chans != NULL && s.filters != NULL);
    s.chans[0] = chan(sizeof(long), 0);
    s.nchans = 1;
    CHECK_EQ(mote_wg_add(&s.wg, 2), 0);
    CHECK_EQ(mote_go(sv_generate, &s), 0);
    CHECK_EQ(mote_go(sv_sieve, &s), 0);
    long nexpect, got = 0, p;
    long *expect = primes_upto(s.limit, &nexpect);
    int r;
    while ((r = mote_chan_recv(s.primes, &p)) == 0) {
        CHECK(got < nexpect);
        CHECK_EQ(p, expect[got]);
        got++;
    }
    CHECK_EQ(r, MOTE_ECLOSED);
    CHECK_EQ(got, nexpect);
    CHECK_EQ(mote_wg_wait(&s.wg), 0);
    CHECK_EQ(s.nchans, nexpect + 1); /* a filter for each prime */
    for (long i = 0; i < s.nchans; i++)
        CHECK_EQ(mote_chan_free(s.chans[i]), 0);
    CHECK_EQ(mote_chan_free(s.primes), 0);
    free(expect);
    free(s.chans);
    free(s.filters);
}

/* ---- sieve2.go ----
 * Eratosthenes over the odd numbers: a generator of candidates; for each
 * prime p a generator of its odd multiples from p*p; a task merging those
 * through a min-heap into one ordered stream of composites; the sieve,
 * which passes every candidate below the next composite on as a prime,
 * also back to the merger through a proxy task whose unbounded queue
 * keeps the sieve from blocking on the slow merger (its send case is off,
 * a NULL channel, while the queue is empty).  Generators never end: the
 * case runs its own mote_run and frees the channels after it. */

typedef struct e_gen {
    mote_chan *out;
    long first, step;
} e_gen;

static void e_count(void *arg)
{
    e_gen *g = arg;
    for (long n = g->first;; n += g->step)
        CHECK_EQ(mote_chan_send(g->out, &n), 0);
}

static mote_chan *e_counting(long first, long step, size_t cap)
{
    e_gen *g = keep_alloc(sizeof *g);
    *g = (e_gen){keep_chan(sizeof(long), cap), first, step};
    CHECK_EQ(mote_go(e_count, g), 0);
    return g->out;
}

typedef struct e_proxy {
    mote_chan *in, *out;
    long *q;
    size_t cap, head, len, most;
} e_proxy;

static void e_proxy_task(void *arg)
{
    e_proxy *p = arg;
    for (;;) {
        long in = -1, out = p->len ? p->q[p->head] : 0;
        mote_case cs[] = {{p->in, MOTE_RECV, &in, -1},
                          {p->len ? p->out : NULL, MOTE_SEND, &out, -1}};
        int r = mote_select(cs, 2, -1);
        CHECK(r == 0 || r == 1);
        CHECK_EQ(cs[r].result, 0);
        if (r == 0) {
            CHECK(p->len < p->cap);
            p->q[(p->head + p->len++) % p->cap] = in;
            if (p->len > p->most)
                p->most = p->len;
        } else {
            CHECK(p->len > 0);
            p->head = (p->head + 1) % p->cap;
            p->len--;
        }
    }
}

typedef struct e_head {
    long head;
    mote_chan *ch;
} e_head;

typedef struct e_merge {
    mote_chan *primes, *composites;
    e_head *h;
    size_t n, cap;
} e_merge;

static void e_sift_down(e_merge *m, size_t i)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m->n)
            return;
        if (c + 1 < m->n && m->h[c + 1].head < m->h[c].head)
            c++;
        if (m->h[i].head <= m->h[c].head)
            return;
        e_head t = m->h[i];
        m->h[i] = m->h[c];
        m->h[c] = t;
        i = c;
    }
}

static void e_push(e_merge *m, e_head e)
{
    CHECK(m->n < m->cap);
    size_t i = m->n++;
    while (i > 0 && m->h[(i - 1) / 2].head > e.head) {
        m->h[i] = m->h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    m->h[i] = e;
}

static void e_merge_task(void *arg)
{
    e_merge *m = arg;
    long last = 0;
    for (;;) {
        long p, sq;
        CHECK_EQ(mote_chan_recv(m->primes, &p), 0);
        mote_chan *mult = e_counting(p * p, 2 * p, 10);
        CHECK_EQ(mote_chan_recv(mult, &sq), 0);
        CHECK_EQ(sq, p * p);
        while (m->n && m->h[0].head < sq) { /* what smaller primes strike first */
            if (m->h[0].head != last) {
                last = m->h[0].head;
                CHECK_EQ(mote_chan_send(m->composites, &last), 0);
            }
            CHECK_EQ(mote_chan_recv(m->h[0].ch, &m->h[0].head), 0);
            e_sift_down(m, 0);
        }
        CHECK_EQ(mote_chan_send(m->composites, &sq), 0);
        last = sq;
        e_head e = {0, mult};
        CHECK_EQ(mote_chan_recv(mult, &e.head), 0);
        e_push(m, e);
    }
}

typedef struct e_sieve {
    mote_chan *out, *composites, *to_merge;
} e_sieve;

static void e_sieve_task(void *arg)
{
    e_sieve *s = arg;
    mote_chan *cand = e_counting(5, 2, 50);
    long p, c;
    CHECK_EQ(mote_chan_recv(cand, &p), 0);
    for (;;) {
        CHECK_EQ(mote_chan_recv(s->composites, &c), 0);
        while (p < c) { /* no composite below c is left: p is a prime */
            CHECK_EQ(mote_chan_send(s->to_merge, &p), 0);
            CHECK_EQ(mote_chan_send(s->out, &p), 0);
            CHECK_EQ(mote_chan_recv(cand, &p), 0);
        }
        if (p == c)
            CHECK_EQ(mote_chan_recv(cand, &p), 0);
    }
}

typedef struct e_run {
    long want;
    const long *expect;
    e_proxy *proxy;
} e_run;

static void e_main(void *arg)
{
    e_run *run = arg;
    mote_chan *out = keep_chan(sizeof(long), 10);
    CHECK_EQ(mote_chan_send(out, &(long){2}), 0);
    CHECK_EQ(mote_chan_send(out, &(long){3}), 0);
    mote_chan *primes = keep_chan(sizeof(long), 10);
    CHECK_EQ(mote_chan_send(primes, &(long){3}), 0);

    e_merge *m = keep_alloc(sizeof *m);
    m->cap = 4096;
    m->h = keep_alloc(m->cap * sizeof *m->h);
    m->primes = primes;
    m->composites = keep_chan(sizeof(long), 50);
    CHECK_EQ(mote_go(e_merge_task, m), 0);

    e_proxy *px = run->proxy = keep_alloc(sizeof *px);
    px->cap = (size_t)run->want + 64;
    px->q = keep_alloc(px->cap * sizeof *px->q);
    px->in = keep_chan(sizeof(long), 10);
    px->out = primes;
    CHECK_EQ(mote_go(e_proxy_task, px), 0);

    e_sieve *s = keep_alloc(sizeof *s);
    *s = (e_sieve){out, m->composites, px->in};
    CHECK_EQ(mote_go(e_sieve_task, s), 0);

    for (long i = 0; i < run->want; i++) {
        long p = -1;
        CHECK_EQ(mote_chan_recv(out, &p), 0);
        if (p != run->expect[i])
            fprintf(stderr, "prime %ld: got %ld, want %ld\n", i, p, run->expect[i]);
        CHECK_EQ(p, run->expect[i]);
    }
}

TEST(merged_multiples_and_a_select_proxy_sieve_out_the_primes)
{
    long nexpect;
    long *expect = primes_upto(1 << 17, &nexpect);
    e_run run = {TEST_SCALE(5000, 5), expect, NULL};
    CHECK(run.want <= nexpect);
    CHECK_EQ(mote_run(e_main, &run), 0);
    /* the merger lags behind the sieve: the proxy's queue filled up */
    printf("proxy queue held up to %zu primes\n", run.proxy->most);
    CHECK(run.proxy->most > 10);
    size_t n = keep_release();
    CHECK(n > 10);
    free(expect);
}

/* ---- zerosize.go ---- */

static void zs_peer(void *arg)
{
    mote_chan *c = arg;
    CHECK_EQ(mote_chan_recv(c, NULL), 0);
    CHECK_EQ(mote_chan_send(c, NULL), 0);
}

TEST_TASK(channels_of_zero_size_elements_can_be_made_and_carry_signals)
{
    mote_chan *u = chan(0, 0), *b = chan(0, 1);
    CHECK_EQ(mote_chan_cap(u), 0);
    CHECK_EQ(mote_chan_cap(b), 1);

    char w = 'w', z = 'z';
    CHECK_EQ(mote_chan_trysend(b, NULL), 0);
    CHECK_EQ(mote_chan_trysend(b, &z), -EAGAIN);
    CHECK_EQ(mote_chan_len(b), 1);
    CHECK_EQ(mote_chan_tryrecv(b, &w), 0);
    CHECK_EQ(w, 'w'); /* no byte to copy */
    CHECK_EQ(mote_chan_len(b), 0);

    /* unbuffered, through a peer, plain and selected */
    CHECK_EQ(mote_go(zs_peer, u), 0);
    CHECK_EQ(select1(u, MOTE_SEND, &z, -1), 0);
    CHECK_EQ(select1(u, MOTE_RECV, &w, -1), 0);
    CHECK_EQ(w, 'w');

    /* a huge capacity needs no ring */
    size_t huge = (size_t)1 << 40;
    mote_chan *h = chan(0, huge);
    CHECK_EQ(mote_chan_cap(h), huge);
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(mote_chan_trysend(h, NULL), 0);
    CHECK_EQ(mote_chan_len(h), 1000);

    /* closed: drains, then reports it, writing nothing */
    CHECK_EQ(mote_chan_close(h), 0);
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(mote_chan_recv(h, &w), 0);
    CHECK_EQ(mote_chan_recv(h, &w), MOTE_ECLOSED);
    CHECK_EQ(select1(h, MOTE_RECV, &w, -1), MOTE_ECLOSED);
    CHECK_EQ(w, 'w');
    CHECK_EQ(mote_chan_free(u), 0);
    CHECK_EQ(mote_chan_free(b), 0);
    CHECK_EQ(mote_chan_free(h), 0);
}

/* ---- powser1.go ----
 * Power series as demand channels: a consumer asks for the next term on
 * req (a signal) and gets it on dat; each operator is a task that asks
 * its inputs for terms only when asked for one.  Terms are exact
 * rationals (overflow fails the check), a zero denominator ends a
 * series.  Products, exponentials and reciprocals copy series with split,
 * a task that serves two consumers at their own pace from one input
 * (selecting over both requests, the input's reply and both answers, the
 * cases it cannot take now turned off with NULL), and the exponential and
 * the reciprocal feed their own output back into their input. */

typedef struct rat {
    int64_t num, den;
} rat;

static const rat R_END = {1, 0};

static int64_t i64_mul(int64_t a, int64_t b)
{
    int64_t r;
    CHECK(!__builtin_mul_overflow(a, b, &r));
    return r;
}

static int64_t i64_add(int64_t a, int64_t b)
{
    int64_t r;
    CHECK(!__builtin_add_overflow(a, b, &r));
    return r;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    a = a < 0 ? -a : a;
    b = b < 0 ? -b : b;
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static rat rat_of(int64_t num, int64_t den)
{
    CHECK(den != 0);
    int64_t g = gcd64(num, den);
    if (den < 0)
        g = -g;
    return (rat){num / g, den / g};
}

static rat rat_int(int64_t n) { return (rat){n, 1}; }
static bool rat_end(rat r) { return r.den == 0; }
static bool rat_eq(rat a, rat b) { return a.num == b.num && a.den == b.den; }

static rat rat_add(rat u, rat v)
{
    int64_t g = gcd64(u.den, v.den);
    return rat_of(i64_add(i64_mul(u.num, v.den / g), i64_mul(v.num, u.den / g)),
                  i64_mul(u.den, v.den / g));
}

static rat rat_mul(rat u, rat v)
{
    int64_t g1 = gcd64(u.num, v.den), g2 = gcd64(u.den, v.num);
    return rat_of(i64_mul(u.num / g1, v.num / g2), i64_mul(u.den / g2, v.den / g1));
}

static rat rat_neg(rat u) { return (rat){-u.num, u.den}; }

static rat rat_inv(rat u)
{
    CHECK(u.num != 0);
    return rat_of(u.den, u.num);
}

typedef struct ps {
    mote_chan *req, *dat;
} ps;

static ps *ps_new(void)
{
    ps *s = keep_alloc(sizeof *s);
    s->req = keep_chan(0, 0);
    s->dat = keep_chan(sizeof(rat), 0);
    return s;
}

static rat ps_get(ps *s)
{
    rat r = {0, 0};
    CHECK_EQ(mote_chan_send(s->req, NULL), 0);
    CHECK_EQ(mote_chan_recv(s->dat, &r), 0);
    return r;
}

static void ps_put(ps *z, rat r)
{
    CHECK_EQ(mote_chan_recv(z->req, NULL), 0);
    CHECK_EQ(mote_chan_send(z->dat, &r), 0);
}

/* The next term of each of u and v, asked for and taken in whatever order
 * they become ready (u and v may be the same series). */
static void ps_get2(ps *u, ps *v, rat out[2])
{
    ps *in[2] = {u, v};
    bool asked[2] = {false, false}, got[2] = {false, false};
    char sig = 0;
    for (int step = 0; step < 4; step++) {
        mote_case cs[4];
        for (int k = 0; k < 2; k++) {
            cs[k] = (mote_case){asked[k] ? NULL : in[k]->req, MOTE_SEND, &sig, -1};
            cs[2 + k] = (mote_case){asked[k] && !got[k] ? in[k]->dat : NULL, MOTE_RECV,
                                    &out[k], -1};
        }
        int r = mote_select(cs, 4, -1);
        CHECK(r >= 0 && r < 4);
        CHECK_EQ(cs[r].result, 0);
        if (r < 2)
            asked[r] = true;
        else
            got[r - 2] = true;
    }
}

static _Noreturn void ps_end_forever(ps *z)
{
    for (;;)
        ps_put(z, R_END);
}

static _Noreturn void ps_copy(ps *u, ps *z)
{
    for (;;) {
        CHECK_EQ(mote_chan_recv(z->req, NULL), 0);
        rat r = ps_get(u);
        CHECK_EQ(mote_chan_send(z->dat, &r), 0);
    }
}

/* An operator's task and what it reads. */
typedef struct ps_op {
    ps *z, *u, *v;
    rat c;
    int n;
} ps_op;

static ps *ps_start(mote_fn fn, ps *u, ps *v, rat c, int n)
{
    ps_op *o = keep_alloc(sizeof *o);
    *o = (ps_op){ps_new(), u, v, c, n};
    CHECK_EQ(mote_go(fn, o), 0);
    return o->z;
}

static void t_rep(void *arg)
{
    ps_op *o = arg;
    for (;;)
        ps_put(o->z, o->c);
}

static ps *Rep(rat c) { return ps_start(t_rep, NULL, NULL, c, 0); }

static void t_add(void *arg)
{
    ps_op *o = arg;
    for (;;) {
        CHECK_EQ(mote_chan_recv(o->z->req, NULL), 0);
        rat uv[2];
        ps_get2(o->u, o->v, uv);
        rat r = rat_end(uv[0]) ? uv[1] : rat_end(uv[1]) ? uv[0] : rat_add(uv[0], uv[1]);
        CHECK_EQ(mote_chan_send(o->z->dat, &r), 0);
        if (rat_end(uv[0]) && rat_end(uv[1]))
            ps_end_forever(o->z);
        if (rat_end(uv[0]))
            ps_copy(o->v, o->z);
        if (rat_end(uv[1]))
            ps_copy(o->u, o->z);
    }
}

static ps *Add(ps *u, ps *v) { return ps_start(t_add, u, v, rat_int(0), 0); }

static void t_cmul(void *arg)
{
    ps_op *o = arg;
    for (;;) {
        CHECK_EQ(mote_chan_recv(o->z->req, NULL), 0);
        rat u = ps_get(o->u);
        rat r = rat_end(u) ? R_END : rat_mul(o->c, u);
        CHECK_EQ(mote_chan_send(o->z->dat, &r), 0);
        if (rat_end(u))
            ps_end_forever(o->z);
    }
}

static ps *Cmul(rat c, ps *u) { return ps_start(t_cmul, u, NULL, c, 0); }
static ps *Sub(ps *u, ps *v) { return Add(u, Cmul(rat_int(-1), v)); }

static void t_shift(void *arg)
{
    ps_op *o = arg;
    ps_put(o->z, o->c);
    ps_copy(o->u, o->z);
}

static ps *Shift(rat c, ps *u) { return ps_start(t_shift, u, NULL, c, 0); }

static void t_diff(void *arg)
{
    ps_op *o = arg;
    CHECK_EQ(mote_chan_recv(o->z->req, NULL), 0);
    rat u = ps_get(o->u); /* the constant term goes */
    for (int64_t i = 1;; i++) {
        if (!rat_end(u))
            u = ps_get(o->u);
        rat r = rat_end(u) ? R_END : rat_mul(rat_int(i), u);
        CHECK_EQ(mote_chan_send(o->z->dat, &r), 0);
        if (rat_end(u))
            ps_end_forever(o->z);
        CHECK_EQ(mote_chan_recv(o->z->req, NULL), 0);
    }
}

static ps *Diff(ps *u) { return ps_start(t_diff, u, NULL, rat_int(0), 0); }

/* With the constant of integration c. */
static void t_integ(void *arg)
{
    ps_op *o = arg;
    ps_put(o->z, o->c);
    for (int64_t i = 1;; i++) {
        CHECK_EQ(mote_chan_recv(o->z->req, NULL), 0);
        rat u = ps_get(o->u);
        rat r = rat_end(u) ? R_END : rat_mul(rat_of(1, i), u);
        CHECK_EQ(mote_chan_send(o->z->dat, &r), 0);
        if (rat_end(u))
            ps_end_forever(o->z);
    }
}

static ps *Integ(rat c, ps *u) { return ps_start(t_integ, u, NULL, c, 0); }

/* U(c x^n): term i of U times c^i, followed by n - 1 zeros. */
static void t_monsubst(void *arg)
{
    ps_op *o = arg;
    rat ci = rat_int(1);
    for (;;) {
        CHECK_EQ(mote_chan_recv(o->z->req, NULL), 0);
        rat u = ps_get(o->u);
        rat r = rat_end(u) ? R_END : rat_mul(u, ci);
        CHECK_EQ(mote_chan_send(o->z->dat, &r), 0);
        if (rat_end(u))
            ps_end_forever(o->z);
        ci = rat_mul(ci, o->c);
        for (int i = 1; i < o->n; i++)
            ps_put(o->z, rat_int(0));
    }
}

static ps *MonSubst(ps *u, rat c, int n) { return ps_start(t_monsubst, u, NULL, c, n); }

enum { SPLIT_LAG = 128 };

typedef struct split {
    ps *in, *out[2];
    rat q[2][SPLIT_LAG]; /* terms read from in, not yet given to out[k] */
    size_t head[2], len[2];
} split;

static void t_split(void *arg)
{
    split *s = arg;
    bool asked[2] = {false, false}, fetching = false, ended = false;
    for (;;) {
        mote_case cs[6];
        rat next[2], got = {0, 0};
        char sig = 0;
        bool need = false;
        for (int k = 0; k < 2; k++) {
            bool can = asked[k] && (s->len[k] > 0 || ended);
            next[k] = s->len[k] ? s->q[k][s->head[k]] : R_END;
            cs[k] = (mote_case){asked[k] ? NULL : s->out[k]->req, MOTE_RECV, NULL, -1};
            cs[2 + k] = (mote_case){can ? s->out[k]->dat : NULL, MOTE_SEND, &next[k], -1};
            need |= asked[k] && s->len[k] == 0;
        }
        need = need && !ended && !fetching;
        cs[4] = (mote_case){need ? s->in->req : NULL, MOTE_SEND, &sig, -1};
        cs[5] = (mote_case){fetching ? s->in->dat : NULL, MOTE_RECV, &got, -1};
        int r = mote_select(cs, 6, -1);
        CHECK(r >= 0 && r < 6);
        CHECK_EQ(cs[r].result, 0);
        if (r < 2) {
            asked[r] = true;
        } else if (r < 4) {
            int k = r - 2;
            if (s->len[k]) {
                s->head[k] = (s->head[k] + 1) % SPLIT_LAG;
                s->len[k]--;
            }
            asked[k] = false;
        } else if (r == 4) {
            fetching = true;
        } else {
            fetching = false;
            if (rat_end(got)) {
                ended = true;
                continue;
            }
            for (int k = 0; k < 2; k++) {
                CHECK(s->len[k] < SPLIT_LAG);
                s->q[k][(s->head[k] + s->len[k]++) % SPLIT_LAG] = got;
            }
        }
    }
}

/* Two outputs, fed once split_start gives them an input: an output may be
 * used in making that input. */
static split *split_new(void)
{
    split *s = keep_alloc(sizeof *s);
    s->out[0] = ps_new();
    s->out[1] = ps_new();
    return s;
}

static void split_start(split *s, ps *in)
{
    s->in = in;
    CHECK_EQ(mote_go(t_split, s), 0);
}

static split *Split(ps *u)
{
    split *s = split_new();
    split_start(s, u);
    return s;
}

/* U = u + x UU, V = v + x VV: UV = uv + x (u VV + v UU) + x^2 UU VV. */
static void t_mul(void *arg)
{
    ps_op *o = arg;
    CHECK_EQ(mote_chan_recv(o->z->req, NULL), 0);
    rat uv[2];
    ps_get2(o->u, o->v, uv);
    if (rat_end(uv[0]) || rat_end(uv[1])) {
        CHECK_EQ(mote_chan_send(o->z->dat, &R_END), 0);
        ps_end_forever(o->z);
    }
    rat r = rat_mul(uv[0], uv[1]);
    CHECK_EQ(mote_chan_send(o->z->dat, &r), 0);
    split *uu = Split(o->u), *vv = Split(o->v);
    ps *w = Add(Cmul(uv[0], vv->out[0]), Cmul(uv[1], uu->out[0]));
    CHECK_EQ(mote_chan_recv(o->z->req, NULL), 0);
    r = ps_get(w);
    CHECK_EQ(mote_chan_send(o->z->dat, &r), 0);
    ps_copy(Add(w, ps_start(t_mul, uu->out[1], vv->out[1], rat_int(0), 0)), o->z);
}

static ps *Mul(ps *u, ps *v) { return ps_start(t_mul, u, v, rat_int(0), 0); }

/* exp(U) for U without a constant term (it is ignored): Z' = Z U'. */
static ps *Exp(ps *u)
{
    split *zz = split_new();
    split_start(zz, Integ(rat_int(1), Mul(zz->out[0], Diff(u))));
    return zz->out[1];
}

/* U = u + x UU, Z = 1/U = z + x ZZ: z = 1/u, ZZ = -z UU (z + x ZZ). */
static void t_recip(void *arg)
{
    ps_op *o = arg;
    split *zz = split_new();
    CHECK_EQ(mote_chan_recv(o->z->req, NULL), 0);
    rat z = rat_inv(ps_get(o->u));
    CHECK_EQ(mote_chan_send(o->z->dat, &z), 0);
    split_start(zz, Mul(Cmul(rat_neg(z), o->u), Shift(z, zz->out[0])));
    ps_copy(zz->out[1], o->z);
}

static ps *Recip(ps *u) { return ps_start(t_recip, u, NULL, rat_int(0), 0); }

static void ps_expect(ps *u, const rat *want, int n, const char *what)
{
    for (int i = 0; i < n; i++) {
        rat r = ps_get(u);
        if (!rat_eq(r, want[i])) {
            fprintf(stderr, "%s, term %d: got %lld/%lld, want %lld/%lld\n", what, i,
                    (long long)r.num, (long long)r.den, (long long)want[i].num,
                    (long long)want[i].den);
            CHECK(0);
        }
    }
}

static void ps_expect_all(ps *u, rat want, int n, const char *what)
{
    /* zeroed: gcc 12 at -O3 warns that n <= 0 would leave w unset */
    rat *w = calloc((size_t)n, sizeof *w);
    CHECK(w != NULL);
    for (int i = 0; i < n; i++)
        w[i] = want;
    ps_expect(u, w, n, what);
    free(w);
}

/* exp(x / (1 - x)): term n is the sum over k of C(n-1, k-1) / k!. */
static rat exp_term(int n)
{
    if (n == 0)
        return rat_int(1);
    rat sum = rat_int(0);
    int64_t binom = 1, fact = 1; /* C(n-1, k-1), k! */
    for (int k = 1; k <= n; k++) {
        fact = i64_mul(fact, k);
        sum = rat_add(sum, rat_of(binom, fact));
        binom = binom * (n - k) / k;
    }
    return sum;
}

static int ps_terms;

static void ps_main_basic(void *arg)
{
    (void)arg;
    int n = ps_terms;
    rat *a = calloc((size_t)n, sizeof *a);
    CHECK(a != NULL);
    ps *ones = Rep(rat_int(1)), *twos = Rep(rat_int(2));

    ps_expect_all(ones, rat_int(1), n, "ones");
    ps_expect_all(Add(ones, twos), rat_int(3), n, "ones + twos");
    ps_expect_all(Add(ones, ones), rat_int(2), n, "ones + ones");
    ps_expect_all(Cmul(rat_int(-1), twos), rat_int(-2), n, "-1 * twos");
    ps_expect_all(Sub(ones, twos), rat_int(-1), n, "ones - twos");
    for (int i = 0; i < n; i++)
        a[i] = rat_int(i + 1);
    ps_expect(Diff(ones), a, n, "d/dx ones");
    ps_expect(Mul(ones, ones), a, n, "ones * ones");
    a[0] = rat_int(0);
    for (int i = 1; i < n; i++)
        a[i] = rat_of(1, i);
    ps_expect(Integ(rat_int(0), ones), a, n, "integral of ones");
    for (int i = 0; i < n; i++) /* 1 / (1 + x^2), integrated */
        a[i] = i % 2 ? rat_of(i % 4 == 1 ? 1 : -1, i) : rat_int(0);
    ps_expect(Integ(rat_int(0), MonSubst(ones, rat_int(-1), 2)), a, n, "atan");
    for (int i = 0; i < n; i++)
        a[i] = rat_int(i < 2 ? 1 - 2 * i : 0);
    ps_expect(Recip(ones), a, n, "1 / ones");
    ps_expect_all(Recip(Recip(ones)), rat_int(1), n, "1 / (1 / ones)");
    for (int i = 0; i < n; i++)
        a[i] = rat_int(i == 0);
    ps_expect(Mul(Recip(twos), twos), a, n, "1 / twos * twos");
    free(a);
}

static void ps_main_exp(void *arg)
{
    (void)arg;
    int n = ps_terms;
    rat *a = calloc((size_t)n, sizeof *a);
    CHECK(a != NULL);
    for (int i = 0; i < n; i++)
        a[i] = exp_term(i);
    CHECK(rat_eq(a[3], rat_of(13, 6))); /* the formula against Go's figures */
    if (n > 9)
        CHECK(rat_eq(a[9], rat_of(4596553, 362880)));
    ps_expect(Exp(Rep(rat_int(1))), a, n, "exp(ones)");
    /* exp(U) * (1 / exp(U)) = 1 */
    split *e = Split(Exp(Rep(rat_int(1))));
    for (int i = 0; i < n; i++)
        a[i] = rat_int(i == 0);
    ps_expect(Mul(e->out[0], Recip(e->out[1])), a, n, "exp * 1/exp");
    free(a);
}

TEST(power_series_operators_give_exact_rational_terms)
{
    ps_terms = TSAN_OR(8, TEST_SCALE(100, 4));
    CHECK_EQ(mote_run(ps_main_basic, NULL), 0);
    size_t n = keep_release();
    printf("%zu channels\n", n);
}

TEST(power_series_fed_back_through_split_give_exp_and_its_reciprocal)
{
    ps_terms = TSAN_OR(7, 18); /* 18: the most that int64 rationals hold */
    CHECK_EQ(mote_run(ps_main_exp, NULL), 0);
    size_t n = keep_release();
    printf("%zu channels\n", n);
}

TEST_MAIN()
