/* test_metrics.c - every metric can be read by name, from a task and from
 * a plain thread, before, during and after a run; the text and JSON dumps
 * list them all; the measured ones agree with the kernel. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mote.h"

typedef struct seen {
    int n;
    int bad;
} seen;

/* Each name is well formed and readable by name. */
static void each(const char *name, uint64_t value, void *ctx)
{
    seen *s = ctx;
    uint64_t again;
    s->n++;
    if (name[0] != '/' || !strchr(name, ':') || mote_metric(name, &again) != 0) {
        fprintf(stderr, "bad metric %s\n", name);
        s->bad++;
    }
    (void)value;
}

static int count_metrics(void)
{
    seen s = {0, 0};
    CHECK_EQ(mote_metric_each(each, &s), 0);
    CHECK_EQ(s.bad, 0);
    CHECK(s.n >= 30);
    return s.n;
}

static char *dump(int format)
{
    static char buf[1 << 16];
    FILE *f = tmpfile();
    CHECK(f != NULL);
    CHECK_EQ(mote_metrics_print(fileno(f), format), 0);
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* Both dumps hold exactly the expect metrics. */
static void check_dumps(int expect)
{
    char *text = dump(MOTE_METRICS_TEXT);
    int lines = 0;
    for (char *p = text; *p; p++)
        lines += *p == '\n';
    CHECK_EQ(lines, expect);
    CHECK(strstr(text, "/tasks/live:tasks ") != NULL);
    char *json = dump(MOTE_METRICS_JSON);
    CHECK(json[0] == '{' && strstr(json, "\n}\n") != NULL);
    CHECK(strstr(json, "\"/stacks/resident:bytes\": ") != NULL);
    int commas = 0;
    for (char *p = json; *p; p++)
        commas += *p == ',';
    CHECK_EQ(commas, expect - 1);
}

TEST(every_metric_is_readable_before_any_run)
{
    int n = count_metrics();
    check_dumps(n);
    CHECK_EQ(test_metric("/tasks/live:tasks"), 0);
}

TEST(bad_arguments_are_refused)
{
    uint64_t v = 5;
    CHECK_EQ(mote_metrics_print(1, 7), -EINVAL);
    CHECK_EQ(mote_metrics_print(-1, MOTE_METRICS_TEXT), -EBADF);
    CHECK_EQ(mote_metric_each(NULL, NULL), -EINVAL);
    CHECK_EQ(mote_metric("/stacks/highwater/le-3KiB:tasks", &v), -ENOENT);
    CHECK_EQ(mote_metric("/tasks/live:tasks", NULL), -EINVAL);
    CHECK_EQ(mote_metric(NULL, &v), -EINVAL);
    CHECK_EQ(v, 5);
}

/* A failed write says why, as write(2) would on the same descriptor (it
 * read -EIO or -ENOMEM for all of these), and a non-blocking pipe smaller
 * than the text gets all of it. */
static void *drain_pipe(void *arg)
{
    int fd = *(int *)arg;
    char buf[512];
    size_t total = 0;
    ssize_t k;
    while ((k = read(fd, buf, sizeof buf)) > 0 || (k < 0 && errno == EINTR))
        total += k > 0 ? (size_t)k : 0;
    return (void *)total;
}

TEST(a_failed_write_returns_the_error_of_writing)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK_EQ(close(p[0]), 0);
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    CHECK_EQ(sigaction(SIGPIPE, &ign, &old), 0);
    CHECK_EQ(mote_metrics_print(p[1], MOTE_METRICS_TEXT), -EPIPE);
    CHECK_EQ(sigaction(SIGPIPE, &old, NULL), 0);
    CHECK_EQ(close(p[1]), 0);

    int ro = open("/dev/null", O_RDONLY);
    CHECK(ro >= 0);
    CHECK_EQ(mote_metrics_print(ro, MOTE_METRICS_JSON), -EBADF);
    CHECK_EQ(close(ro), 0);

    int full = open("/dev/full", O_WRONLY);
    if (full >= 0) {
        CHECK_EQ(mote_metrics_print(full, MOTE_METRICS_TEXT), -ENOSPC);
        CHECK_EQ(close(full), 0);
    }

    size_t want = strlen(dump(MOTE_METRICS_TEXT));
    CHECK_EQ(pipe2(p, O_NONBLOCK), 0);
    size_t filled = 0; /* a full pipe: the first write finds no room */
    static const char junk[512];
    ssize_t k;
    while ((k = write(p[1], junk, sizeof junk)) > 0)
        filled += (size_t)k;
    CHECK_EQ(errno, EAGAIN);
    int rfd = p[0];
    CHECK_EQ(fcntl(rfd, F_SETFL, 0), 0); /* the reader blocks; the writer does not */
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, drain_pipe, &rfd), 0);
    CHECK_EQ(mote_metrics_print(p[1], MOTE_METRICS_TEXT), 0);
    CHECK_EQ(close(p[1]), 0);
    void *total;
    CHECK_EQ(pthread_join(t, &total), 0);
    CHECK_EQ(close(rfd), 0);
    size_t got = (size_t)total - filled;
    /* the same metrics, each line of about the same length */
    CHECK(got > want - want / 8 && got < want + want / 8);
}

