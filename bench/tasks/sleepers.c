/*
 * sleepers.c - the idle-mostly server, as tasks: N tasks each sleep for a
 * random time (exponential, mean M ms, capped at 8 M), wake, touch their
 * 256-byte state, and sleep again, for S seconds.  It shows what frozen
 * stacks trade: memory (RSS + page tables, sampled every 100 ms after a
 * warm-up of 2 M, averaged) against CPU (freezing, thawing, the whole
 * process) and wake-up lateness (how long after its deadline a task runs:
 * timer slack plus, for a frozen task, its thaw).  Run it with
 * MOTE_STACK_FREEZE at several thresholds; sleepers.go is the same program
 * with goroutines.
 *
 * usage: sleepers N mean_ms seconds
 * prints one line: kind=sleepers impl=mote n= mean_ms= freeze= rss_pt= ...
 * (freeze counters are deltas over the measured window: freeze_cpu_ms,
 * freezes, thaws and their causes; span_s is the window's length;
 * freeze_mode / off_reason are /stacks/freeze/mode:enum and off-reason:enum)
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "benchutil.h"
#include "mote.h"

static long n_tasks;
static int64_t mean_ns, end_ns;
static atomic_long wakes, sum_state;

/* Lateness histogram: 1 us buckets below 1 ms, then 1 ms buckets to 1 s. */
#define LATE_FINE   1000
#define LATE_COARSE 1000
static atomic_long late_fine[LATE_FINE], late_coarse[LATE_COARSE + 1];

static void late_add(int64_t ns)
{
    int64_t us = ns / 1000;
    if (us < 0)
        us = 0;
    if (us < LATE_FINE)
        atomic_fetch_add_explicit(&late_fine[us], 1, memory_order_relaxed);
    else {
        int64_t ms = us / 1000;
        atomic_fetch_add_explicit(&late_coarse[ms < LATE_COARSE ? ms : LATE_COARSE], 1,
                                  memory_order_relaxed);
    }
}

