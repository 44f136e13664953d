/*
 * test_diag.c - diagnostics of a running program: mote_tasks_dump names
 * every task with its state and backtrace, a busy worker is reported as
 * such, stalls are counted (and reported with MOTE_DEBUG=stalls), unstarted
 * tasks of a stuck worker run elsewhere, and MOTE_SIGQUIT=dump writes the
 * dump on SIGQUIT while the program goes on.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "mote.h"

#define MS 1000000LL

static uint64_t metric(const char *name)
{
    uint64_t v = 0;
    CHECK_EQ(mote_metric(name, &v), 0);
    return v;
}

/* Captures what fn writes through a pipe (fn gets the write end). */
static void capture(void (*fn)(int fd), char *buf, size_t len)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK(fcntl(p[0], F_SETPIPE_SZ, 1 << 20) > 0);
    fn(p[1]);
    close(p[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < len && (r = read(p[0], buf + n, len - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = 0;
    close(p[0]);
}

static mote_chan *gate;
static int pfd[2];

static __attribute__((noinline)) void deep_wait_here(void)
{
    mote_chan_recv(gate, NULL);
    __asm__ volatile("");
}

static void chan_waiter(void *arg)
{
    (void)arg;
    deep_wait_here();
}

static void fd_waiter(void *arg)
{
    (void)arg;
    char c;
    mote_read(pfd[0], &c, 1, -1);
}

static void sleeper(void *arg)
{
    (void)arg;
    mote_sleep(60 * 1000 * MS);
}

static atomic_int offload_release;

/* Stays in the pool until the dump is taken: a fixed sleep could end
 * before a loaded machine had the other three tasks blocked. */
static intptr_t slow(void *arg)
{
    (void)arg;
    for (int i = 0; i < 60000 && !atomic_load(&offload_release); i++)
        usleep(1000);
    return 0;
}

static void offloader(void *arg)
{
    (void)arg;
    mote_offload(slow, NULL);
}

static void dump_to(int fd) { CHECK_EQ(mote_tasks_dump(fd), 0); }

static char dumped[1 << 16];

TEST_TASK(dump_names_every_task_and_what_it_waits_on)
{
    gate = mote_chan_make(0, 0);
    atomic_store(&offload_release, 0);
    CHECK_EQ(pipe(pfd), 0);
    mote_task_opts o = MOTE_TASK_OPTS_INIT;
    o.name = "the-chan-waiter";
    CHECK_EQ(mote_go_ex(chan_waiter, NULL, &o), 0);
    o.name = "the-fd-waiter";
    CHECK_EQ(mote_go_ex(fd_waiter, NULL, &o), 0);
    o.name = "the-sleeper";
    CHECK_EQ(mote_go_ex(sleeper, NULL, &o), 0);
    o.name = "the-offloader";
    CHECK_EQ(mote_go_ex(offloader, NULL, &o), 0);
    while (metric("/tasks/blocked:tasks") < 4)
        mote_sleep(MS);
    capture(dump_to, dumped, sizeof dumped);
    CHECK(strstr(dumped, "mote: task dump"));
    CHECK(strstr(dumped, "(the-chan-waiter) waiting: chan receive"));
    CHECK(strstr(dumped, "deep_wait_here"));
    char want[64];
    snprintf(want, sizeof want, "(the-fd-waiter) waiting on fd %d for reading", pfd[0]);
    CHECK(strstr(dumped, want));
    CHECK(strstr(dumped, "(the-sleeper) sleeping"));
    CHECK(strstr(dumped, "(the-offloader) in mote_offload"));
    CHECK(strstr(dumped, "(main) running")); /* the caller */
    atomic_store(&offload_release, 1);
    mote_close(pfd[0]);
    mote_close(pfd[1]);
}

static atomic_int spin_stop, spin_started;
static void spinner(void *arg)
{
    (void)arg;
    atomic_store(&spin_started, 1);
    while (!atomic_load(&spin_stop))
        ; /* never parks */
}

static void dump_busy_main(void *arg)
{
    (void)arg;
    atomic_store(&spin_stop, 0);
    mote_task_opts o = MOTE_TASK_OPTS_INIT;
    o.name = "hog";
    CHECK_EQ(mote_go_ex(spinner, NULL, &o), 0);
    /* without parking, so that the other worker steals it and spins */
    while (!atomic_load(&spin_started))
        ;
    capture(dump_to, dumped, sizeof dumped);
    atomic_store(&spin_stop, 1);
    /* The hog's worker now answers the dump that gave up on it: that late
     * answer must be freed (at the next dump or at the end of the run; the
     * ASan builds' leak check fails this case otherwise). */
    mote_sleep(20 * 1000000);
}

TEST(dump_reports_a_busy_worker_and_its_task)
{
    setenv("MOTE_WORKERS", "2", 1);
    CHECK_EQ(mote_run(dump_busy_main, NULL), 0);
    unsetenv("MOTE_WORKERS");
    CHECK(strstr(dumped, "busy, did not reach a scheduling point"));
    CHECK(strstr(dumped, "(hog) is running"));
}

TEST(dump_outside_a_run_says_so)
{
    capture(dump_to, dumped, sizeof dumped);
    CHECK(strstr(dumped, "no run in progress"));
    CHECK_EQ(mote_tasks_dump(-1), -EBADF);
}

/* Two dumps at once from tasks of one worker, while the other worker is
 * busy (so the first dump sleeps while it waits): the second waits its
 * turn instead of spinning the worker out from under the first (it hung
 * for good).  And the first write error is returned. */
static atomic_int dumps_done;

static void two_dumps_hog(void *arg)
{
    (void)arg;
    int64_t t0 = mote_now();
    while (mote_now() - t0 < 300 * MS)
        ;
}

static void one_dump(void *arg)
{
    int fd = (int)(intptr_t)arg;
    CHECK_EQ(mote_tasks_dump(fd), 0);
    atomic_fetch_add(&dumps_done, 1);
}

static void two_dumps_main(void *arg)
{
    (void)arg;
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK_EQ(mote_go(two_dumps_hog, NULL), 0);
    mote_sleep(20 * MS); /* the hog has a worker to itself */
    CHECK_EQ(mote_go(one_dump, (void *)(intptr_t)fd), 0);
    CHECK_EQ(mote_go(one_dump, (void *)(intptr_t)fd), 0);
    int64_t t0 = mote_now();
    while (atomic_load(&dumps_done) < 2 && mote_now() - t0 < 5000 * MS)
        mote_sleep(MS);
    CHECK_EQ(atomic_load(&dumps_done), 2);
    close(fd);
    int full = open("/dev/full", O_WRONLY | O_CLOEXEC);
    CHECK(full >= 0);
    CHECK_EQ(mote_tasks_dump(full), -ENOSPC);
    close(full);
    CHECK_EQ(mote_tasks_dump(full), -EBADF);    /* closed */
    CHECK_EQ(mote_tasks_dump(1 << 20), -EBADF); /* never opened */
}

TEST(dumps_at_once_take_turns_and_errors_are_returned)
{
    alarm(60); /* a hang would otherwise take ctest's whole timeout */
    CHECK_EQ(test_run_env("MOTE_WORKERS", "2", two_dumps_main, NULL), 0);
    alarm(0);
}

/* ---- stalls -------------------------------------------------------------- */

static atomic_int late_ran;
static void late(void *arg)
{
    (void)arg;
    atomic_store(&late_ran, 1);
}

static void stall_main(void *arg)
{
    int raw_syscall = arg != NULL;
    uint64_t before = metric("/sched/stalls:events");
    atomic_store(&late_ran, 0);
    /* This worker runs a task that does not park; a fresh task queued here
     * meanwhile must be taken by the other, idle worker. */
    CHECK_EQ(mote_go(late, NULL), 0);
    /* Stuck until the monitor has seen it (however late a loaded machine
     * runs the monitor), then long enough for the report to be taken. */
    int64_t t0 = mote_now(), seen = 0, looked = 0;
    for (;;) {
        int64_t now = mote_now();
        if (!seen && now - looked >= MS) { /* seldom: the sample is taken here */
            looked = now;
            if (metric("/sched/stalls:events") > before)
                seen = now;
        }
        if ((seen && now - seen >= 300 * MS && now - t0 >= 80 * MS) ||
            now - t0 > 20000 * MS)
            break;
        if (raw_syscall) {
            usleep(20 * 1000); /* a raw blocking call: blocks this worker */
        } else {
            /* Mostly spinning here, not in the clock: the report's
             * backtrace is sampled wherever the task is, and the vDSO
             * keeps no frame pointer to walk out of it. */
            volatile unsigned spin = 0;
            for (int i = 0; i < 20000; i++)
                spin++;
        }
    }
    CHECK(atomic_load(&late_ran)); /* stolen while we were stuck */
    CHECK(metric("/sched/stalls:events") > before);
}

static void stall_child(void *arg)
{
    setenv("MOTE_WORKERS", "2", 1);
    setenv("MOTE_DEBUG", "stalls", 1);
    _exit(mote_run(stall_main, arg) == 0 ? 0 : 3);
}

TEST(a_task_that_does_not_park_is_a_reported_stall)
{
    char err[8192];
    int st = test_fork_capture(stall_child, NULL, err, sizeof err);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !strstr(err, "stall_main"))
        fprintf(stderr, "%s", err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(strstr(err, "mote: stall: task 1 (main) has run"));
    /* TSan holds a signal back until the thread enters one of its
     * interceptors and then hands the handler that moment's context, so
     * the sampled backtrace may start inside TSan. */
    CHECK(TEST_TSAN || strstr(err, "stall_main"));
}

TEST(a_blocking_system_call_is_a_reported_stall)
{
    char err[8192];
    int st = test_fork_capture(stall_child, (void *)1, err, sizeof err);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
        !strstr(err, "(main) has been in a blocking system call"))
        fprintf(stderr, "%s", err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(strstr(err, "(main) has been in a blocking system call"));
}

/* ---- SIGQUIT --------------------------------------------------------------- */

static void quit_main(void *arg)
{
    (void)arg;
    gate = mote_chan_make(0, 0);
    mote_task_opts o = MOTE_TASK_OPTS_INIT;
    o.name = "quit-witness";
    CHECK_EQ(mote_go_ex(chan_waiter, NULL, &o), 0);
    mote_sleep(10 * MS);
    CHECK_EQ(raise(SIGQUIT), 0);
    mote_sleep(300 * MS); /* the monitor writes the dump meanwhile */
    mote_chan_close(gate);
}

static void quit_child(void *arg)
{
    (void)arg;
    setenv("MOTE_SIGQUIT", "dump", 1);
    _exit(mote_run(quit_main, NULL) == 0 ? 0 : 3);
}

TEST(sigquit_dumps_and_the_program_goes_on)
{
    char err[16384];
    int st = test_fork_capture(quit_child, NULL, err, sizeof err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(strstr(err, "mote: task dump"));
    CHECK(strstr(err, "(quit-witness) waiting: chan receive"));
}

TEST_MAIN()
