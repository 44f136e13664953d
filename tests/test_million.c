/* test_million.c - a million live tasks on a default sysctl: each sleeps
 * (a million timers), the stacks take a few hundred mappings, not one per
 * task, and resident stack memory is measured from the kernel. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

#include "check.h"
#include "mote.h"

#if MOTE_DEBUG >= 2
/* Debug walks check a whole timer heap after every change: a million
 * timers would take O(n^2).  Fifty thousand still span a dozen chunks. */
#define N 50000
#else
#define N TEST_SCALE(1000000, 250) /* gcc's TSan allows 8128 fibers */
#endif
static atomic_int parked;

static void sleeper(void *arg)
{
    (void)arg;
    atomic_fetch_add(&parked, 1);
    mote_sleep(3600LL * 1000000000); /* discarded when main returns */
}

static int count_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

/* Whether every task not frozen holds a page of stack.  A freeze drops its
 * batch's pages before it counts the tasks frozen (freeze.c, steps 4 and
 * 6), so a look inside that window sees pages gone from tasks not yet
 * counted (gcc TSan, parking 4,000 tasks in 5.8 s: 2,643 B a task): the
 * counts are read again until the batch is counted, resident first. */
static bool resident_covers_unfrozen(void)
{
    uint64_t resident, frozen;
    CHECK_EQ(mote_metric("/stacks/resident:bytes", &resident), 0);
    CHECK_EQ(mote_metric("/stacks/frozen:tasks", &frozen), 0);
    return resident >= ((uint64_t)N - frozen) * 4096;
}

static void main_task(void *arg)
{
    (void)arg;
    int64_t t0 = mote_now();
    for (int i = 0; i < N; i++)
        CHECK_EQ(mote_go(sleeper, NULL), 0);
    WAIT_UNTIL(atomic_load(&parked) == N, 600);
    WAIT_UNTIL(test_metric("/tasks/blocked:tasks") == (uint64_t)N, 600);
    double secs = (double)(mote_now() - t0) / 1e9;
    uint64_t live, blocked, resident, reserved;
    CHECK_EQ(mote_metric("/tasks/live:tasks", &live), 0);
    CHECK_EQ(mote_metric("/tasks/blocked:tasks", &blocked), 0);
    CHECK_EQ(mote_metric("/stacks/resident:bytes", &resident), 0);
    CHECK_EQ(mote_metric("/stacks/reserved:bytes", &reserved), 0);
    int maps = count_maps();
    printf("%d tasks parked in %.2f s; %d mappings; stacks resident %.0f B/task\n", N,
           secs, maps, (double)resident / N);
    CHECK_EQ(live, (uint64_t)N + 1);
    CHECK_EQ(blocked, (uint64_t)N); /* all but main, which is running */
    /* a page each, but for those already frozen (MOTE_STACK_FREEZE) */
    WAIT_UNTIL(resident_covers_unfrozen(), 60);
    CHECK(reserved >= (uint64_t)N * 256 * 1024);
    /* TSan maps a shadow stack of its own per fiber; mote adds none */
    CHECK(maps < (TEST_SANITIZED ? 2000 + 5 * N : 2000));
}

TEST(million_sleeping_tasks_take_few_mappings)
{
    atomic_store(&parked, 0);
    CHECK_EQ(mote_run(main_task, NULL), 0);
    uint64_t live;
    CHECK_EQ(mote_metric("/tasks/live:tasks", &live), 0);
    CHECK_EQ(live, 0);
}

TEST_MAIN()
