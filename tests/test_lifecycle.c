/*
 * test_lifecycle.c - objects that outlive a run.  When main returns, tasks
 * still blocked on channels, conditions, wait groups and mutexes are
 * discarded; their wait records must leave those objects, so every later
 * call on them is well defined and a next run can use them.  Also: plain
 * threads waking tasks while a run tears down, and channels freed while a
 * completed select still holds them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "mote.h"

static uint64_t metric(const char *name)
{
    uint64_t v = 0;
    CHECK_EQ(mote_metric(name, &v), 0);
    return v;
}

/* Parks the calling task until n tasks are blocked (besides itself). */
static void wait_blocked(uint64_t n)
{
    while (metric("/tasks/blocked:tasks") < n)
        mote_sleep(100 * 1000);
}

/* ---- channels ------------------------------------------------------------ */

static mote_chan *ch, *ch2;

static void blocked_receiver(void *arg)
{
    (void)arg;
    int v;
    mote_chan_recv(ch, &v); /* never completes: discarded at the end */
    CHECK(0);
}

static void blocked_sender(void *arg)
{
    (void)arg;
    int v = 7;
    mote_chan_send(ch2, &v); /* blocks on a full buffer */
    CHECK(0);
}

static void leave_blocked_on_chans(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_go(blocked_receiver, NULL), 0);
    CHECK_EQ(mote_chan_send(ch2, &(int){1}), 0); /* fills cap 1 */
    CHECK_EQ(mote_go(blocked_sender, NULL), 0);
    wait_blocked(2);
}

static int next_run_value;
static void next_run_uses_chans(void *arg)
{
    (void)arg;
    /* the buffered value survived; the discarded sender's did not arrive */
    CHECK_EQ(mote_chan_recv(ch2, &next_run_value), 0);
    CHECK_EQ(mote_chan_trysend(ch2, &(int){2}), 0);
    int v = 0;
    CHECK_EQ(mote_chan_tryrecv(ch2, &v), 0);
    CHECK_EQ(v, 2);
    CHECK_EQ(mote_chan_tryrecv(ch2, &v), -EAGAIN);
}

TEST(chan_waiters_of_a_finished_run_are_gone)
{
    ch = mote_chan_make(sizeof(int), 0);
    ch2 = mote_chan_make(sizeof(int), 1);
    CHECK_EQ(mote_run(leave_blocked_on_chans, NULL), 0);
    /* Before the fix these touched records on unmapped stacks. */
    CHECK_EQ(mote_chan_trysend(ch, &(int){3}), -EAGAIN); /* no receiver left */
    CHECK_EQ(mote_chan_len(ch2), 1);
    CHECK_EQ(mote_run(next_run_uses_chans, NULL), 0);
    CHECK_EQ(next_run_value, 1);
    CHECK_EQ(mote_chan_close(ch), 0);
    CHECK_EQ(mote_chan_free(ch), 0); /* was: abort, "tasks still blocked" */
    CHECK_EQ(mote_chan_free(ch2), 0);
}

static void select_forever(void *arg)
{
    (void)arg;
    mote_case cs[2] = {{ch, MOTE_RECV, NULL, 0}, {ch2, MOTE_RECV, NULL, 0}};
    mote_select(cs, 2, -1);
    CHECK(0);
}

static void leave_blocked_in_select(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++)
        CHECK_EQ(mote_go(select_forever, NULL), 0);
    wait_blocked(3);
}

TEST(select_records_of_a_finished_run_are_gone)
{
    ch = mote_chan_make(0, 0);
    ch2 = mote_chan_make(0, 0);
    CHECK_EQ(mote_run(leave_blocked_in_select, NULL), 0);
    CHECK_EQ(mote_chan_trysend(ch, NULL), -EAGAIN);
    CHECK_EQ(mote_chan_trysend(ch2, NULL), -EAGAIN);
    CHECK_EQ(mote_chan_free(ch), 0);
    CHECK_EQ(mote_chan_free(ch2), 0);
}

