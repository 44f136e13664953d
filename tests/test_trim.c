/* test_trim.c - parked stacks give their pages back; pointers into them
 * stay valid; trimming never touches a running task; steady spawning of
 * deep tasks takes no page faults; MOTE_MEMLIMIT makes mote_go fail
 * cleanly instead of crashing, and spawning recovers once memory is
 * back. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <ucontext.h>

#include "check.h"
#include "mote.h"

#define MS 1000000LL

/* Trimming alone: a slow (sanitized) run would otherwise freeze the parked
 * tasks, whose pages then go by a freeze, not by a trim. */
TEST_SETUP
{
    setenv("MOTE_WORKERS", "2", 1);
    setenv("MOTE_STACK_FREEZE", "off", 1);
}

static uint64_t metric(const char *name) { return test_metric(name); }

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
    CHECK_EQ(mote_wg_done(&parked), 0);
    CHECK_EQ(mote_chan_recv(gate, NULL), MOTE_ECLOSED);
}

/* DEEP tasks each touch 64 KiB, then park on gate. */
static uint64_t park_deep_tasks(void)
{
    gate = mote_chan_make(0, 0);
    CHECK(gate != NULL);
    CHECK_EQ(mote_wg_add(&parked, DEEP), 0);
    for (int i = 0; i < DEEP; i++)
        CHECK_EQ(mote_go(deep_then_park, (void *)(uintptr_t)(64 * 1024)), 0);
    CHECK_EQ(mote_wg_wait(&parked), 0);
    WAIT_UNTIL(metric("/tasks/blocked:tasks") == DEEP, 60);
    return metric("/stacks/resident:bytes");
}

static void main_trim_off(void *arg)
{
    (void)arg;
    uint64_t before = park_deep_tasks();
    CHECK(before >= (uint64_t)DEEP * 64 * 1024);
    /* the control: without trimming nothing comes back, here ten times
     * the lazy delay */
    mote_sleep(200 * MS);
    uint64_t after = metric("/stacks/resident:bytes");
    CHECK(after >= (uint64_t)DEEP * 64 * 1024);
    CHECK_EQ(metric("/stacks/trimmed:bytes"), 0);
    CHECK_EQ(mote_chan_close(gate), 0);
    WAIT_UNTIL(metric("/tasks/live:tasks") == 1, 60);
    CHECK_EQ(mote_chan_free(gate), 0);
}

TEST(trim_off_keeps_parked_stacks_resident)
{
    CHECK_EQ(test_run_env("MOTE_STACK_TRIM", "off", main_trim_off, NULL), 0);
}

static uint64_t deep_tasks(void)
{
    return metric("/stacks/highwater/le-128KiB:tasks") +
           metric("/stacks/highwater/le-64KiB:tasks");
}

static void main_resident(void *arg)
{
    (void)arg;
    uint64_t trimmed0 = metric("/stacks/trimmed:bytes");
    uint64_t before = park_deep_tasks();
    int64_t t0 = mote_now();
    /* Trims land ~20 ms after the park (lazy); each trim also measures the
     * task's high water.  Wait for all three effects, not just the first. */
    WAIT_UNTIL(metric("/stacks/resident:bytes") < (uint64_t)DEEP * 8192 &&
                   metric("/stacks/trimmed:bytes") - trimmed0 >=
                       (uint64_t)DEEP * 60 * 1024 &&
                   deep_tasks() >= DEEP,
               60);
    uint64_t after = metric("/stacks/resident:bytes");
    printf("resident: %.0f -> %.0f B/task in %.0f ms\n", (double)before / DEEP,
           (double)after / DEEP, (double)(mote_now() - t0) / 1e6);
    CHECK(after < (uint64_t)DEEP * 8192);
    CHECK_EQ(mote_chan_close(gate), 0);
    WAIT_UNTIL(metric("/tasks/live:tasks") == 1, 60);
    CHECK(metric("/stacks/pooled:stacks") > 0);
    /* mote_mem_release gives the pooled stacks back too, at once, every
     * worker's: what stays is main's own stack (232 KiB here, 368 under
     * ASan or TSan, of ~4.3 MiB).  At a quarter, the pool of main's own
     * worker could stay for a minute unnoticed (its task slept a few ms
     * at a time, and no trim check was due).  The bound is main's stack
     * with room, not a share of what was pooled: on a loaded machine the
     * pools' decay had already given part back (2.6 MiB left), and an
     * eighth of that was less than main's stack alone (gcc TSan, 4 runs
     * in 15 beside two busy loops). */
    uint64_t pooled_res = metric("/stacks/resident:bytes");
    mote_mem_release();
    int64_t t1 = mote_now();
    WAIT_UNTIL(metric("/stacks/resident:bytes") <= 512 * 1024, 60);
    printf("mote_mem_release: pooled stacks %.0f -> %.0f KiB in %.1f ms\n",
           pooled_res / 1024.0, metric("/stacks/resident:bytes") / 1024.0,
           (double)(mote_now() - t1) / 1e6);
    CHECK_EQ(mote_chan_free(gate), 0);
}

