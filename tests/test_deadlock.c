/*
 * test_deadlock.c - deadlock detection for tasks blocked on channels,
 * select, mutexes, conditions and wait groups.  Each case runs its
 * scenario in a forked child (no runtime ever starts in the parent) with
 * its stderr captured: mote_run must return -EDEADLK and the report must
 * name what the tasks wait on.  Controls check that a pending timer or a
 * main that returns is not reported.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "mote.h"

#define MS     (1000 * 1000LL)
#define HEADER "mote: all tasks are asleep - deadlock!"

/* ---- scenarios: each is a mote_run main ---- */

static void dl_chan_recv(void *arg)
{
    (void)arg;
    mote_chan *c = mote_chan_make(sizeof(int), 0);
    int v;
    mote_chan_recv(c, &v);
}

static void helper_recv(void *arg) { mote_chan_recv(arg, NULL); }

static void dl_chan_send(void *arg)
{
    (void)arg;
    mote_chan *a = mote_chan_make(sizeof(int), 1);
    mote_chan *b = mote_chan_make(sizeof(int), 0);
    CHECK_EQ(mote_go(helper_recv, b), 0);      /* waits on b, nobody sends */
    CHECK_EQ(mote_chan_send(a, &(int){1}), 0); /* fills the buffer */
    mote_chan_send(a, &(int){2});              /* blocks forever */
}

static void dl_select_null(void *arg)
{
    (void)arg;
    mote_case cs[] = {{NULL, MOTE_RECV, NULL, 0}, {NULL, MOTE_SEND, NULL, 0}};
    mote_select(cs, 2, -1);
}

static void dl_select_empty(void *arg)
{
    (void)arg;
    mote_select(NULL, 0, -1);
}

static void dl_select_chans(void *arg)
{
    (void)arg;
    mote_chan *a = mote_chan_make(sizeof(int), 0);
    mote_chan *b = mote_chan_make(sizeof(int), 4);
    int v = 0;
    CHECK_EQ(mote_chan_send(b, &v), 0); /* not empty, but only sends... */
    for (int i = 1; i < 4; i++)
        CHECK_EQ(mote_chan_send(b, &v), 0); /* ...and now it is full */
    mote_case cs[] = {{a, MOTE_RECV, &v, 0}, {b, MOTE_SEND, &v, 0}};
    mote_select(cs, 2, -1);
}

typedef struct cycle {
    mote_mutex m1, m2;
    mote_wg both_locked;
    mote_wg finished;
} cycle;

static void cycle_a(void *arg)
{
    cycle *c = arg;
    CHECK_EQ(mote_mutex_lock(&c->m1), 0);
    CHECK_EQ(mote_wg_done(&c->both_locked), 0);
    CHECK_EQ(mote_wg_wait(&c->both_locked), 0);
    mote_mutex_lock(&c->m2);
    mote_wg_done(&c->finished);
}

static void cycle_b(void *arg)
{
    cycle *c = arg;
    CHECK_EQ(mote_mutex_lock(&c->m2), 0);
    CHECK_EQ(mote_wg_done(&c->both_locked), 0);
    CHECK_EQ(mote_wg_wait(&c->both_locked), 0);
    mote_mutex_lock(&c->m1);
    mote_wg_done(&c->finished);
}

static void dl_mutex_cycle(void *arg)
{
    (void)arg;
    static cycle c = {MOTE_MUTEX_INIT, MOTE_MUTEX_INIT, MOTE_WG_INIT, MOTE_WG_INIT};
    CHECK_EQ(mote_wg_add(&c.both_locked, 2), 0);
    CHECK_EQ(mote_wg_add(&c.finished, 2), 0);
    CHECK_EQ(mote_go(cycle_a, &c), 0);
    CHECK_EQ(mote_go(cycle_b, &c), 0);
    mote_wg_wait(&c.finished);
}

static void dl_cond(void *arg)
{
    (void)arg;
    static mote_mutex m = MOTE_MUTEX_INIT;
    static mote_cond c = MOTE_COND_INIT;
    CHECK_EQ(mote_mutex_lock(&m), 0);
    mote_cond_wait(&c, &m);
}

