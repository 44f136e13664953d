/* test_sched.c - the task API: run, spawn, ids, yield, sleep, errors,
 * pinning, per-task floating-point state, spawning from plain threads. */
#include <errno.h>
#include <fenv.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "check.h"
#include "mote.h"

static atomic_int counter;

static void noop(void *arg) { (void)arg; atomic_fetch_add(&counter, 1); }

/* ---- errors outside a runtime ---- */
static void test_outside(void)
{
    CHECK_EQ(mote_id(), 0);
    CHECK(mote_name() == NULL);
    CHECK_EQ(mote_go(noop, NULL), -EPERM);
    CHECK_EQ(mote_sleep(1), -EPERM);
    CHECK_EQ(mote_run(NULL, NULL), -EINVAL);
    mote_yield(); /* a plain thread just yields the CPU */
    CHECK(strcmp(mote_strerror(MOTE_ECLOSED), "channel closed") == 0);
    CHECK(strlen(mote_strerror(-ENOMEM)) > 0);
    CHECK(strcmp(mote_strerror(-123456), "unknown error") == 0);
}

/* ---- ids, names, nested run, bad arguments ---- */
static _Atomic uint64_t child_ids[64];
static void record_id(void *arg) { child_ids[(intptr_t)arg] = mote_id(); }

static void main_basics(void *arg)
{
    (void)arg;
    for (int i = 0; i < 64; i++) /* this runs twice: forget the last run */
        child_ids[i] = 0;
    CHECK_EQ(mote_id(), 1);
    CHECK(strcmp(mote_name(), "main") == 0);
    CHECK_EQ(mote_run(noop, NULL), -EBUSY);
    CHECK_EQ(mote_go(NULL, NULL), -EINVAL);
    mote_task_opts bad = {.name = "x", .stack_size = 1024};
    CHECK_EQ(mote_go_ex(noop, NULL, &bad), -EINVAL);
    bad.stack_size = (size_t)4 << 30;
    CHECK_EQ(mote_go_ex(noop, NULL, &bad), -EINVAL);
    for (intptr_t i = 0; i < 64; i++)
        CHECK_EQ(mote_go(record_id, (void *)i), 0);
    while (1) {
        int done = 1;
        for (int i = 0; i < 64; i++)
            done &= child_ids[i] != 0;
        if (done)
            break;
        mote_sleep(100000);
    }
    for (int i = 0; i < 64; i++)
        for (int j = i + 1; j < 64; j++)
            CHECK(child_ids[i] != child_ids[j] && child_ids[i] > 1);
}

/* ---- sleep never ends early, and sleepers wake in time ---- */
static atomic_int sleep_bad, sleep_done;
static void sleeper(void *arg)
{
    int64_t ns = (intptr_t)arg * 100000; /* 0.1 .. 5 ms */
    int64_t t0 = mote_now();
    CHECK_EQ(mote_sleep(ns), 0);
    if (mote_now() - t0 < ns)
        atomic_fetch_add(&sleep_bad, 1);
    atomic_fetch_add(&sleep_done, 1);
}

static void main_sleep(void *arg)
{
    (void)arg;
    int64_t t0 = mote_now();
    for (intptr_t i = 0; i < 500; i++)
        CHECK_EQ(mote_go(sleeper, (void *)(1 + i % 50)), 0);
    while (atomic_load(&sleep_done) < 500)
        mote_sleep(1000000);
    CHECK_EQ(atomic_load(&sleep_bad), 0);
    CHECK(mote_now() - t0 < 5 * 1000000000LL);
    CHECK_EQ(mote_sleep(0), 0);
    CHECK_EQ(mote_sleep(-5), 0);
}

/* ---- a started task stays on its thread; errno and FP state are its own ---- */
static atomic_int pin_bad, pin_done;
static void pinned(void *arg)
{
    int mode = (intptr_t)arg ? FE_UPWARD : FE_DOWNWARD;
    fesetround(mode);
    pthread_t me = pthread_self();
    for (int i = 0; i < 200; i++) {
        errno = 1000 + i;
        if (i % 3 == 0)
            mote_sleep(10000);
        else
            mote_yield();
        if (!pthread_equal(me, pthread_self()) || errno != 1000 + i ||
            fegetround() != mode)
            atomic_fetch_add(&pin_bad, 1);
    }
    atomic_fetch_add(&pin_done, 1);
}

static void main_pin(void *arg)
{
    (void)arg;
    for (intptr_t i = 0; i < 40; i++)
        CHECK_EQ(mote_go(pinned, (void *)(i & 1)), 0);
    while (atomic_load(&pin_done) < 40)
        mote_sleep(1000000);
    CHECK_EQ(atomic_load(&pin_bad), 0);
    CHECK_EQ(fegetround(), FE_TONEAREST);
}

/* ---- spawning from a plain thread while the runtime runs ---- */
static atomic_int ext_ran;
static void ext_child(void *arg) { (void)arg; atomic_fetch_add(&ext_ran, 1); }
static void *ext_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100; i++)
        CHECK_EQ(mote_go(ext_child, NULL), 0);
    return NULL;
}

static void main_ext(void *arg)
{
    (void)arg;
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, ext_thread, NULL), 0);
    while (atomic_load(&ext_ran) < 100)
        mote_sleep(1000000);
    pthread_join(th, NULL);
    uint64_t spawned = 0;
    CHECK_EQ(mote_metric("/tasks/spawned:tasks", &spawned), 0);
    CHECK(spawned >= 101);
}

/* ---- tasks left alive when main returns are discarded ---- */
static void forever(void *arg) { (void)arg; mote_sleep(INT64_MAX); }

/* Busy with the runtime's own calls while main returns: mote_run must
 * still end (teardown once waited on a lock these calls take). */
static void busy_caller(void *arg)
{
    (void)arg;
    for (;;) {
        uint64_t v;
        mote_metric("/tasks/live:tasks", &v);
        mote_mem_release();
        mote_yield();
    }
}
static void main_leaves(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1000; i++)
        CHECK_EQ(mote_go(forever, NULL), 0);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(mote_go(busy_caller, NULL), 0);
    mote_sleep(2000000);
    uint64_t live = 0;
    CHECK_EQ(mote_metric("/tasks/live:tasks", &live), 0);
    CHECK_EQ(live, 1005);
}

int main(void)
{
    test_outside();
    CHECK_EQ(mote_run(main_basics, NULL), 0);
    CHECK_EQ(mote_run(main_sleep, NULL), 0);
    CHECK_EQ(mote_run(main_pin, NULL), 0);
    CHECK_EQ(mote_run(main_ext, NULL), 0);
    CHECK_EQ(mote_run(main_leaves, NULL), 0);
    /* and once more: a second, third... run in one process works */
    CHECK_EQ(mote_run(main_basics, NULL), 0);
    uint64_t v = 1;
    CHECK_EQ(mote_metric("/tasks/live:tasks", &v), 0);
    CHECK_EQ(v, 0);
    CHECK_EQ(mote_metric("/stacks/reserved:bytes", &v), 0);
    CHECK_EQ(v, 0);
    CHECK_EQ(mote_metric("/no/such:metric", &v), -ENOENT);
    CHECK_EQ(mote_metric(NULL, &v), -EINVAL);
    TEST_PASS("test_sched");
    return 0;
}