TEST(parked_stacks_give_pages_back_and_record_high_water)
{
    CHECK_EQ(test_run_env("MOTE_STACK_TRIM", NULL, main_resident, NULL), 0);
}

/* ---- 2. pointers into a trimmed parked stack stay valid ---- */

typedef struct share {
    mote_chan *ask, *done;
    uint32_t *data; /* points into the parent's stack */
    uint64_t trimmed0;
} share;

static void reader(void *arg)
{
    share *s = arg;
    CHECK_EQ(mote_chan_recv(s->ask, NULL), 0);
    /* the parent parks in its receive and, eager, its deep pages go */
    WAIT_UNTIL(metric("/stacks/trimmed:bytes") >= s->trimmed0 + 64 * 1024, 60);
    uint32_t sum = 0;
    for (int i = 0; i < 8192; i++) {
        CHECK_EQ(s->data[i], (uint32_t)i * 2654435761u);
        s->data[i] = ~s->data[i];
        sum += 1;
    }
    CHECK_EQ(sum, 8192);
    CHECK_EQ(mote_chan_send(s->done, NULL), 0);
}

static __attribute__((noinline)) void parent_leaf(void)
{
    {
        uint32_t data[8192]; /* 32 KiB shared with another task */
        for (int i = 0; i < 8192; i++)
            data[i] = (uint32_t)i * 2654435761u;
        use_stack(96 * 1024); /* deep pages below us, to be trimmed */
        uint64_t trimmed = metric("/stacks/trimmed:bytes");
        share s = {mote_chan_make(0, 0), mote_chan_make(0, 0), data, trimmed};
        CHECK(s.ask && s.done);
        CHECK_EQ(mote_go(reader, &s), 0);
        CHECK_EQ(mote_chan_send(s.ask, NULL), 0);
        CHECK_EQ(mote_chan_recv(s.done, NULL), 0); /* parked here while reader works */
        /* trimming is eager: the park above gave the deep pages back */
        CHECK(metric("/stacks/trimmed:bytes") >= trimmed + 64 * 1024);
        for (int i = 0; i < 8192; i++)
            CHECK_EQ(data[i], ~((uint32_t)i * 2654435761u));
        CHECK_EQ(mote_chan_free(s.ask), 0);
        CHECK_EQ(mote_chan_free(s.done), 0);
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

TEST(pointers_into_a_trimmed_parked_stack_stay_valid)
{
    CHECK_EQ(test_run_env("MOTE_STACK_TRIM", "eager", main_pointers, NULL), 0);
}

/* ---- 3. trimming never races a running task ---- */

static mote_wg churn_done = MOTE_WG_INIT;
static void churner(void *arg)
{
    uintptr_t seed = (uintptr_t)arg;
    for (int round = 0; round < TEST_SCALE(40, 4); round++) {
        volatile uint64_t frame[512];
        for (int i = 0; i < 512; i++)
            frame[i] = seed * 31 + (uint64_t)i + (uint64_t)round;
        use_stack(4096 * (1 + (seed + (uintptr_t)round) % 8));
        mote_sleep((int64_t)((seed + (uintptr_t)round) % 3) * MS);
        for (int i = 0; i < 512; i++)
            CHECK_EQ(frame[i], seed * 31 + (uint64_t)i + (uint64_t)round);
    }
    CHECK_EQ(mote_wg_done(&churn_done), 0);
}

static void main_churn(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_wg_add(&churn_done, 200), 0);
    for (uintptr_t i = 0; i < 200; i++)
        CHECK_EQ(mote_go(churner, (void *)i), 0);
    CHECK_EQ(mote_wg_wait(&churn_done), 0);
}

TEST(eager_trimming_never_touches_live_frames)
{
    CHECK_EQ(test_run_env("MOTE_STACK_TRIM", "eager", main_churn, NULL), 0);
}

TEST(lazy_trimming_never_touches_live_frames)
{
    CHECK_EQ(test_run_env("MOTE_STACK_TRIM", NULL, main_churn, NULL), 0);
}

/* ---- 3b. a task parked on a stack of its own making is left alone ----
 *
 * A coroutine library inside a task parks on a stack it mapped itself.  The
 * trim decommitted from the task's slot up to that stack pointer: with the
 * stack mapped above the slot, every page in between (other tasks' stacks,
 * the program's own memory) was lost.  Here the region holding the
 * coroutine's stack has a marked lower half that must survive. */

#define CO_REGION (512 * 1024)
static ucontext_t co_task_ctx, co_ctx;
static uint64_t *co_marks;
static mote_wg co_done = MOTE_WG_INIT;

static void co_body(void)
{
    mote_sleep(300 * MS); /* parked here, on the coroutine's stack */
    swapcontext(&co_ctx, &co_task_ctx);
}

static void co_parker(void *arg)
{
    char *region = arg;
    getcontext(&co_ctx);
    co_ctx.uc_stack.ss_sp = region + CO_REGION / 2;
    co_ctx.uc_stack.ss_size = CO_REGION / 2;
    co_ctx.uc_link = &co_task_ctx;
    makecontext(&co_ctx, co_body, 0);
    CHECK_EQ(swapcontext(&co_task_ctx, &co_ctx), 0);
    CHECK_EQ(mote_wg_done(&co_done), 0);
}

static void main_coroutine(void *arg)
{
    (void)arg;
    /* a region above this task's stack, so above the slots of the chunk */
    char here, *region = MAP_FAILED;
    for (uintptr_t off = 1UL << 30; off <= 64UL << 30 && region == MAP_FAILED; off <<= 1)
        region = mmap((void *)(((uintptr_t)&here + off) & ~(uintptr_t)0xfffff), CO_REGION,
                      PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECK(region != MAP_FAILED && region > &here);
    co_marks = (uint64_t *)region;
    for (size_t i = 0; i < CO_REGION / 2 / 8; i++)
        co_marks[i] = 0x5eed0000 + i;
    CHECK_EQ(mote_wg_add(&co_done, 1), 0);
    CHECK_EQ(mote_go(co_parker, region), 0);
    CHECK_EQ(mote_wg_wait(&co_done), 0); /* 300 ms parked: trimmed, lazily */
    for (size_t i = 0; i < CO_REGION / 2 / 8; i++)
        if (co_marks[i] != 0x5eed0000 + i) {
            fprintf(stderr, "word %zu of the region lost: %#llx\n", i,
                    (unsigned long long)co_marks[i]);
            CHECK(0);
        }
    munmap(region, CO_REGION);
}

TEST(a_task_parked_on_a_stack_of_its_own_making_is_left_alone)
{
    CHECK_EQ(test_run_env("MOTE_STACK_TRIM", "eager", main_coroutine, NULL), 0);
    CHECK_EQ(test_run_env("MOTE_STACK_TRIM", NULL, main_coroutine, NULL), 0);
}

/* ---- 4. steady spawning of tasks using 16 KiB takes no page faults ---- */

static mote_wg batch = MOTE_WG_INIT;
static void sixteen(void *arg)
{
    (void)arg;
    use_stack(16 * 1024);
    CHECK_EQ(mote_wg_done(&batch), 0);
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
        CHECK_EQ(mote_wg_add(&batch, 100), 0);
        for (int i = 0; i < 100; i++)
            CHECK_EQ(mote_go(sixteen, NULL), 0);
        CHECK_EQ(mote_wg_wait(&batch), 0);
    }
}

static void main_steady(void *arg)
{
    (void)arg;
    spawn_batches(200); /* warm-up */
    long f0 = minflt();
    int n = 2000;
    spawn_batches(n);
    double per = (double)(minflt() - f0) / (n * 100.0);
    printf("steady 16 KiB spawn+exit: %.4f page faults per task\n", per);
    CHECK(per < 0.05);
}

TEST(steady_spawning_of_deep_tasks_takes_no_page_faults)
{
    if (TEST_SANITIZED) /* sanitizers fault their own shadow pages in */
        TEST_SKIP("sanitizer build");
    CHECK_EQ(test_run_env("MOTE_STACK_TRIM", NULL, main_steady, NULL), 0);
}

/* ---- 5. MOTE_MEMLIMIT: mote_go and malloc fail cleanly, and recover ---- */

static mote_chan *hold;
static mote_wg touched = MOTE_WG_INIT, hogs_done = MOTE_WG_INIT;
static void hog(void *arg)
{
    (void)arg;
    char buf[256 * 1024 - 16384]; /* stays live while parked: not trimmable */
    memset(buf, 1, sizeof buf);
    CHECK_EQ(mote_wg_done(&touched), 0);
    CHECK_EQ(mote_chan_recv(hold, NULL), MOTE_ECLOSED);
    __asm__ volatile("" : : "r"(buf) : "memory");
    CHECK_EQ(mote_wg_done(&hogs_done), 0);
}

static void little(void *arg) { (void)arg; }

enum { HOG_BATCH = 50, HOG_MAX = 4000 }; /* 4000 x 240 KiB would be ~940 MiB */

static void main_limit(void *arg)
{
    (void)arg;
    hold = mote_chan_make(0, 0);
    int spawned = 0, r = 0;
    /* Spawn in batches, each waited for until its hogs touched their
     * memory: the spawner never runs ahead of the memory it accounts for
     * (a task takes ~60 page faults to touch 240 KiB). */
    while (spawned < HOG_MAX && r == 0) {
        int n = 0;
        CHECK_EQ(mote_wg_add(&touched, HOG_BATCH), 0);
        CHECK_EQ(mote_wg_add(&hogs_done, HOG_BATCH), 0);
        for (; n < HOG_BATCH; n++) {
            r = mote_go(hog, NULL);
            if (r)
                break;
        }
        spawned += n;
        if (n < HOG_BATCH) { /* these were not spawned */
            CHECK_EQ(mote_wg_add(&touched, n - HOG_BATCH), 0);
            CHECK_EQ(mote_wg_add(&hogs_done, n - HOG_BATCH), 0);
        }
        CHECK_EQ(mote_wg_wait(&touched), 0);
    }
    printf("memlimit 128M: mote_go failed after %d tasks: %s\n", spawned,
           mote_strerror(r));
    CHECK_EQ(r, -ENOMEM);
    CHECK(spawned > 100);
    CHECK(spawned < HOG_MAX);
    /* The limit is the process's, not the stacks' alone: the heap gets
     * what they leave of it, and never under 1/16 (8 MiB here).  Before,
     * malloc took another 128 MiB on top of the stacks. */
    static void *blocks[256];
    int nb = 0;
    while (nb < 256 && (blocks[nb] = mote_malloc(1 << 20)) != NULL)
        memset(blocks[nb++], 1, 1 << 20);
    printf("memlimit 128M: then malloc gave %d MiB\n", nb);
    CHECK(nb < 256);
    CHECK(nb <= 16);
    CHECK_EQ(errno, ENOMEM);
    while (nb)
        mote_free(blocks[--nb]);
    CHECK_EQ(mote_chan_close(hold), 0);
    CHECK_EQ(mote_wg_wait(&hogs_done), 0);
    /* memory comes back (the pool is trimmed under pressure): spawns work */
    int64_t t0 = mote_now();
    while ((r = mote_go(little, NULL)) != 0 && mote_now() - t0 < 60000 * MS) {
        CHECK_EQ(r, -ENOMEM);
        mote_sleep(20 * MS);
    }
    printf("memlimit 128M: spawning again after %.0f ms\n", (mote_now() - t0) / 1e6);
    CHECK_EQ(r, 0);
    CHECK_EQ(mote_chan_free(hold), 0);
}

TEST(memlimit_makes_go_and_malloc_fail_with_enomem_then_recover)
{
    if (TEST_SANITIZED) /* their shadow memory counts toward the limit */
        TEST_SKIP("sanitizer build");
    CHECK_EQ(test_run_env("MOTE_MEMLIMIT", "128M", main_limit, NULL), 0);
}

TEST_MAIN()
