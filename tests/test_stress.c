/* test_stress.c - 100k tasks spawning, yielding and sleeping across
 * workers; every task runs exactly once to completion, none is lost. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mote.h"

#define N TEST_SCALE(100000, 10)

/* more workers than CPUs: real races */
TEST_SETUP { setenv("MOTE_WORKERS", "4", 1); }

static atomic_int ran, finished;
static mote_wg all_done = MOTE_WG_INIT;
static unsigned char seen[100000];

static void leaf(void *arg)
{
    intptr_t i = (intptr_t)arg;
    CHECK(seen[i] == 0);
    seen[i] = 1;
    atomic_fetch_add(&ran, 1);
    for (int k = 0; k < (int)(i % 4); k++)
        mote_yield();
    if (i % 7 == 0)
        CHECK_EQ(mote_sleep((i % 13) * 1000), 0);
    atomic_fetch_add(&finished, 1);
    CHECK_EQ(mote_wg_done(&all_done), 0);
}

/* Spawners spawn from inside tasks on every worker. */
static void spawner(void *arg)
{
    intptr_t base = (intptr_t)arg;
    for (intptr_t i = base; i < base + N / 10; i++) {
        CHECK_EQ(mote_go(leaf, (void *)i), 0);
        if (i % 100 == 0)
            mote_yield();
    }
}

TEST_TASK(every_task_runs_exactly_once)
{
    atomic_store(&ran, 0);
    atomic_store(&finished, 0);
    memset(seen, 0, sizeof seen);
    CHECK_EQ(mote_wg_add(&all_done, N), 0);
    for (intptr_t s = 0; s < 10; s++)
        CHECK_EQ(mote_go(spawner, (void *)(s * (N / 10))), 0);
    CHECK_EQ(mote_wg_wait(&all_done), 0);
    CHECK_EQ(atomic_load(&finished), N);
    CHECK_EQ(atomic_load(&ran), N);
    for (int i = 0; i < N; i++)
        CHECK(seen[i] == 1);
}

TEST_MAIN()
