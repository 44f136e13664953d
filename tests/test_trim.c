/* test_trim.c - parked stacks give their pages back; pointers into them
 * stay valid; trimming never touches a running task; steady spawning of
 * deep tasks takes no page faults; MOTE_MEMLIMIT makes mote_go fail
 * cleanly instead of crashing. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "check.h"
#include "mote.h"

static uint64_t metric(const char *name)
{
    uint64_t v = 0;
    CHECK_EQ(mote_metric(name, &v), 0);
    return v;
}

static __attribute__((noinline)) void use_stack(size_t n)
{
    char buf[n];
    memset(buf, 0x5a, n);
    __asm__ volatile("" : : "r"(buf) : "memory");
}

/* ---- 1. resident bytes fall after deep tasks park ---- */
#define DEEP 1000
static mote_chan *gate;
static mote_wg parked = MOTE_WG_INIT;

static void deep_then_park(void *arg)
{
    use_stack((size_t)(uintptr_t)arg);
    mote_wg_done(&parked);
    mote_chan_recv(gate, NULL);
}

static void main_resident(void *arg)
{
    int trim_off = arg != NULL;
    gate = mote_chan_make(0, 0);
    CHECK(gate != NULL);
    mote_wg_add(&parked, DEEP);
    for (int i = 0; i < DEEP; i++)
        CHECK_EQ(mote_go(deep_then_park, (void *)(uintptr_t)(64 * 1024)), 0);
    mote_wg_wait(&parked);
    uint64_t before = metric("/stacks/resident:bytes");
    int64_t t0 = mote_now();
    uint64_t after = before;
    if (trim_off) { /* the control: without trimming nothing comes back */
        mote_sleep(200 * 1000000);
        after = metric("/stacks/resident:bytes");
        CHECK(after >= (uint64_t)DEEP * 64 * 1024);
        CHECK_EQ(metric("/stacks/trimmed:bytes"), 0);
        mote_chan_close(gate);
        mote_chan_free(gate);
        return;
    }
    while (mote_now() - t0 < 2000000000LL) { /* trims land within ~100 ms */
        mote_sleep(20 * 1000000);
        after = metric("/stacks/resident:bytes");
        if (after < (uint64_t)DEEP * 8192)
            break;
    }
    printf("resident: %.0f -> %.0f B/task in %.0f ms\n", (double)before / DEEP,
           (double)after / DEEP, (double)(mote_now() - t0) / 1e6);
    CHECK(after < (uint64_t)DEEP * 8192);
    CHECK(metric("/stacks/trimmed:bytes") >= (uint64_t)DEEP * 60 * 1024);
    uint64_t deep_tasks = metric("/stacks/highwater/le-128KiB:tasks") +
                          metric("/stacks/highwater/le-64KiB:tasks");
    CHECK(deep_tasks >= DEEP);
    CHECK_EQ(mote_chan_close(gate), 0);
    while (metric("/tasks/live:tasks") > 1)
        mote_sleep(1000000);
    CHECK(metric("/stacks/pooled:stacks") > 0);
    /* mote_mem_release gives the pooled stacks back too, now */
    uint64_t pooled_res = metric("/stacks/resident:bytes");
    mote_mem_release();
    int64_t t1 = mote_now();
    uint64_t res = pooled_res;
    while (mote_now() - t1 < 1000000000LL && res > pooled_res / 4) {
        mote_sleep(1000000);
        res = metric("/stacks/resident:bytes");
    }
    printf("mote_mem_release: pooled stacks %.0f -> %.0f KiB in %.1f ms\n",
           pooled_res / 1024.0, res / 1024.0, (double)(mote_now() - t1) / 1e6);
    CHECK(res <= pooled_res / 4);
    mote_chan_free(gate);
}

/* ---- 2. pointers into a trimmed parked stack stay valid ---- */
typedef struct share {
    mote_chan *ask, *done;
    uint32_t *data; /* points into the parent's stack */
} share;

static void reader(void *arg)
{
    share *s = arg;
    mote_chan_recv(s->ask, NULL);
    mote_sleep(60 * 1000000); /* the parent is parked and trimmed meanwhile */
    uint32_t sum = 0;
    for (int i = 0; i < 8192; i++) {
        CHECK_EQ(s->data[i], (uint32_t)i * 2654435761u);
        s->data[i] = ~s->data[i];
        sum += 1;
    }
    CHECK_EQ(sum, 8192);
    mote_chan_send(s->done, NULL);
}

static __attribute__((noinline)) void parent_leaf(void)
{
    {
        uint32_t data[8192]; /* 32 KiB shared with another task */
        for (int i = 0; i < 8192; i++)
            data[i] = (uint32_t)i * 2654435761u;
        use_stack(96 * 1024); /* deep pages below us, to be trimmed */
        share s = {mote_chan_make(0, 0), mote_chan_make(0, 0), data};
        CHECK(s.ask && s.done);
        CHECK_EQ(mote_go(reader, &s), 0);
        uint64_t trimmed = metric("/stacks/trimmed:bytes");
        mote_chan_send(s.ask, NULL);
        mote_chan_recv(s.done, NULL); /* parked here while reader sleeps */
        CHECK(metric("/stacks/trimmed:bytes") > trimmed);
        for (int i = 0; i < 8192; i++)
            CHECK_EQ(data[i], ~((uint32_t)i * 2654435761u));
        mote_chan_free(s.ask);
        mote_chan_free(s.done);
    }
}