/* The lateness in us below which a fraction q of the wakes fell. */
static double late_quantile(double q)
{
    long total = 0;
    for (int i = 0; i < LATE_FINE; i++)
        total += atomic_load(&late_fine[i]);
    for (int i = 0; i <= LATE_COARSE; i++)
        total += atomic_load(&late_coarse[i]);
    long want = (long)(q * (double)total), seen = 0;
    for (int i = 0; i < LATE_FINE; i++)
        if ((seen += atomic_load(&late_fine[i])) > want)
            return i;
    for (int i = 0; i <= LATE_COARSE; i++)
        if ((seen += atomic_load(&late_coarse[i])) > want)
            return i * 1000.0;
    return -1;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int64_t exp_sleep(uint64_t *s)
{
    double u = (double)(rng_next(s) >> 11) / 9007199254740992.0;
    double x = -__builtin_log(1.0 - u) * (double)mean_ns;
    return x > 8.0 * (double)mean_ns ? 8 * mean_ns : (int64_t)x;
}

static void sleeper(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    unsigned char state[256]; /* a connection's worth of live state */
    memset(state, (int)(uintptr_t)arg, sizeof state);
    while (mote_now() < end_ns) {
        int64_t d = exp_sleep(&rng), due = mote_now() + d;
        mote_sleep(d);
        late_add(mote_now() - due);
        long sum = 0;
        for (size_t i = 0; i < sizeof state; i++)
            sum += state[i]++;
        atomic_fetch_add_explicit(&sum_state, sum, memory_order_relaxed);
        atomic_fetch_add_explicit(&wakes, 1, memory_order_relaxed);
    }
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

static void main_task(void *arg)
{
    int64_t secs = (int64_t)(intptr_t)arg;
    int64_t start = mote_now();
    end_ns = start + secs * 1000000000;
    for (long i = 0; i < n_tasks; i++)
        if (mote_go(sleeper, (void *)(uintptr_t)(i + 1)) != 0) {
            fprintf(stderr, "sleepers: mote_go failed after %ld tasks\n", i);
            exit(1);
        }
    int64_t warm = start + 2 * mean_ns;
    double sum = 0, cpu0 = 0;
    long samples = 0, wakes0 = 0;
    int64_t fz0 = 0, th0 = 0, thn0 = 0, fzn0 = 0, thr0 = 0, thf0 = 0, thu0 = 0,
            t_meas = 0;
    while (mote_now() < end_ns) {
        mote_sleep(100 * 1000000);
        if (mote_now() < warm)
            continue;
        if (!samples) { /* the measured window starts */
            cpu0 = cpu_s();
            wakes0 = atomic_load(&wakes);
            fz0 = bench_metric("/stacks/freeze/cpu:ns");
            th0 = bench_metric("/stacks/thaws/time:ns");
            thn0 = bench_metric("/stacks/thaws:events");
            fzn0 = bench_metric("/stacks/freeze/freezes:events");
            thr0 = bench_metric("/stacks/thaws/resume:events");
            thf0 = bench_metric("/stacks/thaws/fault:events");
            thu0 = bench_metric("/stacks/thaws/runtime:events");
            t_meas = mote_now();
        }
        bench_status s = bench_read_status();
        sum += (double)(s.rss + s.pte);
        samples++;
    }
    double span = (double)(mote_now() - t_meas) / 1e9;
    double cpu = cpu_s() - cpu0;
    long w = atomic_load(&wakes) - wakes0;
    int64_t thaws = bench_metric("/stacks/thaws:events") - thn0;
    const char *fz = getenv("MOTE_STACK_FREEZE");
    printf(
        "kind=sleepers impl=mote n=%ld mean_ms=%lld freeze=%s rss_pt=%.0f per_task=%.0f "
        "wakes_per_s=%.0f cpu_s_per_s=%.3f cpu_us_per_wake=%.2f late_p50_us=%.0f "
        "late_p99_us=%.0f freeze_cpu_ms=%.1f thaws=%lld thaw_us=%.2f frozen_end=%lld",
        n_tasks, (long long)(mean_ns / 1000000), fz ? fz : "default",
        samples ? sum / samples : -1.0, samples ? sum / samples / n_tasks : -1.0,
        w / span, cpu / span, w ? cpu / w * 1e6 : 0.0, late_quantile(0.5),
        late_quantile(0.99), (bench_metric("/stacks/freeze/cpu:ns") - fz0) / 1e6,
        (long long)thaws,
        thaws ? (bench_metric("/stacks/thaws/time:ns") - th0) / 1e3 / thaws : 0.0,
        (long long)bench_metric("/stacks/frozen:tasks"));
    printf(
        " span_s=%.3f thaws_per_s=%.1f freezes=%lld thaws_resume=%lld thaws_fault=%lld "
        "thaws_runtime=%lld frozen_bytes_end=%lld freeze_mode=%lld off_reason=%lld\n",
        span, thaws / span,
        (long long)(bench_metric("/stacks/freeze/freezes:events") - fzn0),
        (long long)(bench_metric("/stacks/thaws/resume:events") - thr0),
        (long long)(bench_metric("/stacks/thaws/fault:events") - thf0),
        (long long)(bench_metric("/stacks/thaws/runtime:events") - thu0),
        (long long)bench_metric("/stacks/frozen:bytes"),
        (long long)bench_metric("/stacks/freeze/mode:enum"),
        (long long)bench_metric("/stacks/freeze/off-reason:enum"));
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: sleepers N mean_ms seconds\n");
        return 2;
    }
    n_tasks = strtol(argv[1], NULL, 10);
    mean_ns = strtoll(argv[2], NULL, 10) * 1000000;
    long secs = strtol(argv[3], NULL, 10);
    if (n_tasks <= 0 || mean_ns <= 0 || secs <= 0) {
        fprintf(stderr, "sleepers: N, mean_ms and seconds must be positive\n");
        return 2;
    }
    int r = mote_run(main_task, (void *)(intptr_t)secs);
    if (r != 0) {
        fprintf(stderr, "sleepers: mote_run: %s\n", mote_strerror(r));
        return 1;
    }
    return 0;
}
