/*
 * test_stackprof.c - the runtime's measured stack depth per entry function
 * (mote_stack_report): exact to the bytes a task's frames took, for tasks
 * that exit and tasks that stay parked, never counting what the scheduler
 * runs on a stack after its task returned.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mote.h"

#define MS 1000000LL

static __attribute__((noinline)) void frame_of(size_t n)
{
    char buf[n]; /* a VLA: exactly n bytes below the caller */
    memset(buf, 0x5a, n);
    __asm__ volatile("" : : "r"(buf) : "memory");
}

static void shallow(void *arg) { (void)arg; }
static void deep12k(void *arg)
{
    (void)arg;
    frame_of(12000);
}
static void deep12k_outlived(void *arg)
{
    (void)arg;
    frame_of(12000);
}
/* Its deepest pages hold only zeros (a zeroed buffer): a depth all the
 * same, not none (it was dropped, and mote-stack then took the entry for
 * a shallow one). */
static __attribute__((noinline)) void zeroed_frame_of(size_t n)
{
    char buf[n];
    for (size_t i = 0; i < n; i += 64) /* no call: nothing non-zero below */
        ((volatile char *)buf)[i] = 0;
    __asm__ volatile("" : : "r"(buf) : "memory");
}
static void zeros40k(void *arg)
{
    (void)arg;
    zeroed_frame_of(40000);
}
static mote_chan *gate;
static void parks_after_6k(void *arg)
{
    (void)arg;
    frame_of(6000);
    mote_chan_recv(gate, NULL);
}

static char report[1 << 16];

static void report_to(void)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK_EQ(mote_stack_report(p[1]), 0);
    close(p[1]);
    ssize_t n = read(p[0], report, sizeof report - 1);
    CHECK(n > 0);
    report[n] = 0;
    close(p[0]);
}

/* The report's figures for one entry function. */
static void entry(const char *name, long *tasks, long *depth)
{
    char key[128];
    snprintf(key, sizeof key, "{\"name\":\"%s\"", name);
    char *e = strstr(report, key);
    CHECK(e != NULL);
    char *t = strstr(e, "\"tasks\":"), *d = strstr(e, "\"max_depth\":");
    CHECK(t && d);
    *tasks = strtol(t + 8, NULL, 10);
    *depth = strtol(d + 12, NULL, 10);
}

TEST_TASK(depths_are_measured_per_entry_function)
{
    gate = mote_chan_make(0, 0);
    for (int i = 0; i < 300; i++) {
        CHECK_EQ(mote_go(shallow, NULL), 0);
        CHECK_EQ(mote_go(deep12k, NULL), 0);
        CHECK_EQ(mote_go(zeros40k, NULL), 0);
    }
    CHECK_EQ(mote_go(parks_after_6k, NULL), 0);
    /* let everything run (main and the parked one stay), and the parked
     * task be trimmed, which measures it */
    uint64_t live = 0;
    do {
        mote_sleep(10 * MS);
        CHECK_EQ(mote_metric("/tasks/live:tasks", &live), 0);
    } while (live > 2);
    mote_sleep(50 * MS);
    mote_mem_release();
    mote_sleep(20 * MS);
    report_to();
    CHECK(strstr(report, "{\"mote_stack_report\":1,\"exe\":\""));
    long tasks, depth;
    entry("deep12k", &tasks, &depth);
    CHECK_EQ(tasks, 300);
    /* + frame_of's own frame (sanitizers add redzones and fake frames) */
    fprintf(stderr, "deep12k measured %ld bytes\n", depth);
    CHECK(depth >= 12000 && depth <= 12000 + (TEST_SANITIZED ? 16384 : 1024));
    entry("zeros40k", &tasks, &depth);
    CHECK_EQ(tasks, 300);
    fprintf(stderr, "zeros40k measured %ld bytes\n", depth);
    /* the zeroed page counts whole: up to a page more */
    CHECK(depth >= 40000 && depth <= 40000 + 4096 + (TEST_SANITIZED ? 16384 : 1024));
    entry("shallow", &tasks, &depth);
    CHECK_EQ(tasks, 300);
    CHECK(depth > 0 && depth < (TEST_SANITIZED ? 8192 : 1024)); /* not the scheduler's */
    entry("parks_after_6k", &tasks, &depth);
    CHECK_EQ(tasks, 1);
    CHECK(depth >= 6000);
    mote_chan_close(gate);
}

