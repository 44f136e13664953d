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
 * Frozen stacks (MOTE_STACK_FREEZE): every line's tag says the threshold
 * (freeze=<env value> or default), samples carry /stacks/frozen:tasks, and
 * with frozen_wait_ms > 0 and freezing on, after the settle samples the
 * program keeps sampling every 50 ms until the frozen count is stable (every
 * parked task frozen, or no change for 500 ms with some frozen) or
 * frozen_wait_ms have passed since the last park, then prints phase=frozen:
 * RSS and page tables then, how long after the last park that was, when the
 * count was first seen non-zero and last seen changing (t_first_ms,
 * t_settle_ms: at sample resolution, 100 ms then 50 ms; 0 when it already
 * had its final value at the park, as when spawning outlasts the
 * threshold), the freeze CPU and counters.  The
 * release then thaws every task: phase=released carries the thaws and
 * their CPU.
 *
 * usage: seed N idle|8k|64k [settle_ms [frozen_wait_ms]]
 * env:   BENCH_MEM_GUARD  stop spawning when VmRSS exceeds this many bytes
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "benchutil.h"
#include "mote.h"

enum { MODE_IDLE, MODE_8K, MODE_64K };

static long n_target;
static int mode;
static int settle_ms = 1500;
static int frozen_wait_ms;
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

/* The frozen count as last seen, when (ms after the last park) it last
 * changed and when it first was non-zero; -1 when not yet. */
static int64_t fz_last = -1, fz_t_change = -1, fz_t_first = -1;
static int64_t fz_track(int64_t t_ms)
{
    int64_t f = bench_metric("/stacks/frozen:tasks");
    if (f < 0)
        return f;
    if (f != fz_last) {
        if (fz_last >= 0)
            fz_t_change = t_ms;
        fz_last = f;
    }
    if (f > 0 && fz_t_first < 0)
        fz_t_first = t_ms;
    return f;
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
    int64_t frozen = fz_track(t_ms);
    if (frozen >= 0)
        printf(" frozen=%lld frozen_bytes=%lld freeze_cpu_ms=%.1f", (long long)frozen,
               (long long)bench_metric("/stacks/frozen:bytes"),
               bench_metric("/stacks/freeze/cpu:ns") / 1e6);
    printf("\n");
    fflush(stdout);
}

static double cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* After the settle samples: wait until the frozen count is stable, at most
 * until frozen_wait_ms after the last park (t0), and report. */
static void wait_frozen(int64_t t0, long spawned, double cpu0)
{
    int64_t mode = bench_metric("/stacks/freeze/mode:enum");
    if (frozen_wait_ms <= 0 || mode <= 0)
        return;
    int64_t now;
    int stable = 0;
    while ((now = mote_now()) - t0 < (int64_t)frozen_wait_ms * 1000000) {
        int64_t t = (now - t0) / 1000000;
        int64_t f = fz_track(t);
        if (f >= spawned || (f > 0 && t - (fz_t_change > 0 ? fz_t_change : 0) >= 500)) {
            stable = 1;
            break;
        }
        mote_sleep(50 * 1000000);
    }
    int64_t last = fz_last;
    bench_status s = bench_read_status();
    int64_t fzns = bench_metric("/stacks/freeze/cpu:ns");
    int64_t fzn = bench_metric("/stacks/freeze/freezes:events");
    printf(
        "kind=seed %s phase=frozen t_ms=%lld stable=%d t_first_ms=%lld t_settle_ms=%lld "
        "rss=%lld pte=%lld frozen=%lld frozen_bytes=%lld freezes=%lld windows=%lld "
        "freeze_cpu_ms=%.1f freeze_ns_per_task=%.0f cpu_ms=%.1f thaws=%lld\n",
        tag, (long long)((mote_now() - t0) / 1000000), stable, (long long)fz_t_first,
        (long long)(fz_t_change > 0 ? fz_t_change : 0), (long long)s.rss,
        (long long)s.pte, (long long)last,
        (long long)bench_metric("/stacks/frozen:bytes"), (long long)fzn,
        (long long)bench_metric("/stacks/freeze/windows:events"), fzns / 1e6,
        fzn > 0 ? (double)fzns / (double)fzn : 0.0, cpu_ms() - cpu0,
        (long long)bench_metric("/stacks/thaws:events"));
    fflush(stdout);
}

static void main_task(void *arg)
{
    (void)arg;
    const char *fz = getenv("MOTE_STACK_FREEZE");
    snprintf(tag, sizeof tag, "impl=mote n=%ld mode=%s workers=%lld freeze=%s", n_target,
             mode_name, (long long)bench_metric("/sched/workers:threads"),
             fz && *fz ? fz : "default");
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
    double cpu0 = cpu_ms();
    bench_status s = bench_read_status();
    int64_t m0 = bench_clock_ns();
    int64_t res = bench_metric("/stacks/resident:bytes");
    int64_t rd_us = (bench_clock_ns() - m0) / 1000;
    if (rd_us > 20000)
        resident_slow = 1;
    printf(
        "kind=seed %s phase=parked spawned=%ld spawn_ms=%.1f tasks=%lld stack_inuse=%lld "
        "rss=%lld hwm=%lld pte=%lld minflt=%lld metric_us=%lld reserved=%lld "
        "freeze_mode=%lld "
        "off_reason=%lld frozen=%lld%s\n",
        tag, spawned, spawn_ns / 1e6, (long long)bench_metric("/tasks/live:tasks"),
        (long long)res, (long long)s.rss, (long long)s.hwm, (long long)s.pte,
        (long long)flt, (long long)rd_us,
        (long long)bench_metric("/stacks/reserved:bytes"),
        (long long)bench_metric("/stacks/freeze/mode:enum"),
        (long long)bench_metric("/stacks/freeze/off-reason:enum"), (long long)fz_track(0),
        guard_hit ? " guard=hit" : "");
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
    wait_frozen(t0, spawned, cpu0);
#ifdef MOTE_BENCH_HAVE_CHAN
    int64_t th0 = bench_metric("/stacks/thaws:events");
    int64_t thns0 = bench_metric("/stacks/thaws/time:ns");
    int64_t r0 = mote_now();
    mote_chan_close(block);
    while (atomic_load(&alive) > 0)
        mote_sleep(1000000);
    int64_t rel_ns = mote_now() - r0;
    s = bench_read_status();
    int64_t thaws = bench_metric("/stacks/thaws:events") - th0;
    int64_t thns = bench_metric("/stacks/thaws/time:ns") - thns0;
    printf("kind=seed %s phase=released release_ms=%.1f rss=%lld pte=%lld thaws=%lld "
           "thaw_cpu_ms=%.1f thaw_us=%.2f\n",
           tag, rel_ns / 1e6, (long long)s.rss, (long long)s.pte, (long long)thaws,
           thns / 1e6, thaws > 0 ? thns / 1e3 / (double)thaws : 0.0);
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
    if (argc > 4)
        frozen_wait_ms = atoi(argv[4]);
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
