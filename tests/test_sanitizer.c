/* test_sanitizer.c - users can debug their own code inside tasks: under
 * AddressSanitizer a stack buffer overflow in a task is caught and
 * reported with the task's frames (mote tells ASan about every stack
 * switch); under ThreadSanitizer a real data race between tasks on two
 * workers is reported.  Each case is skipped (77) in a build without its
 * sanitizer. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "check.h"
#include "mote.h"

#if defined(__SANITIZE_ADDRESS__)
#define SAN_ASAN 1
#elif defined(__SANITIZE_THREAD__)
#define SAN_TSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SAN_ASAN 1
#elif __has_feature(thread_sanitizer)
#define SAN_TSAN 1
#endif
#endif

static volatile int index_past_end = 16;

/* Out of line, so UBSan's bounds and object-size checks cannot see the
 * array's size and stop first: catching this is ASan's job. */
static __attribute__((noinline)) void poke(volatile char *p, int i) { p[i] = 1; }

void buggy_task(void *arg); /* exported: its name shows in the report */
void buggy_task(void *arg)
{
    (void)arg;
    volatile char local[16];
    memset((char *)local, 0, sizeof local);
    poke(local, index_past_end); /* one past the end: a real bug */
}

static void main_asan(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_go(buggy_task, NULL), 0);
    mote_sleep(60LL * 1000000000); /* ASan's report ends the process first */
}

static int shared_counter; /* deliberately unsynchronised */
static pthread_t first_thread;
static atomic_int first_ready, stop_racing, found_other, other_done;

/* The first racer keeps writing, in bursts, until told to stop. */
static void racer_a(void *arg)
{
    (void)arg;
    first_thread = pthread_self();
    atomic_store(&first_ready, 1);
    while (!atomic_load(&stop_racing)) {
        for (int i = 0; i < 1000; i++)
            shared_counter++;
        mote_sleep(100000);
    }
}

/* Later racers write only when they run on the other worker: tasks on one
 * worker take turns, which TSan rightly sees as ordered. */
static void racer_b(void *arg)
{
    (void)arg;
    if (pthread_equal(first_thread, pthread_self()))
        return;
    atomic_store(&found_other, 1);
    /* 200 rounds, the first racer writing all along: each sleep and wake
     * goes through the scheduler's shared counters, which TSan rightly
     * takes as ordering the bursts on either side, so only bursts that
     * overlap show the race (with 20 rounds, gcc's TSan missed it 1 run
     * in 10) */
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 1000; i++)
            shared_counter++;
        mote_sleep(100000);
    }
    atomic_store(&other_done, 1);
}

static void main_tsan(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_go(racer_a, NULL), 0);
    while (!atomic_load(&first_ready))
        mote_sleep(100000);
    for (int i = 0; i < 1000 && !atomic_load(&found_other); i++) {
        CHECK_EQ(mote_go(racer_b, NULL), 0);
        mote_sleep(1000000);
    }
    for (int i = 0; i < 10000 && atomic_load(&found_other) && !atomic_load(&other_done);
         i++)
        mote_sleep(1000000);
    atomic_store(&stop_racing, 1);
    /* (shown when the test fails) */
    fprintf(stderr, "racers on two workers: %s\n",
            atomic_load(&found_other) ? "yes" : "no");
}

static void child(void *fn)
{
    setenv("MOTE_WORKERS", "2", 1);
    mote_run((mote_fn)fn, NULL);
}

TEST(asan_reports_stack_buffer_overflow_in_a_task)
{
#if defined(SAN_ASAN)
    char buf[16384];
    int st = test_fork_capture(child, (void *)main_asan, buf, sizeof buf);
    if (!strstr(buf, "AddressSanitizer: stack-buffer-overflow"))
        fprintf(stderr, "child said:\n%s\n", buf);
    CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0));
    CHECK(strstr(buf, "AddressSanitizer: stack-buffer-overflow") != NULL);
    CHECK(strstr(buf, "buggy_task") != NULL);
#else
    (void)main_asan;
    (void)child;
    TEST_SKIP("not an AddressSanitizer build");
#endif
}

TEST(tsan_reports_data_race_between_tasks)
{
#if defined(SAN_TSAN)
    /* Up to three runs: the scheduler's own synchronisation between the
     * workers orders some bursts, and hid the race from gcc's TSan in
     * about 1 run in 10 even with the racers on two workers. */
    char buf[16384];
    for (int run = 0; run < 3; run++) {
        int st = test_fork_capture(child, (void *)main_tsan, buf, sizeof buf);
        if (strstr(buf, "ThreadSanitizer: data race"))
            break;
        fprintf(stderr, "run %d: child status %#x, said:\n%s\n", run + 1, st, buf);
    }
    CHECK(strstr(buf, "ThreadSanitizer: data race") != NULL);
    CHECK(strstr(buf, "racer") != NULL);
#else
    (void)main_tsan;
    (void)child;
    TEST_SKIP("not a ThreadSanitizer build");
#endif
}

TEST_MAIN()
