/* test_metrics.c - every metric can be read by name, from a task and from
 * a plain thread, during and after a run; the text and JSON dumps list
 * them all; the measured ones agree with the kernel. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mote.h"

typedef struct seen {
    int n;
    int bad;
} seen;

static void each(const char *name, uint64_t value, void *ctx)
{
    seen *s = ctx;
    uint64_t again;
    s->n++;
    if (name[0] != '/' || !strchr(name, ':') || mote_metric(name, &again) != 0)
        s->bad++;
    (void)value;
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
    int colons = 0;
    for (char *p = json; *p; p++)
        colons += *p == ',';
    CHECK_EQ(colons, expect - 1);
    CHECK_EQ(mote_metrics_print(1, 7), -EINVAL);
}

static void sleeper(void *arg) { (void)arg; mote_sleep(10LL * 1000000000); }

static void main_task(void *arg)
{
    int *count = arg;
    for (int i = 0; i < 100; i++)
        CHECK_EQ(mote_go(sleeper, NULL), 0);
    mote_sleep(10 * 1000000);
    seen s = {0, 0};
    mote_metric_each(each, &s);
    CHECK_EQ(s.bad, 0);
    CHECK(s.n >= 30);
    *count = s.n;
    check_dumps(s.n);
    uint64_t live, workers, rss, pte, hw = 0;
    CHECK_EQ(mote_metric("/tasks/live:tasks", &live), 0);
    CHECK_EQ(live, 101);
    CHECK_EQ(mote_metric("/sched/workers:threads", &workers), 0);
    CHECK(workers >= 1);
    CHECK_EQ(mote_metric("/process/rss:bytes", &rss), 0);
    CHECK_EQ(mote_metric("/process/pagetables:bytes", &pte), 0);
    CHECK(rss > 1000000 && pte > 0);
    CHECK_EQ(mote_metric("/stacks/highwater/le-4KiB:tasks", &hw), 0);
    CHECK_EQ(mote_metric("/stacks/highwater/le-1GiB:tasks", &hw), 0);
    CHECK_EQ(mote_metric("/stacks/highwater/le-3KiB:tasks", &hw), -ENOENT);
}

int main(void)
{
    int n = 0;
    seen s = {0, 0};
    mote_metric_each(each, &s); /* before any run */
    CHECK_EQ(s.bad, 0);
    CHECK_EQ(mote_run(main_task, &n), 0);
    check_dumps(n); /* after it: same names */
    uint64_t live = 1;
    CHECK_EQ(mote_metric("/tasks/live:tasks", &live), 0);
    CHECK_EQ(live, 0);
    TEST_PASS("test_metrics");
    return 0;
}
