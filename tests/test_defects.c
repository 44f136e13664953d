/*
 * test_defects.c - regression tests for defects found by an independent
 * test pass (issue 9): each case failed before its fix.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mote.h"

/* ---- a spawn from a plain thread runs even when its worker is busy ---- */

static atomic_llong spawned_at, ran_at;

static void record_run(void *arg)
{
    (void)arg;
    atomic_store(&ran_at, mote_now());
}

static void *plain_spawner(void *arg)
{
    (void)arg;
    usleep(20 * 1000);
    atomic_store(&spawned_at, mote_now());
    CHECK_EQ(mote_go(record_run, NULL), 0);
    return NULL;
}

static void busy_main(void *arg)
{
    (void)arg;
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, plain_spawner, NULL), 0);
    /* Keep this worker busy without a scheduling point.  The spawn's queue
     * is chosen round-robin: with ext_rr at 0 it is ours, and before the
     * fix only we were woken; the idle worker slept on. */
    int64_t t0 = mote_now();
    while (!atomic_load(&ran_at) && mote_now() - t0 < 3000 * 1000000LL)
        ;
    int64_t busy_for = mote_now() - t0;
    pthread_join(t, NULL);
    CHECK(atomic_load(&ran_at) != 0);
    CHECK(busy_for < 3000 * 1000000LL); /* it ran while we were still busy */
}

TEST(plain_spawn_runs_while_its_worker_is_busy)
{
    setenv("MOTE_WORKERS", "2", 1);
    atomic_store(&ran_at, 0);
    CHECK_EQ(mote_run(busy_main, NULL), 0);
    unsetenv("MOTE_WORKERS");
}

/* ---- wait group counter bounds ---------------------------------------------- */

TEST(wg_add_rejects_overflow_and_keeps_count)
{
    mote_wg wg = MOTE_WG_INIT;
    CHECK_EQ(mote_wg_add(&wg, INT64_MIN), -EINVAL); /* was 0, count -2^63 */
    CHECK_EQ(wg.count, 0);
    CHECK_EQ(mote_wg_add(&wg, -1), -EINVAL);
    CHECK_EQ(mote_wg_add(&wg, INT64_MAX), 0);
    CHECK_EQ(mote_wg_add(&wg, 1), -EINVAL);
    CHECK_EQ(wg.count, INT64_MAX);
    CHECK_EQ(mote_wg_add(&wg, INT64_MIN), -EINVAL);
    CHECK_EQ(mote_wg_add(&wg, -INT64_MAX), 0);
    CHECK_EQ(wg.count, 0);
    CHECK_EQ(mote_wg_add(NULL, 1), -EINVAL);
}

/* ---- the memory limit of one run never leaks into the next ------------------------ */

static void try_spawn(void *arg) { (void)arg; }

static atomic_int stop_spawner;
static atomic_int bad_result;
static void *spawner(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_spawner)) {
        int r = mote_go(try_spawn, NULL);
        if (r != 0 && r != -EPERM && r != -ENOMEM)
            atomic_store(&bad_result, r);
    }
    return NULL;
}

static void quick_main(void *arg) { (void)arg; }

TEST(memlimit_is_read_only_inside_its_run)
{
    /* A limit far below the process RSS: spawns in the run fail. */
    setenv("MOTE_MEMLIMIT", "1M", 1);
    CHECK_EQ(mote_run(quick_main, NULL), 0);
    unsetenv("MOTE_MEMLIMIT");
    /* No run: -EPERM, never the stale -ENOMEM. */
    CHECK_EQ(mote_go(try_spawn, NULL), -EPERM);
    /* Plain threads spawning while runs start and end (TSan: no race on
     * the configuration). */
    atomic_store(&stop_spawner, 0);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, spawner, NULL), 0);
    for (int i = 0; i < TEST_SCALE(40, 4); i++) {
        if (i % 2)
            setenv("MOTE_MEMLIMIT", "1M", 1);
        else
            unsetenv("MOTE_MEMLIMIT");
        CHECK_EQ(mote_run(quick_main, NULL), 0);
    }
    unsetenv("MOTE_MEMLIMIT");
    atomic_store(&stop_spawner, 1);
    pthread_join(t, NULL);
    CHECK_EQ(atomic_load(&bad_result), 0);
    CHECK_EQ(mote_go(try_spawn, NULL), -EPERM);
}