/* Not recursive: the holder locking again waits forever (mote.h). */
static void dl_mutex_relock(void *arg)
{
    (void)arg;
    static mote_mutex m = MOTE_MUTEX_INIT;
    CHECK_EQ(mote_mutex_lock(&m), 0);
    mote_mutex_lock(&m);
}

static void dl_wg(void *arg)
{
    (void)arg;
    static mote_wg wg = MOTE_WG_INIT;
    CHECK_EQ(mote_wg_add(&wg, 1), 0);
    mote_wg_wait(&wg);
}

/* Controls: not deadlocks. */
static void ok_timer_pending(void *arg)
{
    (void)arg;
    mote_chan *c = mote_chan_make(0, 0);
    CHECK_EQ(mote_go(helper_recv, c), 0); /* blocked forever, but main sleeps */
    CHECK_EQ(mote_sleep(50 * MS), 0);
    mote_case cs[] = {{NULL, MOTE_RECV, NULL, 0}};
    CHECK_EQ(mote_select(cs, 1, 30 * MS), -ETIMEDOUT);
    CHECK_EQ(mote_select(NULL, 0, 10 * MS), -ETIMEDOUT);
    /* main returns with the helper still blocked: that is fine */
}

static void ok_cond_timed(void *arg)
{
    (void)arg;
    static mote_mutex m = MOTE_MUTEX_INIT;
    static mote_cond c = MOTE_COND_INIT;
    CHECK_EQ(mote_mutex_lock(&m), 0);
    CHECK_EQ(mote_cond_timedwait(&c, &m, 30 * MS), -ETIMEDOUT);
    CHECK_EQ(mote_mutex_unlock(&m), 0);
}

/* A new task whose stack cannot be mapped (the address space is full:
 * RLIMIT_AS) while main waits for it: the run ends with -ENOMEM after a
 * second, saying so once (it ran forever, saying so 1,000 times a second). */
static void no_stack_child(void *arg) { mote_chan_send(arg, &(int){1}); }

/* A task with an 8 KiB stack, half used, that yields while a new task
 * starves: the scheduler's tries for that task run on this stack, and must
 * stay shallow (a heap release there overflowed it, every run). */
static void no_stack_yielder(void *arg)
{
    volatile char use[4000];
    use[0] = use[sizeof use - 1] = 1;
    int64_t t0 = mote_now();           /* the tries come 1 ms apart */
    while (mote_now() - t0 < 300 * MS) /* releases come 100 ms apart */
        mote_yield();
    *(int *)arg = use[0];
}

static void space_limit(size_t room)
{
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    CHECK(f && fscanf(f, "%ld", &pages) == 1);
    fclose(f);
    struct rlimit r = {(rlim_t)pages * 4096 + room, RLIM_INFINITY};
    CHECK_EQ(setrlimit(RLIMIT_AS, &r), 0);
}

static void dl_no_stack(void *arg)
{
    (void)arg;
    mote_chan *c = mote_chan_make(sizeof(int), 0);
    static int yielded;
    mote_task_opts small = MOTE_TASK_OPTS_INIT;
    small.stack_size = 8u << 10;
    CHECK_EQ(mote_go_ex(no_stack_yielder, &yielded, &small), 0);
    mote_yield(); /* it has its stack */
    space_limit(64u << 20);
    mote_task_opts o = MOTE_TASK_OPTS_INIT;
    o.stack_size = 1u << 30; /* its chunk reserves 16 of them */
    CHECK_EQ(mote_go_ex(no_stack_child, c, &o), 0);
    int v;
    mote_chan_recv(c, &v);
}

/* The same task starts once the address space has room again, though it
 * waited more than the second after which a run would end: a new look
 * before the end (the run ended with -ENOMEM 17 times in 20). */
