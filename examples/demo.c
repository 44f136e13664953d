/*
 * demo.c - the seed experiment in C: a million tasks that each call a
 * function with an 8 KiB local once, then park.  In Go (seed 000) that
 * leaves every goroutine on a 16 KiB stack: 1M of them hold 13+ GB until
 * several GCs pass.  Here stacks never move; pages come back when parked.
 *
 *   mote_demo [tasks] [local-bytes]      defaults: 1000000 8192
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mote.h"

static mote_chan *release;
static mote_wg parked = MOTE_WG_INIT;
static size_t local_bytes = 8192;

static __attribute__((noinline)) void use_stack(size_t n)
{
    char buf[n]; /* a real frame of n bytes, every byte written */
    memset(buf, 1, n);
    __asm__ volatile("" : : "r"(buf) : "memory"); /* keep the writes */
}

static void task_fn(void *arg)
{
    (void)arg;
    if (local_bytes)
        use_stack(local_bytes);
    mote_wg_done(&parked);
    mote_chan_recv(release, NULL); /* park until the channel closes */
}

static uint64_t metric(const char *name)
{
    uint64_t v = 0;
    mote_metric(name, &v);
    return v;
}

static void report(const char *when, uint64_t n)
{
    uint64_t live = metric("/tasks/live:tasks");
    uint64_t res = metric("/stacks/resident:bytes");
    uint64_t rss = metric("/process/rss:bytes");
    uint64_t pte = metric("/process/pagetables:bytes");
    printf("%-22s live %8llu  stacks %7.1f MiB (%5.0f B/task)  RSS %7.1f MiB"
           "  page tables %6.1f MiB  RSS+PT %5.2f GiB\n",
           when, (unsigned long long)live, res / 1048576.0,
           n ? (double)res / (double)n : 0.0, rss / 1048576.0, pte / 1048576.0,
           (rss + pte) / 1073741824.0);
    fflush(stdout);
}

static void demo_main(void *arg)
{
    uint64_t n = *(uint64_t *)arg;
    release = mote_chan_make(0, 0);
    if (!release) {
        perror("mote_chan_make");
        return;
    }
    int64_t t0 = mote_now();
    mote_wg_add(&parked, (int64_t)n);
    for (uint64_t i = 0; i < n; i++) {
        int r = mote_go(task_fn, NULL);
        if (r) {
            fprintf(stderr, "mote_go: %s after %llu tasks\n", mote_strerror(r),
                    (unsigned long long)i);
            mote_wg_add(&parked, -(int64_t)(n - i));
            break;
        }
    }
    mote_wg_wait(&parked);
    double spawn = (double)(mote_now() - t0) / 1e9;
    printf("spawned %llu tasks, each called a %zu-byte frame once and parked: "
           "%.2f s (%.0f ns/task)\n",
           (unsigned long long)n, local_bytes, spawn, spawn * 1e9 / (double)n);
    report("parked:", n);
    for (int i = 1; i <= 5; i++) {
        mote_sleep(200 * 1000000);
        char when[32];
        snprintf(when, sizeof when, "parked +%d ms:", i * 200);
        report(when, n);
    }
    t0 = mote_now();
    mote_chan_close(release);
    while (metric("/tasks/live:tasks") > 1)
        mote_sleep(10 * 1000000);
    printf("released all tasks in %.2f s\n", (double)(mote_now() - t0) / 1e9);
    report("released:", 0);
    mote_mem_release();
    for (int i = 1; i <= 3; i++) { /* pooled stacks decay after ~1 s idle */
        mote_sleep(750 * 1000000);
        char when[32];
        snprintf(when, sizeof when, "released +%d ms:", i * 750);
        report(when, 0);
    }
    mote_chan_free(release);
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    if (argc > 2)
        local_bytes = strtoull(argv[2], NULL, 10);
    if (n == 0 || local_bytes > 128 * 1024) {
        fprintf(stderr, "usage: %s [tasks >= 1] [local-bytes <= 131072]\n", argv[0]);
        return 2;
    }
    int r = mote_run(demo_main, &n);
    if (r) {
        fprintf(stderr, "mote_run: %s\n", mote_strerror(r));
        return 1;
    }
    report("after mote_run:", 0);
    return 0;
}