/* ---- condition variables, wait groups, mutexes ----------------------------- */

static mote_mutex mu = MOTE_MUTEX_INIT;
static mote_cond cv = MOTE_COND_INIT;
static mote_wg wg = MOTE_WG_INIT;

static void cond_waiter(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_mutex_lock(&mu), 0);
    for (;;)
        mote_cond_wait(&cv, &mu);
}

static void wg_waiter(void *arg)
{
    (void)arg;
    mote_wg_wait(&wg);
    CHECK(0);
}

static void leave_blocked_on_sync(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_wg_add(&wg, 1), 0);
    CHECK_EQ(mote_go(cond_waiter, NULL), 0);
    CHECK_EQ(mote_go(wg_waiter, NULL), 0);
    wait_blocked(2);
}

static int woke;
static void cond_waiter_once(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_mutex_lock(&mu), 0);
    while (!woke)
        CHECK_EQ(mote_cond_wait(&cv, &mu), 0);
    CHECK_EQ(mote_mutex_unlock(&mu), 0);
}

static void next_run_uses_sync(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_go(cond_waiter_once, NULL), 0);
    wait_blocked(1);
    CHECK_EQ(mote_mutex_lock(&mu), 0);
    woke = 1;
    CHECK_EQ(mote_cond_signal(&cv), 0);
    CHECK_EQ(mote_mutex_unlock(&mu), 0);
    CHECK_EQ(mote_wg_add(&wg, 1), 0);
    CHECK_EQ(mote_wg_done(&wg), 0);
    CHECK_EQ(mote_wg_wait(&wg), 0);
    while (metric("/tasks/live:tasks") > 1)
        mote_yield();
}

TEST(sync_waiters_of_a_finished_run_are_gone)
{
    CHECK_EQ(mote_run(leave_blocked_on_sync, NULL), 0);
    /* Before the fix: SIGSEGV on the discarded tasks' records. */
    CHECK_EQ(mote_cond_signal(&cv), 0);
    CHECK_EQ(mote_cond_broadcast(&cv), 0);
    CHECK_EQ(mote_wg_done(&wg), 0);
    /* the cond waiter held no mutex while it waited */
    CHECK_EQ(mote_mutex_trylock(&mu), 0);
    CHECK_EQ(mote_mutex_unlock(&mu), 0);
    CHECK_EQ(mote_run(next_run_uses_sync, NULL), 0);
}

/* A mutex waiter that an unlock woke, discarded before it ran, must give
 * its wake-up back: otherwise the next run's unlock believes a woken waiter
 * is on its way and wakes nobody (a lost wake-up). */
static void mutex_waiter(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_mutex_lock(&mu), 0);
    CHECK_EQ(mote_mutex_unlock(&mu), 0);
}

static void unlock_then_end(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_mutex_lock(&mu), 0);
    CHECK_EQ(mote_go(mutex_waiter, NULL), 0);
    wait_blocked(1);
    CHECK_EQ(mote_mutex_unlock(&mu), 0); /* wakes the waiter; we end first */
}

static void lock_contended(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_mutex_lock(&mu), 0);
    CHECK_EQ(mote_go(mutex_waiter, NULL), 0);
    wait_blocked(1);
    CHECK_EQ(mote_mutex_unlock(&mu), 0);
    while (metric("/tasks/live:tasks") > 1) /* the waiter must get the lock */
        mote_yield();
}

TEST(mutex_wakeup_of_a_discarded_waiter_is_given_back)
{
    setenv("MOTE_WORKERS", "1", 1); /* the woken waiter cannot run first */
    CHECK_EQ(mote_run(unlock_then_end, NULL), 0);
    CHECK_EQ(mote_run(lock_contended, NULL), 0);
    unsetenv("MOTE_WORKERS");
}

