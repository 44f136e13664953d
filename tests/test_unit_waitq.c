/*
 * test_unit_waitq.c - the wait queue helpers (src/waitq.h) on their own,
 * with stand-in tasks that are never run: a claim takes the first record
 * whose task it wins and unlinks it, skipping (and leaving) stale records;
 * claim_all claims every live one with the result; publishing links at
 * either end and chains the record to its task; teardown's discard takes a
 * task's linked records out and calls their hooks.  The cases run inside a
 * task, so claims take the worker's path (no plain-thread accounting).
 */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "spin.h"
#include "task.h"
#include "waitq.h"

/* The first record; nothing is frozen here, so nothing is held. */
static waiter *first(mote_waitq *q)
{
    task *held;
    waiter *w = mote__waitq_first(q, &held);
    CHECK(held == NULL);
    return w;
}

static task *fake_task(int state)
{
    task *t = calloc(1, sizeof *t);
    CHECK(t != NULL);
    t->wait_state = state;
    t->timer_idx = TIMER_NONE;
    return t;
}

/* Links w (of task t) at the back of q as a publish would, without being t. */
static void link_record(mote_waitq *q, int *lock, waiter *w, task *t)
{
    *w = (waiter){.t = t, .q = q, .lock = lock, .linked = true};
    list_push_back(q, &w->link);
}

static int queue_len(mote_waitq *q)
{
    CHECK(list_valid(q));
    int n = 0;
    for (list_node *x = q->head; x; x = x->next)
        n++;
    return n;
}

TEST_TASK(claim_skips_stale_records_and_unlinks_the_winner)
{
    mote_waitq q = {0, 0};
    int lock = 0;
    task *stale = fake_task(TASK_CLAIMED), *a = fake_task(TASK_WAITING),
         *b = fake_task(TASK_WAITING);
    waiter ws, wa, wb;
    link_record(&q, &lock, &ws, stale);
    link_record(&q, &lock, &wa, a);
    link_record(&q, &lock, &wb, b);
    CHECK(first(&q) == &ws);
    spin_lock(&lock);
    CHECK(mote__waitq_claim(&q) == &wa);
    CHECK(!wa.linked);
    CHECK_EQ(a->wait_state, TASK_CLAIMED);
    CHECK(mote__waitq_claim(&q) == &wb);
    CHECK(mote__waitq_claim(&q) == NULL);
    spin_unlock(&lock);
    CHECK_EQ(queue_len(&q), 1); /* the stale record stays for its owner */
    CHECK(ws.linked && first(&q) == &ws);
    CHECK_EQ(stale->wait_state, TASK_CLAIMED);
    /* a claimed task cannot be claimed again through another record */
    waiter wa2;
    link_record(&q, &lock, &wa2, a);
    spin_lock(&lock);
    CHECK(mote__waitq_claim(&q) == NULL);
    mote__waitq_unlink(&wa2);
    mote__waitq_unlink(&ws);
    spin_unlock(&lock);
    CHECK_EQ(queue_len(&q), 0);
    free(stale);
    free(a);
    free(b);
}

TEST_TASK(claim_all_claims_every_live_waiter_with_the_result)
{
    enum { N = 6 };
    mote_waitq q = {0, 0};
    int lock = 0;
    task *t[N];
    waiter w[N];
    for (int i = 0; i < N; i++) {
        t[i] = fake_task(i == 2 ? TASK_CLAIMED : TASK_WAITING); /* 2: stale */
        link_record(&q, &lock, &w[i], t[i]);
    }
    waiter before = {0}, *list = &before; /* claim_all prepends to a list */
    before.wake_next = NULL;
    spin_lock(&lock);
    mote__waitq_claim_all(&q, -42, &list);
    spin_unlock(&lock);
    /* claimed in queue order, so the list holds them newest first */
    int expect[] = {5, 4, 3, 1, 0};
    waiter *x = list;
    for (int k = 0; k < N - 1; k++, x = x->wake_next) {
        CHECK(x == &w[expect[k]]);
        CHECK_EQ(x->result, -42);
        CHECK(!x->linked);
        CHECK_EQ(t[expect[k]]->wait_state, TASK_CLAIMED);
        CHECK_EQ(mote__waiter_value(x), -42);
    }
    CHECK(x == &before);
    CHECK_EQ(queue_len(&q), 1);
    CHECK(first(&q) == &w[2]);
    spin_lock(&lock);
    mote__waitq_unlink(&w[2]);
    spin_unlock(&lock);
    for (int i = 0; i < N; i++)
        free(t[i]);
}

