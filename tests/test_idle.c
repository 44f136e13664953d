/* test_idle.c - an idle runtime sleeps in the kernel: over a second in
 * which every task is parked (on timers and a channel), the process uses
 * almost no CPU, with its tasks frozen after 1 s or after 1 ms. */
#include <sys/resource.h>

#include "check.h"
#include "mote.h"

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static mote_wg napping = MOTE_WG_INIT;
static mote_chan *gate;

/* Parked on a timer far away and on a channel closed when the test ends. */
static void napper(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_wg_done(&napping), 0);
    mote_case c = {.chan = gate, .op = MOTE_RECV};
    CHECK_EQ(mote_select(&c, 1, 60LL * 1000000000), 0);
    CHECK_EQ(c.result, MOTE_ECLOSED);
}

static void idle_check(void *arg)
{
    (void)arg;
    gate = mote_chan_make(0, 0);
    CHECK(gate != NULL);
    CHECK_EQ(mote_wg_add(&napping, 100), 0);
    for (int i = 0; i < 100; i++)
        CHECK_EQ(mote_go(napper, NULL), 0);
    CHECK_EQ(mote_wg_wait(&napping), 0);
    WAIT_UNTIL(test_metric("/tasks/blocked:tasks") == 100, 60);
    /* let the workers settle: spins, trims and the freeze of the parked
     * tasks (MOTE_STACK_FREEZE, 1 s; slow under a sanitizer) end */
    mote_sleep(1500 * 1000000LL);
    /* A runtime that polls uses CPU in every second; one that sleeps uses
     * none in most.  Up to three tries: a sanitizer's own threads, or a
     * freeze still running on a loaded machine (seen under gcc TSan: 74 ms
     * in one second), may take a share of one. */
    double used = 1;
    for (int i = 0; i < 3 && used >= 0.05; i++) {
        double c0 = cpu_seconds();
        int64_t t0 = mote_now();
        CHECK_EQ(mote_sleep(1000000000), 0);
        used = cpu_seconds() - c0;
        double wall = (double)(mote_now() - t0) / 1e9;
        printf("idle second: %.1f ms CPU over %.2f s (frozen tasks %llu)\n", used * 1e3,
               wall, (unsigned long long)test_metric("/stacks/frozen:tasks"));
        CHECK(wall >= 1.0);
    }
    CHECK(used < 0.05);
    CHECK_EQ(mote_chan_close(gate), 0);
    WAIT_UNTIL(test_metric("/tasks/blocked:tasks") == 0, 60);
    CHECK_EQ(mote_chan_free(gate), 0);
}

TEST_TASK(idle_runtime_uses_no_cpu) { idle_check(NULL); }

/* Frozen tasks wake no worker: a thaw in place tells its worker itself
 * (a version whose workers looked every threshold while any task was
 * frozen used 57-65 ms in each idle second here). */
TEST(idle_runtime_with_a_short_freeze_threshold_uses_no_cpu)
{
    CHECK_EQ(test_run_env("MOTE_STACK_FREEZE", "1ms", idle_check, NULL), 0);
}

/* A stream of tasks thawed in place: each new receiver on a channel parks
 * behind the frozen one before it and writes into its record.  Each such
 * orphan costs its worker a sweep step, not a busy loop until the step is
 * due (a version that kept the worker awake until then used 30% of a CPU
 * here, 5% with the fix; the same code measured 11-16% on a slower day of
 * this VM, and failed a 15% bound 1 run in 5, so the bound is 20%). */
static void orphan_stream(void *arg)
{
    (void)arg;
    gate = mote_chan_make(0, 0);
    CHECK(gate != NULL);
    enum { FIRST = 500, MAX_ADDS = 1000 };
    CHECK_EQ(mote_wg_add(&napping, FIRST), 0);
    for (int i = 0; i < FIRST; i++)
        CHECK_EQ(mote_go(napper, NULL), 0);
    CHECK_EQ(mote_wg_wait(&napping), 0);
    WAIT_UNTIL(test_metric("/stacks/frozen:tasks") >= FIRST, 60);
    int added = 0;
    double used = 1;
    for (int i = 0; i < 3 && used >= 0.20; i++) {
        double c0 = cpu_seconds();
        int64_t t0 = mote_now();
        while (mote_now() - t0 < 1000000000 && added < MAX_ADDS) {
            CHECK_EQ(mote_wg_add(&napping, 1), 0);
            CHECK_EQ(mote_go(napper, NULL), 0);
            added++;
            CHECK_EQ(mote_sleep(3 * 1000000), 0);
        }
        used = (cpu_seconds() - c0) / ((double)(mote_now() - t0) / 1e9);
        printf("a task thawed in place every 3 ms: %.1f%% of a CPU (%d added)\n",
               used * 100, added);
    }
    CHECK(used < 0.20);
    CHECK_EQ(mote_wg_wait(&napping), 0);
    CHECK_EQ(mote_chan_close(gate), 0);
    WAIT_UNTIL(test_metric("/tasks/blocked:tasks") == 0, 60);
    CHECK_EQ(mote_chan_free(gate), 0);
}

TEST(a_stream_of_tasks_thawed_in_place_keeps_no_worker_awake)
{
    if (TEST_SANITIZED)
        TEST_SKIP("CPU shares under a sanitizer measure the sanitizer");
    CHECK_EQ(test_run_env("MOTE_STACK_FREEZE", "1ms", orphan_stream, NULL), 0);
}

TEST_MAIN()
