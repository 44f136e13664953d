/*
 * test_unit_timer.c - the worker timer heap (src/timer.h) on its own:
 * random add / cancel / pop sequences against a reference model (the set
 * of armed tasks and their deadlines), with the heap's invariants checked
 * after every operation: each task knows its index, parents come no later
 * than their children, the earliest deadline is at the root, and a task
 * out of the heap says so.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "task.h"
#include "timer.h"

static uint64_t rng(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

typedef struct model {
    task *tasks;
    bool *armed;
    int64_t *deadline;
    int n;
} model;

static model model_new(int n)
{
    model m = {calloc((size_t)n, sizeof(task)), calloc((size_t)n, sizeof(bool)),
               calloc((size_t)n, sizeof(int64_t)), n};
    CHECK(m.tasks && m.armed && m.deadline);
    for (int i = 0; i < n; i++)
        m.tasks[i].timer_idx = TIMER_NONE;
    return m;
}

static void model_free(model *m)
{
    free(m->tasks);
    free(m->armed);
    free(m->deadline);
}

/* The heap agrees with the model and is a well-formed min-heap. */
static void check_heap(const timer_heap *h, const model *m)
{
    uint32_t armed = 0;
    int64_t min = INT64_MAX;
    for (int i = 0; i < m->n; i++) {
        const task *t = &m->tasks[i];
        if (!m->armed[i]) {
            CHECK_EQ(t->timer_idx, TIMER_NONE);
            continue;
        }
        armed++;
        if (m->deadline[i] < min)
            min = m->deadline[i];
        CHECK(t->timer_idx < h->n);
        CHECK(h->v[t->timer_idx] == t);
        CHECK_EQ(t->deadline, m->deadline[i]);
    }
    CHECK_EQ(h->n, armed);
    CHECK(h->n <= h->cap);
    for (uint32_t i = 0; i < h->n; i++) {
        CHECK_EQ(h->v[i]->timer_idx, i);
        if (i)
            CHECK(h->v[(i - 1) / 2]->deadline <= h->v[i]->deadline);
    }
    CHECK_EQ(mote__timer_next(h), min);
}

TEST(empty_heap_has_no_next_and_pops_nothing)
{
    timer_heap h = {0};
    CHECK_EQ(mote__timer_next(&h), INT64_MAX);
    CHECK(mote__timer_pop_due(&h, INT64_MAX) == NULL);
    mote__timer_free(&h);
    CHECK(h.v == NULL);
    CHECK_EQ(h.n, 0);
}

TEST(pop_returns_due_tasks_in_deadline_order)
{
    model m = model_new(5);
    timer_heap h = {0};
    int64_t dl[5] = {50, 10, 40, 10, 30};
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(mote__timer_add(&h, &m.tasks[i], dl[i]), 0);
        m.armed[i] = true;
        m.deadline[i] = dl[i];
        check_heap(&h, &m);
    }
    CHECK(mote__timer_pop_due(&h, 9) == NULL); /* nothing due yet */
    int64_t last = INT64_MIN;
    int popped = 0;
    task *t;
    while ((t = mote__timer_pop_due(&h, 40)) != NULL) {
        int i = (int)(t - m.tasks);
        CHECK(t->deadline <= 40 && t->deadline >= last);
        CHECK_EQ(t->timer_idx, TIMER_NONE);
        last = t->deadline;
        m.armed[i] = false;
        check_heap(&h, &m);
        popped++;
    }
    CHECK_EQ(popped, 4);
    CHECK_EQ(mote__timer_next(&h), 50);
    mote__timer_cancel(&h, &m.tasks[0]);
    m.armed[0] = false;
    check_heap(&h, &m);
    mote__timer_cancel(&h, &m.tasks[0]); /* not armed: nothing happens */
    check_heap(&h, &m);
    mote__timer_free(&h);
    model_free(&m);
}

