/*
 * spawn.c - mote side of the spawn+exit micro-benchmark (beside spawn.go):
 * the main task spawns N tasks that each (after using `touch` bytes of
 * stack: 0, 1024 or 16384) signal a wait group, then waits for all of them.
 * ns_per_op is the elapsed time divided by N; minflt_per_op is page faults
 * per spawn (getrusage), which issue 6 wants at ~0 after warm-up even for
 * tasks that use 16 KiB.  With batch > 0 main waits after every `batch`
 * spawns (a steady state with at most `batch` live tasks, which the
 * spawn_1k/spawn_16k rows use); with 0 all N are spawned before waiting.
 *
 * usage: spawn [N] [touch_bytes] [batch]
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "mote.h"

static long n;
static long touch;
static long batch;
#ifdef MOTE_BENCH_HAVE_SYNC
static mote_wg wg = MOTE_WG_INIT;
#else
static _Atomic long done;
#endif

__attribute__((noinline)) static void use1k(void)
{
    unsigned char buf[1 << 10];
    memset(buf, 1, sizeof buf);
    __asm__ volatile("" : : "r"(buf) : "memory");
}

__attribute__((noinline)) static void use16k(void)
{
    unsigned char buf[16 << 10];
    memset(buf, 1, sizeof buf);
    __asm__ volatile("" : : "r"(buf) : "memory");
}

static void child(void *arg)
{
    (void)arg;
    if (touch == 1024)
        use1k();
    else if (touch == 16384)
        use16k();
#ifdef MOTE_BENCH_HAVE_SYNC
    mote_wg_done(&wg);
#else
    atomic_fetch_add_explicit(&done, 1, memory_order_release);
#endif
}

static void spawn_wait(long count)
{
#ifdef MOTE_BENCH_HAVE_SYNC
    for (long i = 0; i < count; i++) {
        mote_wg_add(&wg, 1);
        if (mote_go(child, NULL) != 0) {
            fprintf(stderr, "spawn: mote_go failed at %ld\n", i);
            exit(1);
        }
    }
    mote_wg_wait(&wg);
#else
    atomic_store(&done, 0);
    for (long i = 0; i < count; i++)
        if (mote_go(child, NULL) != 0) {
            fprintf(stderr, "spawn: mote_go failed at %ld\n", i);
            exit(1);
        }
    while (atomic_load_explicit(&done, memory_order_acquire) < count)
        mote_yield();
#endif
}

static int64_t run(long count)
{
    int64_t t0 = mote_now();
    if (batch <= 0)
        spawn_wait(count);
    else
        for (long i = 0; i < count; i += batch)
            spawn_wait(count - i < batch ? count - i : batch);
    return mote_now() - t0;
}

static void main_task(void *arg)
{
    (void)arg;
    run(n / 10); /* warm-up: fills the stack pool */
    int64_t f0 = bench_minflt();
    int64_t d = run(n);
    int64_t f = bench_minflt() - f0;
    const char *name = touch == 1024    ? "spawn_1k"
                       : touch == 16384 ? "spawn_16k"
                                        : "spawn";
    printf("name=%s impl=mote workers=%lld ns_per_op=%.2f minflt_per_op=%.4f iters=%ld "
           "batch=%ld\n",
           name, (long long)bench_metric("/sched/workers:threads"), (double)d / (double)n,
           (double)f / (double)n, n, batch);
}

int main(int argc, char **argv)
{
    n = argc > 1 ? strtol(argv[1], NULL, 10) : 1000000;
    touch = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
    batch = argc > 3 ? strtol(argv[3], NULL, 10) : 0;
    int err = mote_run(main_task, NULL);
    if (err != 0) {
        fprintf(stderr, "spawn: mote_run: %s\n", mote_strerror(err));
        return 1;
    }
    return 0;
}