/* A frame probed page by page from the top down, as stack-clash
 * protection does: with its stack registered for freezing, each fault
 * continues a run, and the handler maps more pages below than the task
 * reached.  Those are not its depth (they were: 24 KB read as 86 KB). */
#define PROBED 24000
static void probes24k(void *arg)
{
    (void)arg;
    char buf[PROBED];
    for (long i = PROBED - 1; i >= 0; i -= 4096)
        ((volatile char *)buf)[i] = 1;
    ((volatile char *)buf)[0] = 1;
    __asm__ volatile("" : : "r"(buf) : "memory");
}

/* Sets *arg to why stacks are not frozen here, and then runs nothing. */
static void probed_main(void *arg)
{
    static char why[96];
    uint64_t mode = test_metric("/stacks/freeze/mode:enum");
    if (mode != 1) {
        snprintf(why, sizeof why,
                 "stacks are not frozen here (freeze mode %llu, off-reason %llu)",
                 (unsigned long long)mode,
                 (unsigned long long)test_metric("/stacks/freeze/off-reason:enum"));
        *(const char **)arg = why;
        return;
    }
    /* one frozen task registers its chunk, where the probers' stacks are */
    gate = mote_chan_make(0, 0);
    CHECK_EQ(mote_go(parks_after_6k, NULL), 0);
    WAIT_UNTIL(test_metric("/stacks/frozen:tasks") >= 1, 30);
    uint64_t stray0 = test_metric("/stacks/freeze/stray-faults:events");
    for (int i = 0; i < 64; i++)
        CHECK_EQ(mote_go(probes24k, NULL), 0);
    WAIT_UNTIL(test_metric("/tasks/live:tasks") <= 2, 60);
    printf(
        "probers: %llu stray faults\n",
        (unsigned long long)(test_metric("/stacks/freeze/stray-faults:events") - stray0));
    mote_chan_close(gate);
}

TEST(pages_mapped_ahead_of_a_growing_stack_are_not_its_depth)
{
    const char *why = NULL;
    CHECK_EQ(test_run_env("MOTE_STACK_FREEZE", "1ms", probed_main, &why), 0);
    if (why)
        TEST_SKIP(why);
    report_to();
    long tasks, depth;
    entry("probes24k", &tasks, &depth);
    CHECK_EQ(tasks, 64);
    fprintf(stderr, "probes24k measured %ld bytes\n", depth);
    CHECK(depth >= PROBED && depth <= PROBED + 4096 + (TEST_SANITIZED ? 16384 : 1024));
}

static void outlived_main(void *arg)
{
    (void)arg;
    for (int i = 0; i < 10; i++)
        CHECK_EQ(mote_go(deep12k_outlived, NULL), 0);
    /* exited, not discarded with the run: measured */
    WAIT_UNTIL(test_metric("/tasks/live:tasks") <= 1, 60);
}

TEST(report_outlives_the_run_and_checks_its_fd)
{
    /* its own run: ctest runs each case in a fresh process */
    CHECK_EQ(mote_run(outlived_main, NULL), 0);
    CHECK_EQ(mote_stack_report(-1), -EBADF);
    int ro = open("/dev/null", O_RDONLY);
    CHECK(ro >= 0);
    CHECK_EQ(mote_stack_report(ro), -EBADF); /* not open for writing */
    close(ro);
    report_to();
    CHECK(strstr(report, "\"entries\":["));
    long tasks, depth;
    entry("deep12k_outlived", &tasks, &depth);
    CHECK_EQ(tasks, 10);
    CHECK(depth >= 12000 && depth <= 12000 + (TEST_SANITIZED ? 16384 : 1024));
}

TEST_MAIN()