/* ---- overflow blame ------------------------------------------------------------ */

#define SMALL_STACK 8192
static mote_chan *park_here;

static void neighbour(void *arg)
{
    (void)arg;
    mote_chan_recv(park_here, NULL);
}

/* What an unprobed frame of `bytes` does: its first store lands that far
 * below the stack pointer, skipping every page in between. */
static __attribute__((noinline)) void stray_store(size_t bytes)
{
    volatile char *p = (volatile char *)__builtin_frame_address(0) - bytes;
    *p = 1;
}

/* A probing frame (what -fstack-clash-protection emits): one store per
 * page on the way down, so the first fault is in the task's own guard. */
static __attribute__((noinline)) void probed_store(size_t bytes)
{
    volatile char *top = __builtin_frame_address(0);
    for (size_t off = 4096; off <= bytes; off += 4096)
        top[-(ptrdiff_t)off] = 1;
}

static void culprit(void *arg)
{
    size_t how = (size_t)(uintptr_t)arg;
    /* 8 KiB stack + 16 KiB guard, then the neighbour's 8 KiB stack: 36 KiB
     * down lands in the guard below the neighbour's stack. */
    if (how == 0)
        stray_store(36 * 1024);
    else
        probed_store(36 * 1024);
}

static void overflow_main(void *arg)
{
    park_here = mote_chan_make(0, 0);
    mote_task_opts small = MOTE_TASK_OPTS_INIT;
    small.stack_size = SMALL_STACK;
    small.name = "neighbour";
    /* Slots of one class are carved in address order: the culprit's
     * neighbours below it are parked tasks. */
    for (int i = 0; i < 8; i++)
        CHECK_EQ(mote_go_ex(neighbour, NULL, &small), 0);
    mote_sleep(5 * 1000000);
    small.name = "culprit";
    CHECK_EQ(mote_go_ex(culprit, arg, &small), 0);
    mote_sleep(5 * 1000000000LL);
}

static void overflow_child(void *arg)
{
    setenv("MOTE_WORKERS", "1", 1);
    mote_run(overflow_main, arg);
    _exit(3); /* the overflow must abort before this */
}

TEST(overflow_names_the_running_task_not_the_guards_owner)
{
    if (TEST_SANITIZED)
        exit(77); /* ASan reports the wild store itself */
    char err[4096];
    int st = test_fork_capture(overflow_child, (void *)0, err, sizeof err);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    CHECK(strstr(err, "(culprit) overflowed its 8 KiB stack"));
    CHECK(strstr(err, "jumped past it into the guard of task"));
    CHECK(strstr(err, "(neighbour)"));
    CHECK(!strstr(err, "(neighbour) overflowed"));
}

TEST(probed_frames_hit_their_own_guard)
{
    if (TEST_SANITIZED)
        exit(77);
    char err[4096];
    int st = test_fork_capture(overflow_child, (void *)1, err, sizeof err);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    CHECK(strstr(err, "mote: task "));
    CHECK(strstr(err, "(culprit) overflowed its 8 KiB stack\n"));
}

/* ---- allocator: any power-of-two alignment ------------------------------------- */

TEST(aligned_alloc_takes_gigabyte_alignments)
{
    for (int sh = 20; sh <= 34; sh++) {
        size_t a = (size_t)1 << sh;
        char *p = mote_aligned_alloc(a, 100); /* was NULL/ENOMEM from 2^30 */
        CHECK(p != NULL);
        CHECK(((uintptr_t)p & (a - 1)) == 0);
        p[0] = 1;
        p[99] = 2;
        CHECK(mote_usable_size(p) >= 100);
        mote_free(p);
    }
}

/* ---- sizes are checked ----------------------------------------------------- */

TEST(chan_make_checks_element_size)
{
    errno = 0;
    CHECK(mote_chan_make(SIZE_MAX, 0) == NULL); /* was a channel */
    CHECK_EQ(errno, EINVAL);
    CHECK(mote_chan_make(65537, 1) == NULL);
    CHECK(mote_chan_make(SIZE_MAX / 2, 4) == NULL);
    mote_chan *c = mote_chan_make(65536, 1);
    CHECK(c != NULL);
    CHECK_EQ(mote_chan_free(c), 0);
}

TEST_MAIN()