/* ---- plain threads waking tasks while a run ends ----------------------------- */

static atomic_int stop_poker;
static void *poker(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_poker)) {
        mote_chan_trysend(ch, NULL);
        mote_cond_broadcast(&cv);
        mote_wg_add(&wg, 1);
        mote_wg_add(&wg, -1);
    }
    return NULL;
}

static void chan_waiter(void *arg)
{
    (void)arg;
    while (mote_chan_recv(ch, NULL) == 0)
        ;
}

static void wg_waiter_loop(void *arg)
{
    (void)arg;
    for (;;)
        mote_wg_wait(&wg);
}

static void many_waiters(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20; i++) {
        CHECK_EQ(mote_go(chan_waiter, NULL), 0);
        CHECK_EQ(mote_go(cond_waiter, NULL), 0);
        CHECK_EQ(mote_go(wg_waiter_loop, NULL), 0);
    }
    mote_sleep(2 * 1000000);
}

TEST(plain_thread_wakes_tasks_while_runs_end)
{
    ch = mote_chan_make(0, 0);
    atomic_store(&stop_poker, 0);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, poker, NULL), 0);
    int runs = TEST_SCALE(30, 5);
    for (int i = 0; i < runs; i++) /* ASan/TSan: no use after free */
        CHECK_EQ(mote_run(many_waiters, NULL), 0);
    atomic_store(&stop_poker, 1);
    pthread_join(t, NULL);
    CHECK_EQ(mote_chan_free(ch), 0);
}

/* ---- freeing a channel while a completed select still holds it ------------------ */

static mote_chan *sa, *sb;
static mote_wg select_done = MOTE_WG_INIT;

static void select_ab(void *arg)
{
    (void)arg;
    int v = 0;
    mote_case cs[2] = {{sa, MOTE_RECV, &v, 0}, {sb, MOTE_RECV, &v, 0}};
    CHECK_EQ(mote_select(cs, 2, -1), 0);
    CHECK_EQ(v, 5);
    mote_wg_done(&select_done);
}

static void free_b_after_select_fired(void *arg)
{
    (void)arg;
    sa = mote_chan_make(sizeof(int), 0);
    sb = mote_chan_make(sizeof(int), 0);
    CHECK_EQ(mote_wg_add(&select_done, 1), 0);
    CHECK_EQ(mote_go(select_ab, NULL), 0);
    wait_blocked(1);
    /* Completes the select; with one worker it cannot run (and take its
     * record out of sb) before we free sb. */
    CHECK_EQ(mote_chan_send(sa, &(int){5}), 0);
    CHECK_EQ(mote_chan_free(sb), 0); /* was: abort, "still blocked" */
    CHECK_EQ(mote_chan_trysend(sb, &(int){1}), -EINVAL);
    CHECK_EQ(mote_wg_wait(&select_done), 0);
    CHECK_EQ(mote_chan_free(sa), 0);
}

TEST(chan_free_after_select_fired_elsewhere)
{
    setenv("MOTE_WORKERS", "1", 1);
    for (int i = 0; i < 20; i++)
        CHECK_EQ(mote_run(free_b_after_select_fired, NULL), 0);
    unsetenv("MOTE_WORKERS");
}

static void blocked_on_ch(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_chan_recv(ch, NULL), MOTE_ECLOSED);
}

TEST_TASK(chan_free_refuses_while_a_task_waits)
{
    ch = mote_chan_make(0, 0);
    CHECK_EQ(mote_go(blocked_on_ch, NULL), 0);
    wait_blocked(1);
    CHECK_EQ(mote_chan_free(ch), -EBUSY); /* nothing freed: still usable */
    CHECK_EQ(mote_chan_close(ch), 0);
    while (metric("/tasks/live:tasks") > 1)
        mote_yield();
    CHECK_EQ(mote_chan_free(ch), 0);
}

TEST_MAIN()