static void ok_stack_comes_back(void *arg)
{
    (void)arg;
    mote_chan *c = mote_chan_make(sizeof(int), 0);
    size_t room = 512u << 20, fill = room - (8u << 20);
    space_limit(room);
    void *filler =
        mmap(NULL, fill, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(filler != MAP_FAILED);
    mote_task_opts o = MOTE_TASK_OPTS_INIT;
    o.stack_size = 4u << 20;
    CHECK_EQ(mote_go_ex(no_stack_child, c, &o), 0);
    CHECK_EQ(mote_sleep(1500 * MS), 0); /* it tries, and starves */
    CHECK_EQ(munmap(filler, fill), 0);
    struct rlimit r = {RLIM_INFINITY, RLIM_INFINITY};
    CHECK_EQ(setrlimit(RLIMIT_AS, &r), 0);
    int v = 0;
    CHECK_EQ(mote_chan_recv(c, &v), 0);
    CHECK_EQ(v, 1);
    CHECK_EQ(mote_chan_free(c), 0);
}

/* ---- the harness ---- */

TEST_SETUP { setenv("MOTE_WORKERS", "2", 0); }

typedef struct scenario {
    mote_fn fn;
    int expect; /* mote_run's result */
} scenario;

static void child(void *arg)
{
    const scenario *s = arg;
    alarm(60); /* a hang is a failure, not a stuck test */
    int r = mote_run(s->fn, NULL);
    fprintf(stderr, "\nresult=%d\n", r);
    fflush(stderr);
    _exit(r == s->expect ? 0 : 1);
}

/* Runs fn in a child: mote_run must return expect and stderr contain every
 * string of must (NULL-ended); a control (expect 0) must report nothing. */
static void run_scenario(mote_fn fn, int expect, const char *const *must)
{
    static char err[1 << 16];
    scenario s = {fn, expect};
    int st = test_fork_capture(child, &s, err, sizeof err);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    for (int j = 0; ok && must[j]; j++)
        ok = strstr(err, must[j]) != NULL;
    if (expect == 0 && strstr(err, HEADER))
        ok = 0;
    if (!ok)
        printf("child status %#x, stderr:\n%s\n", st, err);
    CHECK(ok);
}

#define SCENARIO(fn, expect, ...) \
    run_scenario(fn, expect, (const char *const[]){__VA_ARGS__, NULL})

TEST(chan_receive_reported) { SCENARIO(dl_chan_recv, -EDEADLK, HEADER, "chan receive"); }

TEST(chan_send_and_receive_reported)
{
    SCENARIO(dl_chan_send, -EDEADLK, HEADER, "chan send", "chan receive");
}

TEST(select_on_null_channels_only_reported)
{
    SCENARIO(dl_select_null, -EDEADLK, HEADER, "select (no cases)");
}

TEST(select_with_no_cases_reported)
{
    SCENARIO(dl_select_empty, -EDEADLK, HEADER, "select (no cases)");
}

TEST(select_on_channels_reported)
{
    SCENARIO(dl_select_chans, -EDEADLK, HEADER, "[select");
}

TEST(mutex_cycle_reported)
{
    SCENARIO(dl_mutex_cycle, -EDEADLK, HEADER, "mutex lock", "wait group");
}

TEST(mutex_relocked_by_its_holder_reported)
{
    SCENARIO(dl_mutex_relock, -EDEADLK, HEADER, "mutex lock");
}

TEST(wait_group_reported) { SCENARIO(dl_wg, -EDEADLK, HEADER, "wait group"); }

TEST(cond_wait_reported) { SCENARIO(dl_cond, -EDEADLK, HEADER, "cond wait"); }

TEST(pending_timer_is_not_a_deadlock) { SCENARIO(ok_timer_pending, 0, "result=0"); }

TEST(cond_timedwait_is_not_a_deadlock) { SCENARIO(ok_cond_timed, 0, "result=0"); }

TEST(a_task_that_never_gets_a_stack_ends_the_run)
{
    if (TEST_SANITIZED) /* the shadow memory is address space too */
        TEST_SKIP("sanitizer build");
    static char err[1 << 16];
    scenario s = {dl_no_stack, -ENOMEM};
    setenv("MOTE_WORKERS", "1", 1); /* the tries run on the yielder's stack */
    int st = test_fork_capture(child, &s, err, sizeof err);
    setenv("MOTE_WORKERS", "2", 1);
    const char *said = "no memory for the stack of a new task", *p = strstr(err, said);
    bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && p && !strstr(p + 1, said) &&
              strstr(err, "1 new task cannot start") && strstr(err, "chan receive");
    if (!ok)
        printf("child status %#x, stderr:\n%s\n", st, err);
    CHECK(ok);
}

TEST(a_task_that_gets_its_stack_late_runs)
{
    if (TEST_SANITIZED)
        TEST_SKIP("sanitizer build");
    SCENARIO(ok_stack_comes_back, 0, "result=0");
}

TEST_MAIN()
