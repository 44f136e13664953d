/*
 * timer.c - per-worker timer heap (see timer.h).  Invariant: v[i]->timer_idx
 * == i for every i < n, and v[i]->deadline >= v[(i-1)/2]->deadline.
 */
#include "timer.h"

#include <errno.h>
#include <stdbool.h>

#include "task.h"

/* The whole heap is well formed: indices agree and parents come first. */
__attribute__((unused)) static bool timer_valid(const timer_heap *h)
{
    for (uint32_t i = 0; i < h->n; i++) {
        if (h->v[i]->timer_idx != i)
            return false;
        if (i && h->v[(i - 1) / 2]->deadline > h->v[i]->deadline)
            return false;
    }
    return true;
}

static void timer_set(timer_heap *h, uint32_t i, task *t)
{
    h->v[i] = t;
    t->timer_idx = i;
}

static void timer_up(timer_heap *h, uint32_t i)
{
    task *t = h->v[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (h->v[p]->deadline <= t->deadline)
            break;
        timer_set(h, i, h->v[p]);
        i = p;
    }
    timer_set(h, i, t);
}

static void timer_down(timer_heap *h, uint32_t i)
{
    task *t = h->v[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->v[c + 1]->deadline < h->v[c]->deadline)
            c++;
        if (t->deadline <= h->v[c]->deadline)
            break;
        timer_set(h, i, h->v[c]);
        i = c;
    }
    timer_set(h, i, t);
}

int mote__timer_add(timer_heap *h, task *t, int64_t deadline)
{
    if (h->n == h->cap) {
        uint32_t cap = h->cap ? h->cap * 2 : 64;
        task **v = mote_realloc(h->v, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        h->v = v;
        h->cap = cap;
    }
    mote__assert(t->timer_idx == TIMER_NONE);
    t->deadline = deadline;
    h->v[h->n] = t;
    t->timer_idx = h->n++;
    timer_up(h, t->timer_idx);
    mote__assert_expensive(timer_valid(h));
    return 0;
}

void mote__timer_cancel(timer_heap *h, task *t)
{
    uint32_t i = t->timer_idx;
    if (i == TIMER_NONE)
        return;
    mote__assert(i < h->n && h->v[i] == t);
    t->timer_idx = TIMER_NONE;
    task *last = h->v[--h->n];
    if (i != h->n) {
        timer_set(h, i, last);
        timer_up(h, i);
        timer_down(h, last->timer_idx);
    }
    mote__assert_expensive(timer_valid(h));
}

int64_t mote__timer_next(const timer_heap *h)
{
    return h->n ? h->v[0]->deadline : INT64_MAX;
}

task *mote__timer_pop_due(timer_heap *h, int64_t now)
{
    if (!h->n || h->v[0]->deadline > now)
        return NULL;
    task *t = h->v[0];
    mote__timer_cancel(h, t);
    return t;
}

void mote__timer_free(timer_heap *h)
{
    mote_free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}