/* Cancelling from the middle, the root and the last slot keeps the heap. */
TEST(cancel_anywhere_keeps_the_heap_ordered)
{
    enum { N = 200 };
    model m = model_new(N);
    timer_heap h = {0};
    uint64_t s = 12345;
    for (int i = 0; i < N; i++) {
        m.deadline[i] = (int64_t)(rng(&s) % 1000);
        CHECK_EQ(mote__timer_add(&h, &m.tasks[i], m.deadline[i]), 0);
        m.armed[i] = true;
    }
    check_heap(&h, &m);
    while (h.n) {
        uint32_t pick = (uint32_t)(rng(&s) % 3);
        uint32_t idx = pick == 0 ? 0 : pick == 1 ? h.n - 1 : (uint32_t)(rng(&s) % h.n);
        task *t = h.v[idx];
        mote__timer_cancel(&h, t);
        m.armed[t - m.tasks] = false;
        check_heap(&h, &m);
    }
    mote__timer_free(&h);
    model_free(&m);
}

/* Random sequences: the reference is the model's armed set. */
static void random_run(uint64_t seed, int ntasks, long steps, int64_t spread)
{
    model m = model_new(ntasks);
    timer_heap h = {0};
    uint64_t s = seed;
    int64_t now = 0;
    for (long step = 0; step < steps; step++) {
        int i = (int)(rng(&s) % (uint64_t)ntasks);
        uint32_t op = (uint32_t)(rng(&s) % 10);
        if (op < 5) { /* arm a task that is not armed, or re-arm one */
            if (m.armed[i]) {
                mote__timer_cancel(&h, &m.tasks[i]);
                m.armed[i] = false;
            }
            int64_t dl = now + (int64_t)(rng(&s) % (uint64_t)spread) - spread / 8;
            CHECK_EQ(mote__timer_add(&h, &m.tasks[i], dl), 0);
            m.armed[i] = true;
            m.deadline[i] = dl;
        } else if (op < 7) { /* cancel, armed or not */
            mote__timer_cancel(&h, &m.tasks[i]);
            m.armed[i] = false;
        } else { /* time moves on: pop what is due */
            now += (int64_t)(rng(&s) % (uint64_t)(spread / 4 + 1));
            int64_t min = INT64_MAX;
            for (int k = 0; k < ntasks; k++)
                if (m.armed[k] && m.deadline[k] < min)
                    min = m.deadline[k];
            task *t = mote__timer_pop_due(&h, now);
            if (min > now) {
                CHECK(t == NULL);
            } else {
                CHECK(t != NULL);
                int k = (int)(t - m.tasks);
                CHECK(m.armed[k]);
                CHECK_EQ(m.deadline[k], min); /* an earliest one */
                CHECK_EQ(t->timer_idx, TIMER_NONE);
                m.armed[k] = false;
            }
        }
        check_heap(&h, &m);
    }
    printf("seed %llu: %u armed at the end (capacity %u)\n", (unsigned long long)seed,
           h.n, h.cap);
    /* drain: everything comes out, in order */
    int64_t last = INT64_MIN;
    task *t;
    while ((t = mote__timer_pop_due(&h, INT64_MAX)) != NULL) {
        CHECK(t->deadline >= last);
        last = t->deadline;
        m.armed[t - m.tasks] = false;
    }
    check_heap(&h, &m);
    CHECK_EQ(h.n, 0);
    mote__timer_free(&h);
    model_free(&m);
}

TEST(random_ops_on_a_small_heap_match_the_model)
{
    for (uint64_t seed = 1; seed <= 20; seed++)
        random_run(seed * 0x9E3779B97F4A7C15ull, 8, TEST_SCALE(5000, 5), 16);
}

TEST(random_ops_on_a_growing_heap_match_the_model)
{
    /* ties are common (spread 64 over 300 tasks), and the heap grows past
     * its first allocation (64) several times */
    random_run(0xC0FFEE, 300, TEST_SCALE(20000, 5), 64);
    random_run(0xBEEF, 1000, TEST_SCALE(20000, 5), 1 << 20);
}

TEST_MAIN()
