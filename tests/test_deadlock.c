/*
 * test_deadlock.c - deadlock detection for tasks blocked on channels,
 * select, mutexes, conditions and wait groups.  Each scenario runs in a
 * forked child (forked before any runtime starts in this process) with its
 * stderr captured: mote_run must return -EDEADLK and the report must name
 * what the tasks wait on.  Controls check that a pending timer or a main
 * that returns is not reported.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "mote.h"

#define MS (1000 * 1000LL)
#define HEADER "mote: all tasks are asleep - deadlock!"

/* ---- scenarios: each is a mote_run main ---- */

static void dl_chan_recv(void *arg)
{
    (void)arg;
    mote_chan *c = mote_chan_make(sizeof(int), 0);
    int v;
    mote_chan_recv(c, &v);
}

static void helper_recv(void *arg)
{
    mote_chan_recv(arg, NULL);
}

static void dl_chan_send(void *arg)
{
    (void)arg;
    mote_chan *a = mote_chan_make(sizeof(int), 1);
    mote_chan *b = mote_chan_make(sizeof(int), 0);
    mote_go(helper_recv, b);           /* waits on b, nobody sends */
    mote_chan_send(a, &(int){1});       /* fills the buffer */
    mote_chan_send(a, &(int){2});       /* blocks forever */
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
    mote_mutex_lock(&c->m1);
    mote_wg_done(&c->both_locked);
    mote_wg_wait(&c->both_locked);
    mote_mutex_lock(&c->m2);
    mote_wg_done(&c->finished);
}

static void cycle_b(void *arg)
{
    cycle *c = arg;
    mote_mutex_lock(&c->m2);
    mote_wg_done(&c->both_locked);
    mote_wg_wait(&c->both_locked);
    mote_mutex_lock(&c->m1);
    mote_wg_done(&c->finished);
}

static void dl_mutex_cycle(void *arg)
{
    (void)arg;
    static cycle c = {MOTE_MUTEX_INIT, MOTE_MUTEX_INIT, MOTE_WG_INIT,
                      MOTE_WG_INIT};
    mote_wg_add(&c.both_locked, 2);
    mote_wg_add(&c.finished, 2);
    mote_go(cycle_a, &c);
    mote_go(cycle_b, &c);
    mote_wg_wait(&c.finished);
}

static void dl_cond(void *arg)
{
    (void)arg;
    static mote_mutex m = MOTE_MUTEX_INIT;
    static mote_cond c = MOTE_COND_INIT;
    mote_mutex_lock(&m);
    mote_cond_wait(&c, &m);
}

/* Controls: not deadlocks. */
static void ok_timer_pending(void *arg)
{
    (void)arg;
    mote_chan *c = mote_chan_make(0, 0);
    mote_go(helper_recv, c); /* blocked forever, but main still sleeps */
    mote_sleep(50 * MS);
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
    mote_mutex_lock(&m);
    CHECK_EQ(mote_cond_timedwait(&c, &m, 30 * MS), -ETIMEDOUT);
    mote_mutex_unlock(&m);
}

/* ---- the harness ---- */

typedef struct scenario {
    const char *name;
    mote_fn fn;
    int expect;             /* mote_run's result */
    const char *must[3];    /* substrings the child's stderr must contain */
} scenario;

static const scenario scenarios[] = {
    {"chan receive", dl_chan_recv, -EDEADLK, {HEADER, "chan receive"}},
    {"chan send", dl_chan_send, -EDEADLK, {HEADER, "chan send", "chan receive"}},
    {"select, NULL channels only", dl_select_null, -EDEADLK,
     {HEADER, "select (no cases)"}},
    {"select, no cases", dl_select_empty, -EDEADLK, {HEADER, "select (no cases)"}},
    {"select on channels", dl_select_chans, -EDEADLK, {HEADER, "[select"}},
    {"mutex cycle", dl_mutex_cycle, -EDEADLK, {HEADER, "mutex lock", "wait group"}},
    {"cond wait", dl_cond, -EDEADLK, {HEADER, "cond wait"}},
    {"timer pending (control)", ok_timer_pending, 0, {NULL}},
    {"cond timedwait (control)", ok_cond_timed, 0, {NULL}},
};

static int run_child(const scenario *s, char *err, size_t errcap)
{
    int fds[2];
    CHECK_EQ(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        alarm(30); /* a hang is a failure, not a stuck test */
        int r = mote_run(s->fn, NULL);
        fprintf(stderr, "\nresult=%d\n", r);
        fflush(stderr);
        _exit(r == s->expect ? 0 : 1);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t k;
    while ((k = read(fds[0], err + n, errcap - 1 - n)) > 0 && n < errcap - 1)
        n += (size_t)k;
    err[n] = 0;
    close(fds[0]);
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(void)
{
    setenv("MOTE_WORKERS", "2", 0);
    static char err[1 << 16];
    int failed = 0;
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
        const scenario *s = &scenarios[i];
        int st = run_child(s, err, sizeof err);
        int ok = st == 0;
        for (int j = 0; ok && j < 3 && s->must[j]; j++)
            ok = strstr(err, s->must[j]) != NULL;
        if (s->expect == 0 && strstr(err, HEADER))
            ok = 0;
        printf("%-28s %s\n", s->name, ok ? "ok" : "FAILED");
        if (!ok) {
            printf("  child status %d, stderr:\n%s\n", st, err);
            failed++;
        }
    }
    CHECK_EQ(failed, 0);
    TEST_PASS("test_deadlock");
    return 0;
}
