/*
 * seed.c - the seed experiment (seeds 000/002) on mote, beside seed.go.
 *
 * Spawns N tasks; each optionally calls a function with an 8 KiB or 64 KiB
 * local once (every byte written, as Go zeroes its locals), then parks.
 * Reports spawn time (until every task has parked), live tasks, resident
 * stack bytes (/stacks/resident:bytes, measured by the runtime from the
 * kernel), VmRSS/VmHWM/VmPTE; then samples every 100 ms for settle_ms with
 * no action by the program (mote trims parked stacks by itself, issue 6);
 * then releases every task and reports again.  Output: key=value lines read
 * by bench/report/report.py.
 *
 * Tasks park on a closed-on-release channel when channels are built
 * (MOTE_BENCH_HAVE_CHAN), else in a long mote_sleep, and are then released
 * by main returning (mote_run discards them).
 *
 * usage: seed N idle|8k|64k [settle_ms]
 * env:   BENCH_MEM_GUARD  stop spawning when VmRSS exceeds this many bytes
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "mote.h"

enum { MODE_IDLE, MODE_8K, MODE_64K };

static long n_target;
static int mode;
static int settle_ms = 1500;
static const char *mode_name;
static _Atomic long parked;
static _Atomic long alive;
static int64_t main_returned_ns;
static char tag[160];
#ifdef MOTE_BENCH_HAVE_CHAN
static mote_chan *block;
#endif

/* The locals must exist and be written; the empty asm makes the compiler
 * believe the array is read, so it can neither drop nor shrink it. */
__attribute__((noinline)) static void touch8(void)
{
    unsigned char buf[8 << 10];
    memset(buf, 1, sizeof buf);
    __asm__ volatile("" : : "r"(buf) : "memory");
}

__attribute__((noinline)) static void touch64(void)
{
    unsigned char buf[64 << 10];
    memset(buf, 1, sizeof buf);
    __asm__ volatile("" : : "r"(buf) : "memory");
}

static void task(void *arg)
{
    (void)arg;
    if (mode == MODE_8K)
        touch8();
    else if (mode == MODE_64K)
        touch64();
    atomic_fetch_add(&alive, 1);
    atomic_fetch_add(&parked, 1);
#ifdef MOTE_BENCH_HAVE_CHAN
    mote_chan_recv(block, NULL);
#else
    mote_sleep((int64_t)3600 * 1000000000);
#endif
    atomic_fetch_sub(&alive, 1);
}

/* One sample line; the resident-stack metric is skipped once it proves
 * slow (it may scan the whole reservation), except when forced. */
static int resident_slow;
static void sample(const char *event, int64_t t_ms, int force_resident)
{
    bench_status s = bench_read_status();
    int64_t res = -1, rd_us = 0;
    if (!resident_slow || force_resident) {
        int64_t t0 = bench_clock_ns();
        res = bench_metric("/stacks/resident:bytes");
        rd_us = (bench_clock_ns() - t0) / 1000;
        if (rd_us > 20000)
            resident_slow = 1;
    }
    printf("kind=seedt %s event=%s t_ms=%lld rss=%lld pte=%lld", tag, event,
           (long long)t_ms, (long long)s.rss, (long long)s.pte);
    if (res >= 0)
        printf(" stack=%lld metric_us=%lld", (long long)res, (long long)rd_us);
    int64_t trimmed = bench_metric("/stacks/trimmed:bytes");
    if (trimmed >= 0)
        printf(" trimmed=%lld", (long long)trimmed);
    printf("\n");
    fflush(stdout);
}