static __attribute__((noinline)) void parent_level(int depth)
{
    uint32_t mine[256];
    for (int i = 0; i < 256; i++)
        mine[i] = (uint32_t)(depth * 1000 + i);
    if (depth > 0)
        parent_level(depth - 1);
    else
        parent_leaf();
    for (int i = 0; i < 256; i++)
        CHECK_EQ(mine[i], (uint32_t)(depth * 1000 + i));
}

static void main_pointers(void *arg)
{
    (void)arg;
    parent_level(20);
}

/* ---- 3. trimming never races a running task ---- */
static atomic_int churn_done;
static void churner(void *arg)
{
    uintptr_t seed = (uintptr_t)arg;
    for (int round = 0; round < TEST_SCALE(40, 4); round++) {
        volatile uint64_t frame[512];
        for (int i = 0; i < 512; i++)
            frame[i] = seed * 31 + (uint64_t)i + (uint64_t)round;
        use_stack(4096 * (1 + (seed + (uintptr_t)round) % 8));
        mote_sleep((int64_t)((seed + (uintptr_t)round) % 3) * 1000000);
        for (int i = 0; i < 512; i++)
            CHECK_EQ(frame[i], seed * 31 + (uint64_t)i + (uint64_t)round);
    }
    atomic_fetch_add(&churn_done, 1);
}

static void main_churn(void *arg)
{
    (void)arg;
    for (uintptr_t i = 0; i < 200; i++)
        CHECK_EQ(mote_go(churner, (void *)i), 0);
    while (atomic_load(&churn_done) < 200)
        mote_sleep(5 * 1000000);
}

/* ---- 4. steady spawning of tasks using 16 KiB takes no page faults ---- */
static mote_wg batch = MOTE_WG_INIT;
static void sixteen(void *arg)
{
    (void)arg;
    use_stack(16 * 1024);
    mote_wg_done(&batch);
}

static long minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static void spawn_batches(int n)
{
    for (int b = 0; b < n; b++) {
        mote_wg_add(&batch, 100);
        for (int i = 0; i < 100; i++)
            CHECK_EQ(mote_go(sixteen, NULL), 0);
        mote_wg_wait(&batch);
    }
}

static void main_steady(void *arg)
{
    (void)arg;
    spawn_batches(200); /* warm-up */
    long f0 = minflt();
    int n = TEST_SCALE(2000, 10);
    spawn_batches(n);
    double per = (double)(minflt() - f0) / (n * 100.0);
    printf("steady 16 KiB spawn+exit: %.4f page faults per task\n", per);
    CHECK(per < 0.05);
}

/* ---- 5. MOTE_MEMLIMIT: mote_go fails cleanly, and recovers ---- */
static mote_chan *hold;
static void hog(void *arg)
{
    (void)arg;
    char buf[256 * 1024 - 16384]; /* stays live while parked: not trimmable */
    memset(buf, 1, sizeof buf);
    mote_chan_recv(hold, NULL);
    __asm__ volatile("" : : "r"(buf) : "memory");
}

static void little(void *arg) { (void)arg; }

static void main_limit(void *arg)
{
    (void)arg;
    hold = mote_chan_make(0, 0);
    int spawned = 0, r = 0;
    for (; spawned < 4000; spawned++) { /* 4000 x 240 KiB would be ~940 MiB */
        r = mote_go(hog, NULL);
        if (r)
            break;
        if (spawned % 50 == 0)
            mote_sleep(2 * 1000000); /* let them run and take their memory */
    }
    printf("memlimit 128M: mote_go failed after %d tasks: %s\n", spawned,
           mote_strerror(r));
    CHECK_EQ(r, -ENOMEM);
    CHECK(spawned > 100);
    mote_chan_close(hold);
    while (metric("/tasks/live:tasks") > 1)
        mote_sleep(1000000);
    mote_sleep(50 * 1000000);
    int ok = 0;
    for (int i = 0; i < 100 && !ok; i++) { /* memory came back: spawns work */
        ok = mote_go(little, NULL) == 0;
        if (!ok)
            mote_sleep(20 * 1000000);
    }
    CHECK(ok);
    mote_chan_free(hold);
}

int main(void)
{
    setenv("MOTE_WORKERS", "2", 1);
    setenv("MOTE_STACK_TRIM", "off", 1);
    CHECK_EQ(mote_run(main_resident, "off"), 0);
    unsetenv("MOTE_STACK_TRIM");
    CHECK_EQ(mote_run(main_resident, NULL), 0);
    setenv("MOTE_STACK_TRIM", "eager", 1);
    CHECK_EQ(mote_run(main_pointers, NULL), 0);
    CHECK_EQ(mote_run(main_churn, NULL), 0);
    unsetenv("MOTE_STACK_TRIM");
    CHECK_EQ(mote_run(main_churn, NULL), 0);
    if (!TEST_SANITIZED) /* sanitizers fault their own shadow pages in */
        CHECK_EQ(mote_run(main_steady, NULL), 0);
    if (!TEST_SANITIZED) { /* their shadow memory counts toward the limit */
        setenv("MOTE_MEMLIMIT", "128M", 1);
        CHECK_EQ(mote_run(main_limit, NULL), 0);
        unsetenv("MOTE_MEMLIMIT");
    }
    TEST_PASS("test_trim");
    return 0;
}
