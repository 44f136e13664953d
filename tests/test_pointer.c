/* test_pointer.c - stacks never move: a child on another worker writes
 * through a pointer into its parked parent's stack, many times, and the
 * parent sees every write when it resumes.  Uses the internal park/unpark
 * protocol directly (park.h). */
#include <stdatomic.h>
#include <stdlib.h>

#include "check.h"
#include "mote.h"
#include "park.h"

typedef struct msg {
    volatile uint64_t *slot; /* points into the parent's stack */
    uint64_t value;
    task *parent;
} msg;

static void child(void *arg)
{
    msg *m = arg;
    /* wait until the parent is really parked: claim succeeds only then */
    while (!mote__park_claim(m->parent))
        mote_yield();
    *m->slot = m->value;
    mote__park_ready(m->parent, 7);
}

static void deep(int depth, uint64_t *sum)
{
    volatile uint64_t local[64]; /* a frame of its own, deep in the stack */
    local[depth % 64] = 0;
    if (depth)
        deep(depth - 1, sum);
    for (int round = 0; round < 10; round++) {
        msg m = {&local[depth % 64], (uint64_t)depth * 1000 + round, mote__self()};
        mote__park_prepare("test", &m);
        CHECK_EQ(mote_go(child, &m), 0);
        CHECK_EQ(mote__park(), 7);
        CHECK_EQ(local[depth % 64], (uint64_t)depth * 1000 + round);
        *sum += local[depth % 64];
    }
}

TEST_SETUP { setenv("MOTE_WORKERS", "2", 1); }

TEST_TASK(child_writes_through_pointers_into_parked_parent_stack)
{
    uint64_t sum = 0;
    deep(50, &sum);
    uint64_t want = 0;
    for (int d = 0; d <= 50; d++)
        for (int r = 0; r < 10; r++)
            want += (uint64_t)d * 1000 + r;
    CHECK_EQ(sum, want);
}

TEST_MAIN()