TEST_TASK(select_records_report_their_case_index)
{
    waiter w = {.is_select = true, .idx = 7, .result = MOTE_ECLOSED};
    CHECK_EQ(mote__waiter_value(&w), 7);
    w.is_select = false;
    CHECK_EQ(mote__waiter_value(&w), MOTE_ECLOSED);
}

TEST_TASK(publish_links_at_either_end_and_chains_to_the_task)
{
    task *self = mote__self();
    CHECK(self != NULL);
    CHECK(self->waits == NULL);
    mote_waitq q = {0, 0};
    int lock = 0, obj;
    waiter w1, w2, w3;
    mote__waiter_init(&w1, self);
    mote__waiter_init(&w2, self);
    mote__waiter_init(&w3, self);
    CHECK(w1.t == self && !w1.linked && w1.discard == NULL);
    spin_lock(&lock);
    mote__waitq_publish(&q, &lock, &w1, &obj);
    mote__waitq_publish(&q, &lock, &w2, &obj);
    mote__waitq_publish_front(&q, &lock, &w3, &obj);
    spin_unlock(&lock);
    /* queue order: w3 w1 w2; the task's chain: newest first */
    CHECK(first(&q) == &w3);
    CHECK(w3.link.next == &w1.link && w1.link.next == &w2.link && !w2.link.next);
    CHECK(self->waits == &w3 && w3.also == &w2 && w2.also == &w1 && !w1.also);
    for (waiter *w = self->waits; w; w = w->also)
        CHECK(w->linked && w->q == &q && w->lock == &lock && w->obj == &obj);
    spin_lock(&lock);
    mote__waitq_unlink(&w1);
    mote__waitq_unlink(&w3);
    mote__waitq_unlink(&w2);
    spin_unlock(&lock);
    CHECK_EQ(queue_len(&q), 0);
    mote__waitq_end(self); /* every record is out: the wait is over */
    CHECK(self->waits == NULL);
}

static int discarded;
static void count_discard(waiter *w)
{
    CHECK(w->obj == &discarded);
    discarded++;
}

TEST_TASK(discard_takes_a_tasks_records_out_and_calls_hooks)
{
    task *t = fake_task(TASK_WAITING), *other = fake_task(TASK_WAITING);
    mote_waitq q1 = {0, 0}, q2 = {0, 0};
    int lock1 = 0, lock2 = 0;
    waiter a, b, c, d, o;
    link_record(&q1, &lock1, &o, other); /* not t's: stays */
    link_record(&q1, &lock1, &a, t);     /* linked, no hook: unlinked */
    link_record(&q2, &lock2, &b, t);
    b.linked = false; /* claimed and unlinked by a waker */
    list_remove(&q2, &b.link);
    link_record(&q2, &lock2, &c, t); /* linked, with a hook: the hook's job */
    c.discard = count_discard;
    c.obj = &discarded;
    link_record(&q2, &lock2, &d, t);
    t->waits = &a;
    a.also = &b;
    b.also = &c;
    c.also = &d;
    discarded = 0;
    mote__waitq_discard(t);
    CHECK(t->waits == NULL);
    CHECK_EQ(discarded, 1);
    CHECK(!a.linked && !d.linked);
    CHECK(c.linked); /* left to its hook, which did not unlink it */
    CHECK_EQ(queue_len(&q1), 1);
    CHECK(first(&q1) == &o);
    CHECK_EQ(queue_len(&q2), 1);
    CHECK(first(&q2) == &c);
    CHECK_EQ(lock1, 0); /* locks were released */
    CHECK_EQ(lock2, 0);
    free(t);
    free(other);
}

TEST_MAIN()