static mote_wg sleeping = MOTE_WG_INIT;
static void sleeper(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_wg_done(&sleeping), 0);
    mote_sleep(3600LL * 1000000000); /* discarded when main returns */
}

static void *plain_reader(void *arg)
{
    int *n = arg;
    *n = count_metrics();
    CHECK_EQ(test_metric("/tasks/live:tasks"), 101);
    return NULL;
}

static int in_run_count;
static void main_task(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_wg_add(&sleeping, 100), 0);
    for (int i = 0; i < 100; i++)
        CHECK_EQ(mote_go(sleeper, NULL), 0);
    CHECK_EQ(mote_wg_wait(&sleeping), 0);
    WAIT_UNTIL(test_metric("/tasks/blocked:tasks") == 100, 60);
    in_run_count = count_metrics();
    check_dumps(in_run_count);
    uint64_t live, workers, rss, pte, hw = 0;
    CHECK_EQ(mote_metric("/tasks/live:tasks", &live), 0);
    CHECK_EQ(live, 101);
    CHECK_EQ(mote_metric("/sched/workers:threads", &workers), 0);
    CHECK(workers >= 1);
    CHECK_EQ(mote_metric("/process/rss:bytes", &rss), 0);
    CHECK_EQ(mote_metric("/process/pagetables:bytes", &pte), 0);
    CHECK(rss > 1000000 && pte > 0);
    /* 100 parked stacks: resident, or frozen (its pages given back) */
    CHECK(test_metric("/stacks/resident:bytes") +
              test_metric("/stacks/frozen:tasks") * 4096 >=
          100 * 4096);
    CHECK(test_metric("/stacks/reserved:bytes") >= test_metric("/stacks/resident:bytes"));
    CHECK_EQ(mote_metric("/stacks/highwater/le-4KiB:tasks", &hw), 0);
    CHECK_EQ(mote_metric("/stacks/highwater/le-1GiB:tasks", &hw), 0);
    CHECK_EQ(mote_metric("/stacks/highwater/le-3KiB:tasks", &hw), -ENOENT);
    /* a plain thread reads the same names, while the run goes on */
    int plain_n = 0;
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, plain_reader, &plain_n), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(plain_n, in_run_count);
}

TEST(every_metric_is_readable_during_a_run_from_tasks_and_threads)
{
    CHECK_EQ(mote_run(main_task, NULL), 0);
}

TEST(after_a_run_the_same_metrics_are_listed)
{
    int before = count_metrics();
    CHECK_EQ(mote_run(main_task, NULL), 0);
    CHECK_EQ(in_run_count, before);
    int after = count_metrics();
    CHECK_EQ(after, before);
    check_dumps(after);
    CHECK_EQ(test_metric("/tasks/live:tasks"), 0);
    CHECK(test_metric("/tasks/spawned:tasks") >= 101); /* counted across runs */
}

TEST_MAIN()