static void main_task(void *arg)
{
    (void)arg;
    snprintf(tag, sizeof tag, "impl=mote n=%ld mode=%s workers=%lld", n_target, mode_name,
             (long long)bench_metric("/sched/workers:threads"));
#ifdef MOTE_BENCH_HAVE_CHAN
    block = mote_chan_make(0, 0);
    if (!block) {
        perror("seed: mote_chan_make");
        exit(1);
    }
#endif
    int64_t guard = bench_mem_guard();
    int guard_hit = 0;
    long spawned = 0;
    int64_t flt0 = bench_minflt();
    int64_t start = mote_now();
    for (long i = 0; i < n_target; i++) {
        if ((i & 4095) == 4095 && bench_read_status().rss > guard) {
            guard_hit = 1;
            break;
        }
        int err = mote_go(task, NULL);
        if (err != 0) {
            fprintf(stderr, "seed: mote_go: %s after %ld tasks\n", mote_strerror(err), i);
            break;
        }
        spawned++;
    }
    while (atomic_load(&parked) < spawned)
        mote_sleep(1000000);
    /* Every task has passed its counter; wait until the runtime sees them
     * all blocked, when it can tell. */
    for (int i = 0; i < 5000; i++) {
        int64_t b = bench_metric("/tasks/blocked:tasks");
        if (b < 0 || b >= spawned)
            break;
        mote_sleep(1000000);
    }
    int64_t spawn_ns = mote_now() - start;
    int64_t flt = bench_minflt() - flt0;
    int64_t t0 = mote_now();
    bench_status s = bench_read_status();
    int64_t m0 = bench_clock_ns();
    int64_t res = bench_metric("/stacks/resident:bytes");
    int64_t rd_us = (bench_clock_ns() - m0) / 1000;
    if (rd_us > 20000)
        resident_slow = 1;
    printf(
        "kind=seed %s phase=parked spawned=%ld spawn_ms=%.1f tasks=%lld stack_inuse=%lld "
        "rss=%lld hwm=%lld pte=%lld minflt=%lld metric_us=%lld reserved=%lld%s\n",
        tag, spawned, spawn_ns / 1e6, (long long)bench_metric("/tasks/live:tasks"),
        (long long)res, (long long)s.rss, (long long)s.hwm, (long long)s.pte,
        (long long)flt, (long long)rd_us,
        (long long)bench_metric("/stacks/reserved:bytes"), guard_hit ? " guard=hit" : "");
    fflush(stdout);
    for (int t = 100; t <= settle_ms; t += 100) {
        int64_t wake = t0 + (int64_t)t * 1000000 - mote_now();
        if (wake > 0)
            mote_sleep(wake);
        sample("sample", (mote_now() - t0) / 1000000, t == settle_ms);
    }
    s = bench_read_status();
    printf("kind=seed %s phase=settled rss=%lld pte=%lld stack_inuse=%lld\n", tag,
           (long long)s.rss, (long long)s.pte,
           (long long)bench_metric("/stacks/resident:bytes"));
    fflush(stdout);
#ifdef MOTE_BENCH_HAVE_CHAN
    int64_t r0 = mote_now();
    mote_chan_close(block);
    while (atomic_load(&alive) > 0)
        mote_sleep(1000000);
    int64_t rel_ns = mote_now() - r0;
    s = bench_read_status();
    printf("kind=seed %s phase=released release_ms=%.1f rss=%lld pte=%lld\n", tag,
           rel_ns / 1e6, (long long)s.rss, (long long)s.pte);
    fflush(stdout);
#endif
    main_returned_ns = mote_now();
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: seed N idle|8k|64k [settle_ms]\n");
        return 2;
    }
    n_target = strtol(argv[1], NULL, 10);
    mode_name = argv[2];
    if (strcmp(mode_name, "8k") == 0)
        mode = MODE_8K;
    else if (strcmp(mode_name, "64k") == 0)
        mode = MODE_64K;
    else if (strcmp(mode_name, "idle") == 0)
        mode = MODE_IDLE;
    else {
        fprintf(stderr, "seed: mode must be idle, 8k or 64k\n");
        return 2;
    }
    if (argc > 3)
        settle_ms = atoi(argv[3]);
    int err = mote_run(main_task, NULL);
    int64_t end = mote_now();
    if (err != 0) {
        fprintf(stderr, "seed: mote_run: %s\n", mote_strerror(err));
        return 1;
    }
    bench_status s = bench_read_status();
    printf("kind=seed %s phase=exited exit_ms=%.1f rss=%lld pte=%lld maxrss=%lld\n", tag,
           (end - main_returned_ns) / 1e6, (long long)s.rss, (long long)s.pte,
           (long long)bench_maxrss());
#ifdef MOTE_BENCH_HAVE_CHAN
    mote_chan_free(block);
#endif
    return 0;
}
