/*
 * test_freeze.c - frozen stacks (MOTE_STACK_FREEZE): a parked task's live
 * bytes leave its pages and come back, at the same addresses, before it
 * runs and whenever anything touches them; no write racing a freeze is
 * lost, from user code or from the kernel; mote's own hand-offs thaw
 * explicitly instead of faulting; diagnostics read frozen stacks without
 * thawing them; and freezing off says why.
 *
 * A case that needs freezing skips itself, with the reason from the
 * metrics, where this kernel or sandbox gives no full-mode userfaultfd.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "heap/heap.h"
#include "mote.h"

/* MOTE_DEBUG=2 walks a whole wait queue after each change when nothing is
 * frozen, reading records on other tasks' stacks: a freeze that starts
 * during a walk makes those reads thaw by fault.  "Nothing of mote's
 * faults its way in" holds below that level. */
#if MOTE_DEBUG >= 2
#define OWN_THAWS_ONLY 0
#else
#define OWN_THAWS_ONLY 1
#endif

#define MS 1000000LL

static uint64_t metric(const char *name)
{
    uint64_t v = 0;
    CHECK_EQ(mote_metric(name, &v), 0);
    return v;
}

TEST_SETUP
{
    setenv("MOTE_STACK_FREEZE", "20ms", 1);
    setenv("MOTE_WORKERS", "2", 1);
}

/* Why this run does not freeze, from the metrics; NULL when it does. */
static const char *not_freezing(void)
{
    if (metric("/stacks/freeze/mode:enum") == 1)
        return NULL;
    if (metric("/stacks/freeze/mode:enum") == 2)
        return "stacks are frozen only with a user-mode-only userfaultfd here";
    switch (metric("/stacks/freeze/off-reason:enum")) {
    case 1: return "stacks are not frozen: MOTE_STACK_FREEZE=off";
    case 2:
        return "stacks are not frozen: full-mode userfaultfd denied (privilege, seccomp)";
    case 3:
        return "stacks are not frozen: the kernel has no userfaultfd or write-protect";
    case 4: return "stacks are not frozen: MOTE_STACK_GUARD=mprotect";
    case 5: return "stacks are not frozen: under valgrind";
    case 6: return "stacks are not frozen: MOTE_STACK_TRIM=off";
    default: return "stacks are not frozen here (an unknown off-reason)";
    }
}

/* Ends the case as skipped, saying why, where this run does not freeze
 * (from a case's body or from the main task of a run it started). */
#define NEED_FREEZING()                       \
    do {                                      \
        const char *nf_why_ = not_freezing(); \
        if (nf_why_)                          \
            TEST_SKIP(nf_why_);               \
    } while (0)

/* Waits (30 s at most: a loaded machine) until n tasks are frozen. */
static bool wait_frozen(uint64_t n)
{
    int64_t t0 = mote_now();
    while (metric("/stacks/frozen:tasks") < n) {
        if (mote_now() - t0 > 30000 * MS) {
            fprintf(stderr, "only %llu of %llu tasks frozen after 30 s\n",
                    (unsigned long long)metric("/stacks/frozen:tasks"),
                    (unsigned long long)n);
            return false;
        }
        mote_sleep(5 * MS);
    }
    return true;
}

/* ---- 1. idle tasks freeze, give their memory back, and wake intact ---- */

#define IDLE_N TEST_SCALE(4000, 8)
static mote_chan *idle_ch;
static mote_wg idle_parked = MOTE_WG_INIT, idle_done = MOTE_WG_INIT;
static atomic_long idle_bad;
static long idle_got[4000];

static void idle_task(void *arg)
{
    long id = (long)(intptr_t)arg;
    volatile long mark[32]; /* live bytes that must come back as they were */
    for (int i = 0; i < 32; i++)
        mark[i] = id * 1000 + i;
    long v = -1; /* the channel writes the value here, into a frozen frame */
    mote_wg_done(&idle_parked);
    int r = mote_chan_recv(idle_ch, &v);
    for (int i = 0; i < 32; i++)
        if (mark[i] != id * 1000 + i)
            atomic_fetch_add(&idle_bad, 1);
    if (r != 0)
        atomic_fetch_add(&idle_bad, 1);
    idle_got[id] = v;
    mote_wg_done(&idle_done);
}

TEST_TASK(idle_tasks_freeze_and_wake_intact)
{
    NEED_FREEZING();
    idle_ch = mote_chan_make(sizeof(long), 0);
    mote_wg_add(&idle_parked, IDLE_N);
    mote_wg_add(&idle_done, IDLE_N);
    for (long i = 0; i < IDLE_N; i++)
        CHECK_EQ(mote_go(idle_task, (void *)(intptr_t)i), 0);
    mote_wg_wait(&idle_parked);
    uint64_t pt_before = metric("/process/pagetables:bytes");
    CHECK(wait_frozen(IDLE_N));
    uint64_t res = metric("/stacks/resident:bytes");
    uint64_t bytes = metric("/stacks/frozen:bytes");
    printf("%d frozen: images %.0f B/task, stacks resident %.0f B/task, %llu windows "
           "emptied, page tables %llu -> %llu KiB\n",
           IDLE_N, (double)bytes / IDLE_N, (double)res / IDLE_N,
           (unsigned long long)metric("/stacks/freeze/windows:events"),
           (unsigned long long)pt_before >> 10,
           (unsigned long long)metric("/process/pagetables:bytes") >> 10);
    CHECK(res < (uint64_t)IDLE_N * 1024);
    CHECK(bytes >= (uint64_t)IDLE_N * 256 && bytes < (uint64_t)IDLE_N * 4096);
    CHECK(metric("/stacks/freeze/windows:events") > 0);
    uint64_t faults0 = metric("/stacks/thaws/fault:events");
    for (long i = 0; i < IDLE_N; i++)
        CHECK_EQ(mote_chan_send(idle_ch, &(long){i + 7}), 0);
    mote_wg_wait(&idle_done);
    CHECK_EQ(atomic_load(&idle_bad), 0);
    /* every value landed exactly once */
    static unsigned char seen[4000];
    for (long i = 0; i < IDLE_N; i++) {
        long v = idle_got[i] - 7;
        CHECK(v >= 0 && v < IDLE_N && !seen[v]);
        seen[v] = 1;
    }
    CHECK(metric("/stacks/thaws/runtime:events") + metric("/stacks/thaws/resume:events") +
              (OWN_THAWS_ONLY ? 0 : metric("/stacks/thaws/fault:events") - faults0) >=
          (uint64_t)IDLE_N);
    /* mote's own hand-offs thawed explicitly: nothing faulted its way in */
    if (OWN_THAWS_ONLY)
        CHECK_EQ(metric("/stacks/thaws/fault:events"), faults0);
    CHECK_EQ(metric("/stacks/frozen:tasks"), 0);
    CHECK_EQ(metric("/stacks/frozen:bytes"), 0);
    mote_chan_free(idle_ch);
}

/* ---- 2. every kind of wait, frozen, then woken by mote ---- */

static mote_mutex mu = MOTE_MUTEX_INIT;
static mote_cond cv = MOTE_COND_INIT;
static int cv_go;
static mote_wg wg_gate = MOTE_WG_INIT, kinds_parked = MOTE_WG_INIT,
               kinds_done = MOTE_WG_INIT;
static mote_chan *sel_a, *sel_b, *buf_ch;
static atomic_long kinds_bad;

static void k_mutex(void *arg)
{
    (void)arg;
    volatile long mark = 0x1234;
    mote_wg_done(&kinds_parked);
    mote_mutex_lock(&mu); /* main holds it */
    mote_mutex_unlock(&mu);
    if (mark != 0x1234)
        atomic_fetch_add(&kinds_bad, 1);
    mote_wg_done(&kinds_done);
}

static void k_cond(void *arg)
{
    (void)arg;
    volatile long mark = 0x2345;
    mote_mutex_lock(&mu);
    mote_wg_done(&kinds_parked);
    while (!cv_go)
        mote_cond_wait(&cv, &mu);
    mote_mutex_unlock(&mu);
    if (mark != 0x2345)
        atomic_fetch_add(&kinds_bad, 1);
    mote_wg_done(&kinds_done);
}

static void k_wg(void *arg)
{
    (void)arg;
    volatile long mark = 0x3456;
    mote_wg_done(&kinds_parked);
    mote_wg_wait(&wg_gate);
    if (mark != 0x3456)
        atomic_fetch_add(&kinds_bad, 1);
    mote_wg_done(&kinds_done);
}

static void k_select(void *arg)
{
    (void)arg;
    long a = -1, b = -1;
    mote_case cs[2] = {
        {.chan = sel_a, .op = MOTE_RECV, .elem = &a},
        {.chan = sel_b, .op = MOTE_RECV, .elem = &b},
    };
    mote_wg_done(&kinds_parked);
    int i = mote_select(cs, 2, -1);
    if (!((i == 0 && a == 11) || (i == 1 && b == 22)))
        atomic_fetch_add(&kinds_bad, 1);
    mote_wg_done(&kinds_done);
}

static void k_send(void *arg)
{
    (void)arg;
    long v = 33; /* read by the receiver from this frozen frame */
    mote_wg_done(&kinds_parked);
    if (mote_chan_send(buf_ch, &v) != 0)
        atomic_fetch_add(&kinds_bad, 1);
    mote_wg_done(&kinds_done);
}

TEST_TASK(every_kind_of_wait_wakes_from_frozen)
{
    NEED_FREEZING();
    sel_a = mote_chan_make(sizeof(long), 0);
    sel_b = mote_chan_make(sizeof(long), 0);
    buf_ch = mote_chan_make(sizeof(long), 0);
    enum { EACH = 8 };
    void (*kinds[])(void *) = {k_cond, k_wg, k_select, k_send};
    int nk = (int)(sizeof kinds / sizeof *kinds);
    mote_wg_add(&wg_gate, 1);
    mote_wg_add(&kinds_parked, nk * EACH);
    mote_wg_add(&kinds_done, (nk + 1) * EACH);
    for (int k = 0; k < nk; k++)
        for (int i = 0; i < EACH; i++)
            CHECK_EQ(mote_go(kinds[k], NULL), 0);
    mote_wg_wait(&kinds_parked);
    /* once the cond waiters have let go of the mutex, main takes it and
     * the mutex waiters queue behind it */
    mote_mutex_lock(&mu);
    mote_wg_add(&kinds_parked, EACH);
    for (int i = 0; i < EACH; i++)
        CHECK_EQ(mote_go(k_mutex, NULL), 0);
    mote_wg_wait(&kinds_parked);
    CHECK(wait_frozen((uint64_t)(nk + 1) * EACH));
    uint64_t faults0 = metric("/stacks/thaws/fault:events");
    uint64_t runtime0 = metric("/stacks/thaws/runtime:events");
    cv_go = 1;
    mote_cond_broadcast(&cv);
    mote_mutex_unlock(&mu);
    mote_wg_done(&wg_gate);
    for (int i = 0; i < EACH; i++) {
        long v;
        CHECK_EQ(mote_chan_send(i & 1 ? sel_b : sel_a, &(long){i & 1 ? 22 : 11}), 0);
        CHECK_EQ(mote_chan_recv(buf_ch, &v), 0);
        CHECK_EQ(v, 33);
    }
    mote_wg_wait(&kinds_done);
    CHECK_EQ(atomic_load(&kinds_bad), 0);
    /* every hand-off into a frozen frame thawed it first, explicitly */
    if (OWN_THAWS_ONLY)
        CHECK_EQ(metric("/stacks/thaws/fault:events"), faults0);
    CHECK(metric("/stacks/thaws/runtime:events") > runtime0);
    mote_chan_free(sel_a);
    mote_chan_free(sel_b);
    mote_chan_free(buf_ch);
}

/* ---- a timer wakes a frozen sleeper: thawed before it runs ---- */

static atomic_int sleeper_go, sleeper_done;
static void sleeper(void *arg)
{
    (void)arg;
    volatile long mark = 0x5678;
    while (!atomic_load(&sleeper_go))
        mote_sleep(100 * MS);
    CHECK_EQ(mark, 0x5678);
    atomic_store(&sleeper_done, 1);
}

TEST_TASK(a_timer_wakes_a_frozen_sleeper)
{
    NEED_FREEZING();
    CHECK_EQ(mote_go(sleeper, NULL), 0);
    CHECK(wait_frozen(1));
    uint64_t resume0 = metric("/stacks/thaws/resume:events");
    atomic_store(&sleeper_go, 1);
    while (!atomic_load(&sleeper_done))
        mote_sleep(5 * MS);
    CHECK(metric("/stacks/thaws/resume:events") > resume0);
}

/* ---- 3. writes racing freezes are never lost ---- */

/* Tasks sleep past the threshold again and again (so they are frozen and
 * thawed over and over) while threads store into their stacks without
 * pause: each writer owns one word of each task's frame and checks on
 * every store that the word still holds its previous value; one more
 * thread makes the kernel store into the frames, through read() from a
 * pipe.  A lost store shows as a word that went back in time. */
#define HAM_TASKS   16
#define HAM_WRITERS 2

typedef struct ham_frame {
    volatile uint64_t word[HAM_WRITERS];
    volatile uint64_t kernel[8];
    volatile uint64_t own;
} ham_frame;

static ham_frame *_Atomic ham_frames[HAM_TASKS];
static atomic_int ham_stop;
static atomic_long ham_lost, ham_kernel_stores, ham_user_stores, ham_cycles;
static mote_chan *ham_exit;

static void ham_task(void *arg)
{
    long id = (long)(intptr_t)arg;
    ham_frame f;
    memset((void *)&f, 0, sizeof f);
    atomic_store(&ham_frames[id], &f);
    uint64_t n = 0;
    while (!atomic_load(&ham_stop)) {
        f.own = ++n;
        /* Past the threshold, so frozen meanwhile.  The writers thaw each
         * freeze at once, so the runtime doubles this task's threshold
         * after each (freeze.c); the sleep doubles with it, up to 64x. */
        mote_sleep((35 * MS) << (n - 1 < 6 ? n - 1 : 6));
        if (f.own != n)
            atomic_fetch_add(&ham_lost, 1);
        atomic_fetch_add(&ham_cycles, 1);
    }
    /* the frame stays until every writer has been joined */
    mote_chan_recv(ham_exit, NULL);
    atomic_store(&ham_frames[id], NULL);
}

static void *ham_writer(void *arg)
{
    int me = (int)(intptr_t)arg;
    uint64_t last[HAM_TASKS] = {0};
    while (!atomic_load(&ham_stop)) {
        for (int i = 0; i < HAM_TASKS; i++) {
            ham_frame *f = atomic_load(&ham_frames[i]);
            if (!f)
                continue;
            if (f->word[me] != last[i])
                atomic_fetch_add(&ham_lost, 1);
            f->word[me] = ++last[i];
            atomic_fetch_add_explicit(&ham_user_stores, 1, memory_order_relaxed);
        }
    }
    return NULL;
}

static void *ham_kernel(void *arg)
{
    (void)arg;
    int p[2];
    CHECK_EQ(pipe(p), 0);
    uint64_t seq = 0;
    while (!atomic_load(&ham_stop)) {
        for (int i = 0; i < HAM_TASKS; i++) {
            ham_frame *f = atomic_load(&ham_frames[i]);
            if (!f)
                continue;
            uint64_t v[8];
            seq++;
            for (int k = 0; k < 8; k++)
                v[k] = seq;
            CHECK_EQ(write(p[1], v, sizeof v), (ssize_t)sizeof v);
            /* the kernel's copy into a frozen frame waits for the thaw */
            CHECK_EQ(read(p[0], (void *)f->kernel, sizeof v), (ssize_t)sizeof v);
            for (int k = 0; k < 8; k++)
                if (f->kernel[k] != seq)
                    atomic_fetch_add(&ham_lost, 1);
            atomic_fetch_add_explicit(&ham_kernel_stores, 1, memory_order_relaxed);
        }
    }
    close(p[0]);
    close(p[1]);
    return NULL;
}

TEST_TASK(writes_racing_freezes_are_never_lost)
{
    NEED_FREEZING();
    ham_exit = mote_chan_make(0, 0);
    for (long i = 0; i < HAM_TASKS; i++)
        CHECK_EQ(mote_go(ham_task, (void *)(intptr_t)i), 0);
    mote_sleep(10 * MS);
    pthread_t th[HAM_WRITERS + 1];
    for (int i = 0; i < HAM_WRITERS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, ham_writer, (void *)(intptr_t)i), 0);
    CHECK_EQ(pthread_create(&th[HAM_WRITERS], NULL, ham_kernel, NULL), 0);
    uint64_t f0 = metric("/stacks/freeze/freezes:events");
    int64_t t0 = mote_now();
    /* 2 s, or longer until enough freezes happened on a loaded machine */
    while (mote_now() - t0 < 2000 * MS ||
           (metric("/stacks/freeze/freezes:events") - f0 < 50 &&
            mote_now() - t0 < 20000 * MS))
        mote_sleep(50 * MS);
    atomic_store(&ham_stop, 1);
    for (int i = 0; i <= HAM_WRITERS; i++)
        pthread_join(th[i], NULL);
    mote_chan_close(ham_exit);
    uint64_t freezes = metric("/stacks/freeze/freezes:events") - f0;
    printf(
        "%llu freezes (%llu cancelled), %llu fault thaws, %ld task cycles, %ld user and "
        "%ld kernel stores, %ld lost\n",
        (unsigned long long)freezes,
        (unsigned long long)metric("/stacks/freeze/cancelled:events"),
        (unsigned long long)metric("/stacks/thaws/fault:events"),
        atomic_load(&ham_cycles), atomic_load(&ham_user_stores),
        atomic_load(&ham_kernel_stores), atomic_load(&ham_lost));
    CHECK_EQ(atomic_load(&ham_lost), 0);
    CHECK(freezes >= 10);
    CHECK(metric("/stacks/thaws/fault:events") > 0);
    CHECK(atomic_load(&ham_kernel_stores) > 0);
    while (metric("/tasks/live:tasks") > 1)
        mote_sleep(MS);
    mote_chan_free(ham_exit);
}

/* ---- 4. a system call writing into a frozen stack waits for the thaw ---- */

static char *_Atomic sys_buf;
static mote_chan *sys_ch;

static void sys_task(void *arg)
{
    (void)arg;
    char buf[256];
    memset(buf, 'x', sizeof buf);
    atomic_store(&sys_buf, buf);
    mote_chan_recv(sys_ch, NULL);
    CHECK(memcmp(buf, "written by the kernel", 21) == 0);
    CHECK_EQ(buf[21], 'x');
}

static void *sys_thread(void *arg)
{
    int *p = arg;
    return (void *)(intptr_t)read(p[0], atomic_load(&sys_buf), 21);
}

TEST_TASK(a_system_call_into_a_frozen_stack_waits_for_the_thaw)
{
    NEED_FREEZING();
    sys_ch = mote_chan_make(0, 0);
    CHECK_EQ(mote_go(sys_task, NULL), 0);
    while (!atomic_load(&sys_buf))
        mote_sleep(MS);
    CHECK(wait_frozen(1));
    uint64_t faults0 = metric("/stacks/thaws/fault:events");
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK_EQ(write(p[1], "written by the kernel", 21), 21);
    pthread_t th;
    void *r;
    CHECK_EQ(pthread_create(&th, NULL, sys_thread, p), 0);
    pthread_join(th, &r);
    CHECK_EQ((intptr_t)r, 21); /* not -1/EFAULT */
    CHECK_EQ(metric("/stacks/thaws/fault:events"), faults0 + 1);
    CHECK_EQ(mote_chan_send(sys_ch, NULL), 0);
    mote_sleep(10 * MS);
    close(p[0]);
    close(p[1]);
    mote_chan_free(sys_ch);
}

/* ---- 5. diagnostics read frozen stacks without thawing them ---- */

static mote_chan *diag_ch;

static __attribute__((noinline)) void diag_parked_here(void)
{
    mote_chan_recv(diag_ch, NULL);
    __asm__ volatile("" ::: "memory"); /* not a tail call */
}

static void diag_task(void *arg)
{
    (void)arg;
    diag_parked_here();
}

TEST_TASK(a_dump_reads_frozen_stacks_without_thawing)
{
    NEED_FREEZING();
    diag_ch = mote_chan_make(0, 0);
    mote_task_opts o = MOTE_TASK_OPTS_INIT;
    o.name = "iced";
    CHECK_EQ(mote_go_ex(diag_task, NULL, &o), 0);
    CHECK(wait_frozen(1));
    uint64_t thaws0 = metric("/stacks/thaws:events");
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK(fcntl(p[0], F_SETPIPE_SZ, 1 << 20) > 0);
    CHECK_EQ(mote_tasks_dump(p[1]), 0);
    close(p[1]);
    static char out[1 << 16];
    ssize_t n = read(p[0], out, sizeof out - 1);
    close(p[0]);
    CHECK(n > 0);
    out[n] = 0;
    CHECK(strstr(out, "(iced)"));
    CHECK(strstr(out, "stack frozen"));
    CHECK(strstr(out, "diag_parked_here"));
    CHECK_EQ(metric("/stacks/thaws:events"), thaws0);
    CHECK_EQ(mote_chan_send(diag_ch, NULL), 0);
    mote_chan_free(diag_ch);
}

/* ---- 6. a run that ends with frozen tasks, and the next run ---- */

static void forever(void *arg)
{
    (void)arg;
    mote_sleep(3600 * 1000 * MS); /* discarded when main returns */
}

/* Parked with a wait record on its stack: the end of the run reads the
 * record, which thaws the stack on the handler thread, while it goes on to
 * destroy the task (a task was once freed under that thaw). */
static mote_chan *end_ch;
static int end_pipe[2];
static void forever_on_a_channel(void *arg)
{
    (void)arg;
    mote_chan_recv(end_ch, NULL);
}
static void forever_on_a_pipe(void *arg)
{
    (void)arg;
    char c;
    mote_read(end_pipe[0], &c, 1, -1);
}

static void ends_frozen_main(void *arg)
{
    if ((*(const char **)arg = not_freezing()))
        return;
    for (int i = 0; i < 100; i++)
        CHECK_EQ(mote_go(i % 3 == 0   ? forever
                         : i % 3 == 1 ? forever_on_a_channel
                                      : forever_on_a_pipe,
                         NULL),
                 0);
    CHECK(wait_frozen(100));
}

TEST(runs_end_with_frozen_tasks_and_start_again)
{
    CHECK((end_ch = mote_chan_make(0, 0)) != NULL);
    CHECK_EQ(pipe2(end_pipe, O_CLOEXEC), 0);
    uint64_t inuse = 0;
    for (int run = 0; run < 11; run++) {
        const char *why = NULL;
        CHECK_EQ(mote_run(ends_frozen_main, &why), 0);
        if (why) { /* no run would end with a frozen task */
            CHECK_EQ(mote_chan_free(end_ch), 0);
            mote_close(end_pipe[0]);
            close(end_pipe[1]);
            TEST_SKIP(why);
        }
        CHECK_EQ(metric("/stacks/frozen:tasks"), 0);
        CHECK_EQ(metric("/stacks/frozen:bytes"), 0);
        if (run == 0) {
            mote_mem_release(); /* (this thread's stashes count as in use) */
            inuse = metric("/heap/inuse:bytes");
        }
    }
    mote_mem_release();
    /* Nothing a run's thaws used stays behind: each thread that thawed
     * kept a 68 KiB buffer, lost with the run's threads (80 KiB a run, 800
     * in these 10).  A few such buffers are kept for the process. */
    int64_t grew = (int64_t)(metric("/heap/inuse:bytes") - inuse);
    if (grew > 256 * 1024)
        fprintf(stderr, "the heap grew by %lld bytes in 10 runs\n", (long long)grew);
    CHECK(grew <= 256 * 1024);
    CHECK_EQ(mote_chan_free(end_ch), 0);
    mote_close(end_pipe[0]);
    close(end_pipe[1]);
}

/* ---- 6b. a thawed stack grows through its absent pages in few round trips ---- */

/* A freeze drops every page of the stack below the live ones, and a thaw
 * brings back only the live ones: a thawed task that then calls deep
 * faults on each page of its new frame in turn, through the freezer's
 * handler thread.  A run of such faults is filled more pages at a time. */
#define GROW_N     32
#define GROW_BYTES (48 * 1024)
static mote_chan *grow_ch;
static mote_wg grow_parked = MOTE_WG_INIT, grow_done = MOTE_WG_INIT;
static atomic_long grow_bad;

static __attribute__((noinline)) void grow_deep(long id)
{
    volatile unsigned char buf[GROW_BYTES];
    /* top down, a page at a time, as a probed frame touches its pages
     * (odd offsets: the second pattern, at multiples of 512, misses them) */
    for (long i = GROW_BYTES - 1; i >= 0; i -= 4096)
        buf[i] = (unsigned char)(id + i / 4096);
    for (long i = 0; i < GROW_BYTES; i += 512)
        buf[i] = (unsigned char)(id ^ i);
    for (long i = GROW_BYTES - 1; i >= 0; i -= 4096)
        if (buf[i] != (unsigned char)(id + i / 4096))
            atomic_fetch_add(&grow_bad, 1);
    for (long i = 0; i < GROW_BYTES; i += 512)
        if (buf[i] != (unsigned char)(id ^ i))
            atomic_fetch_add(&grow_bad, 1);
}

static void grow_task(void *arg)
{
    long id = (long)(intptr_t)arg;
    mote_wg_done(&grow_parked);
    if (mote_chan_recv(grow_ch, NULL) != MOTE_ECLOSED)
        atomic_fetch_add(&grow_bad, 1);
    grow_deep(id);
    mote_wg_done(&grow_done);
}

TEST_TASK(a_thawed_stack_grows_deep_in_few_round_trips)
{
    NEED_FREEZING();
    grow_ch = mote_chan_make(0, 0);
    mote_task_opts o = MOTE_TASK_OPTS_INIT;
    o.stack_size = 128 * 1024;
    mote_wg_add(&grow_parked, GROW_N);
    mote_wg_add(&grow_done, GROW_N);
    for (long i = 0; i < GROW_N; i++)
        CHECK_EQ(mote_go_ex(grow_task, (void *)(intptr_t)i, &o), 0);
    mote_wg_wait(&grow_parked);
    CHECK(wait_frozen(GROW_N));
    uint64_t stray0 = metric("/stacks/freeze/stray-faults:events");
    mote_chan_close(grow_ch); /* every task thaws, then calls deep */
    mote_wg_wait(&grow_done);
    CHECK_EQ(atomic_load(&grow_bad), 0);
    uint64_t stray = metric("/stacks/freeze/stray-faults:events") - stray0;
    /* 12 pages each: one round trip a page would be 384 (and was); runs
     * of 1, 4 and 16 pages take 3 or 4 (a sanitizer may put the frame
     * off the stack: then none) */
    printf("%d tasks grew %d KiB each after a thaw: %llu stray faults\n", GROW_N,
           GROW_BYTES / 1024, (unsigned long long)stray);
    CHECK(stray <= (uint64_t)GROW_N * 5);
    mote_chan_free(grow_ch);
}

/* ---- 7. a frozen task's guard still guards ---- */

static mote_chan *deep_ch;
static __attribute__((noinline)) int recurse(int n)
{
    volatile char pad[1024];
    pad[0] = (char)n;
    return n ? recurse(n - 1) + pad[0] : 0;
}

static void deep_task(void *arg)
{
    (void)arg;
    mote_chan_recv(deep_ch, NULL);
    recurse(1 << 20); /* far past its 64 KiB: the guard must stop it */
}

static void deep_main(void *arg)
{
    (void)arg;
    const char *why = not_freezing();
    if (why) {
        fprintf(stderr, "%s", why);
        _exit(77);
    }
    deep_ch = mote_chan_make(0, 0);
    mote_task_opts o = MOTE_TASK_OPTS_INIT;
    o.stack_size = 64 * 1024;
    o.name = "overflower";
    /* enough neighbours for its 2 MiB window to be emptied whole */
    for (int i = 0; i < 64; i++)
        CHECK_EQ(mote_go_ex(forever, NULL, &o), 0);
    CHECK_EQ(mote_go_ex(deep_task, NULL, &o), 0);
    for (int i = 0; i < 64; i++)
        CHECK_EQ(mote_go_ex(forever, NULL, &o), 0);
    CHECK(wait_frozen(129));
    CHECK(metric("/stacks/freeze/windows:events") > 0);
    mote_chan_send(deep_ch, NULL);
    mote_sleep(10000 * MS);
    _exit(3); /* not reached: the overflow ends the process */
}

TEST(a_frozen_task_that_overflows_later_is_still_caught)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        int r = mote_run(deep_main, NULL);
        (void)r;
        _exit(4);
    }
    close(p[1]);
    static char out[8192];
    size_t n = 0;
    ssize_t r;
    while (n + 1 < sizeof out && (r = read(p[0], out + n, sizeof out - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = 0;
    close(p[0]);
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
        TEST_SKIP(out); /* the child's reason */
    /* under a sanitizer the process may end by exit, not by the signal */
    bool caught =
        TEST_SANITIZED ? !WIFEXITED(st) || WEXITSTATUS(st) < 3 : WIFSIGNALED(st);
    if (!caught)
        fprintf(stderr, "the child's status %#x, and what it said:\n%s", st, out);
    CHECK(caught);
    CHECK(strstr(out, "overflow"));
    CHECK(strstr(out, "overflower"));
}

/* ---- 8. off, and why ---- */

static void off_main(void *arg)
{
    (void)arg;
    CHECK_EQ(metric("/stacks/freeze/mode:enum"), 0);
    CHECK_EQ(metric("/stacks/freeze/off-reason:enum"), 1); /* configured off */
    CHECK_EQ(mote_go(forever, NULL), 0);
    mote_sleep(100 * MS);
    CHECK_EQ(metric("/stacks/frozen:tasks"), 0);
}

static void trim_off_main(void *arg)
{
    (void)arg;
    CHECK_EQ(metric("/stacks/freeze/mode:enum"), 0);
    CHECK_EQ(metric("/stacks/freeze/off-reason:enum"), 6); /* the trim is off */
}

TEST(off_when_configured_off_and_the_metric_says_why)
{
    setenv("MOTE_STACK_FREEZE", "off", 1);
    CHECK_EQ(mote_run(off_main, NULL), 0);
    /* asked for, but the trim that freezes is off: the metric says so (it
     * said "MOTE_STACK_FREEZE=off"), and so does stderr */
    setenv("MOTE_STACK_FREEZE", "1ms", 1);
    CHECK_EQ(test_run_env("MOTE_STACK_TRIM", "off", trim_off_main, NULL), 0);
    setenv("MOTE_STACK_FREEZE", "bogus", 1);
    CHECK_EQ(mote_run(off_main, NULL), -EINVAL);
}

/* ---- 9. a plain thread wakes tasks whose freezes come and go ---- */

/* Plain-thread trysends to tasks that park past a 1 ms threshold between
 * sends: a thaw that found a freeze giving way waited for the task to be
 * active, but another freeze could take it first, and the thaw then spun
 * for good on a frozen task, holding the channel's lock (a hostile review:
 * 7 runs in 8). */
enum { RE_N = 1024, RE_ROUNDS = 20 };
static mote_chan *re_ch[RE_N];
static mote_wg re_wg = MOTE_WG_INIT;
static atomic_int re_bad;

static void re_receiver(void *arg)
{
    int k = (int)(intptr_t)arg;
    for (int i = 0; i < RE_ROUNDS; i++) {
        int64_t v[16];
        if (mote_chan_recv(re_ch[k], v) != 0 || v[0] != i)
            atomic_fetch_add(&re_bad, 1);
    }
    mote_wg_done(&re_wg);
}

static void *re_sender(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < RE_ROUNDS; i++) {
        usleep(2000 + (useconds_t)(rand_r(&seed) % 2000)); /* receivers park past 1 ms */
        for (int k = 0; k < RE_N; k++) {
            int64_t v[16] = {i};
            while (mote_chan_trysend(re_ch[k], v) == -EAGAIN)
                usleep(50);
        }
    }
    return NULL;
}

static atomic_int re_done;

/* Keeps the deadlock detector quiet until the plain thread first wakes a
 * task (mote.h: only then does it know that one will). */
static void re_ticker(void *arg)
{
    (void)arg;
    while (!atomic_load(&re_done))
        mote_sleep(MS);
}

static void refreeze_main(void *arg)
{
    (void)arg;
    NEED_FREEZING();
    atomic_store(&re_done, 0);
    CHECK_EQ(mote_go(re_ticker, NULL), 0);
    for (int rep = 0; rep < 4; rep++) {
        for (int k = 0; k < RE_N; k++)
            CHECK((re_ch[k] = mote_chan_make(16 * sizeof(int64_t), 0)) != NULL);
        CHECK_EQ(mote_wg_add(&re_wg, RE_N), 0);
        for (int k = 0; k < RE_N; k++)
            CHECK_EQ(mote_go(re_receiver, (void *)(intptr_t)k), 0);
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, re_sender, (void *)(uintptr_t)(rep + 1)), 0);
        CHECK_EQ(mote_wg_wait(&re_wg), 0);
        CHECK_EQ(pthread_join(t, NULL), 0);
        for (int k = 0; k < RE_N; k++)
            CHECK_EQ(mote_chan_free(re_ch[k]), 0);
    }
    atomic_store(&re_done, 1);
    CHECK_EQ(atomic_load(&re_bad), 0);
}

TEST(a_thaw_from_a_plain_thread_outlasts_freezes_that_come_and_go)
{
    alarm(120); /* the hang spun for good */
    CHECK_EQ(test_run_env("MOTE_STACK_FREEZE", "1ms", refreeze_main, NULL), 0);
    alarm(0);
}

/* ---- 10. a task thawed in place, still parked, freezes again ---- */

/* A task that parks on a channel writes its link into the record of the
 * task parked before it (the queue's tail, on that one's frozen stack): the
 * runtime thaws that one in place, and it stays parked.  It must freeze
 * again: it used to stay resident until it next ran (the one task in
 * thousands that the idle tests found unfrozen on a loaded machine, when
 * a spawn came more than a threshold after the one before). */
static mote_chan *nb_ch;
static mote_wg nb_parked = MOTE_WG_INIT, nb_done = MOTE_WG_INIT;

static void nb_waiter(void *arg)
{
    (void)arg;
    long v = 0;
    mote_wg_done(&nb_parked);
    CHECK_EQ(mote_chan_recv(nb_ch, &v), 0);
    CHECK_EQ(v, 7);
    mote_wg_done(&nb_done);
}

static void nb_spawn(void)
{
    CHECK_EQ(mote_wg_add(&nb_parked, 1), 0);
    CHECK_EQ(mote_go(nb_waiter, NULL), 0);
    CHECK_EQ(mote_wg_wait(&nb_parked), 0);
}

TEST_TASK(a_task_thawed_in_place_freezes_again)
{
    NEED_FREEZING();
    CHECK((nb_ch = mote_chan_make(sizeof(long), 0)) != NULL);
    CHECK_EQ(mote_wg_add(&nb_done, 2), 0);
    nb_spawn();
    CHECK(wait_frozen(1));
    uint64_t runtime0 = metric("/stacks/thaws/runtime:events");
    nb_spawn(); /* parks behind the first: writes into its record */
    int64_t t0 = mote_now();
    while (metric("/stacks/thaws/runtime:events") == runtime0 &&
           mote_now() - t0 < 30000 * MS)
        mote_sleep(MS);
    CHECK(metric("/stacks/thaws/runtime:events") > runtime0);
    /* both, the first again: not only the second */
    CHECK(wait_frozen(2));
    for (int i = 0; i < 2; i++)
        CHECK_EQ(mote_chan_send(nb_ch, &(long){7}), 0);
    CHECK_EQ(mote_wg_wait(&nb_done), 0);
    CHECK_EQ(metric("/stacks/frozen:tasks"), 0);
    CHECK_EQ(mote_chan_free(nb_ch), 0);
}

/* ---- a live stack page the task never wrote ----
 * A large local left alone spans pages that were never written: missing,
 * not zero-filled.  The freezer read them and faulted to the handler,
 * which leaves a freezing task's faults to its freezer: the worker hung
 * for good (any program with an untouched 8 KiB local that parked long
 * enough, at the default threshold). */

static mote_chan *ut_ch;
static atomic_int ut_ok;

static __attribute__((noinline)) void ut_parked(unsigned char *buf, size_t n)
{
    __asm__ volatile("" : : "r"(buf) : "memory");
    long v = 0;
    int r = mote_chan_recv(ut_ch, &v);
    atomic_store(&ut_ok, r == 0 && v == 42 && buf[0] == 0xa5 && buf[n - 1] == 0x5a);
}

/* (gcc: without the build's stack-clash probes, which write every page of
 * a frame; clang has no per-function switch, and probes) */
#if defined(__GNUC__) && !defined(__clang__)
#define UT_NO_PROBES __attribute__((optimize("no-stack-clash-protection")))
#else
#define UT_NO_PROBES
#endif
static UT_NO_PROBES void ut_task(void *arg)
{
    (void)arg;
    unsigned char buf[4 * 4096]; /* its middle pages are never written */
    buf[0] = 0xa5;
    buf[sizeof buf - 1] = 0x5a;
    ut_parked(buf, sizeof buf);
}

TEST_TASK(a_stack_page_never_written_freezes_and_thaws)
{
    NEED_FREEZING();
    CHECK((ut_ch = mote_chan_make(sizeof(long), 0)) != NULL);
    CHECK_EQ(mote_go(ut_task, NULL), 0);
    CHECK(wait_frozen(1));
    CHECK_EQ(mote_chan_send(ut_ch, &(long){42}), 0);
    int64_t t0 = mote_now();
    while (!atomic_load(&ut_ok) && mote_now() - t0 < 30000 * MS)
        mote_sleep(MS);
    CHECK(atomic_load(&ut_ok));
    CHECK_EQ(mote_chan_free(ut_ch), 0);
}

/* Many such tasks, beside tasks whose every page is written, freeze in
 * the same batches: the pagemap entries read for one candidate serve its
 * neighbours (a window over the batch), and each must get its own pages'. */
enum { UN_TASKS = 64, UN_BYTES = 4 * 4096 };
static atomic_int un_ok;

static __attribute__((noinline)) void un_parked(unsigned char *buf, intptr_t i)
{
    __asm__ volatile("" : : "r"(buf) : "memory");
    long v = 0;
    if (mote_chan_recv(ut_ch, &v) != 0 || v != 42)
        return;
    bool ok = buf[0] == (unsigned char)i && buf[UN_BYTES - 1] == (unsigned char)~i;
    if (i % 2)
        for (size_t k = 1; k < UN_BYTES - 1; k++)
            ok &= buf[k] == (unsigned char)(i + k);
    atomic_fetch_add(&un_ok, ok);
}

static UT_NO_PROBES void un_task(void *arg)
{
    intptr_t i = (intptr_t)arg;
    unsigned char buf[UN_BYTES];
    if (i % 2) /* every page written */
        for (size_t k = 0; k < UN_BYTES; k++)
            buf[k] = (unsigned char)(i + k);
    buf[0] = (unsigned char)i;
    buf[UN_BYTES - 1] = (unsigned char)~i;
    un_parked(buf, i);
}

TEST_TASK(neighbours_with_and_without_unwritten_pages_freeze_together)
{
    NEED_FREEZING();
    CHECK((ut_ch = mote_chan_make(sizeof(long), 0)) != NULL);
    for (intptr_t i = 0; i < UN_TASKS; i++)
        CHECK_EQ(mote_go(un_task, (void *)i), 0);
    CHECK(wait_frozen(UN_TASKS));
    for (int i = 0; i < UN_TASKS; i++)
        CHECK_EQ(mote_chan_send(ut_ch, &(long){42}), 0);
    int64_t t0 = mote_now();
    while (atomic_load(&un_ok) < UN_TASKS && mote_now() - t0 < 30000 * MS)
        mote_sleep(MS);
    CHECK_EQ(atomic_load(&un_ok), UN_TASKS);
    CHECK_EQ(mote_chan_free(ut_ch), 0);
}

/* ---- a signal handler that touches parked tasks' stacks ----
 *
 * A program's handler stores through pointers to parked tasks' locals
 * while a thread sends the signal to every thread, so it often lands on a
 * worker in the middle of a freeze batch or a thaw.  Faults on a task
 * being frozen wait for its freezer: a handler run by the freezer itself
 * waited on itself, and the process hung (6 runs in 6).  No store may be
 * lost either. */

#define SIG_N TEST_SCALE(1000, 8)
static _Atomic(_Atomic uint64_t *) sig_ptrs[1000];
static atomic_ulong sig_sent, sig_hits, sig_sum;
static atomic_int sig_stop, sig_inflight;
static mote_wg sig_done = MOTE_WG_INIT;

static void sig_touch(int sig)
{
    (void)sig;
    /* in flight before it looks: a sleeper that saw none after clearing
     * its pointer knows no handler still holds it */
    atomic_fetch_add(&sig_inflight, 1);
    unsigned long k = atomic_fetch_add(&sig_sent, 1);
    _Atomic uint64_t *p = atomic_load(&sig_ptrs[(k * 2654435761u) % SIG_N]);
    if (p) {
        atomic_fetch_add(p, 1);
        atomic_fetch_add(&sig_hits, 1);
    }
    atomic_fetch_sub(&sig_inflight, 1);
}

static void sig_sleeper(void *arg)
{
    long i = (long)(intptr_t)arg;
    _Atomic uint64_t counter = 0;
    atomic_store(&sig_ptrs[i], &counter);
    unsigned seed = (unsigned)i;
    while (!atomic_load(&sig_stop))
        mote_sleep((2 + rand_r(&seed) % 30) * MS);
    atomic_store(&sig_ptrs[i], NULL);
    /* A handler on another thread may have read the pointer just before:
     * its store must land before the count is read (CI's gcc ASan suite
     * once summed 716 of 717 hits). */
    while (atomic_load(&sig_inflight) != 0)
        mote_yield();
    atomic_fetch_add(&sig_sum, atomic_load(&counter));
    mote_wg_done(&sig_done);
}

static void *sig_sender(void *arg)
{
    (void)arg;
    pid_t pid = getpid(), me = (pid_t)syscall(SYS_gettid);
    while (!atomic_load(&sig_stop)) {
        DIR *d = opendir("/proc/self/task");
        if (!d)
            break;
        struct dirent *e;
        while ((e = readdir(d))) {
            pid_t t = atoi(e->d_name);
            if (t > 0 && t != me)
                syscall(SYS_tgkill, pid, t, SIGUSR1);
        }
        closedir(d);
        usleep(20);
    }
    return NULL;
}

static void main_signals(void *arg)
{
    (void)arg;
    NEED_FREEZING();
    struct sigaction sa = {.sa_handler = sig_touch, .sa_flags = SA_RESTART}, old;
    CHECK_EQ(sigaction(SIGUSR1, &sa, &old), 0);
    CHECK_EQ(mote_wg_add(&sig_done, SIG_N), 0);
    for (long i = 0; i < SIG_N; i++)
        CHECK_EQ(mote_go(sig_sleeper, (void *)(intptr_t)i), 0);
    uint64_t fz0 = metric("/stacks/freeze/freezes:events");
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, sig_sender, NULL), 0);
    mote_sleep(TEST_SANITIZED ? 1000 * MS : 2000 * MS);
    atomic_store(&sig_stop, 1);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(mote_wg_wait(&sig_done), 0);
    /* signals still pending here are delivered before the handler goes */
    CHECK_EQ(sigaction(SIGUSR1, &old, NULL), 0);
    uint64_t freezes = metric("/stacks/freeze/freezes:events") - fz0;
    printf("%lu signals, %lu stores into parked stacks, %llu freezes meanwhile\n",
           atomic_load(&sig_sent), atomic_load(&sig_hits), (unsigned long long)freezes);
    CHECK(freezes > 0 && atomic_load(&sig_hits) > 0);
    CHECK_EQ(atomic_load(&sig_sum), atomic_load(&sig_hits)); /* no store lost */
}

TEST(a_signal_handler_touching_parked_stacks_never_hangs_a_freeze)
{
    CHECK_EQ(test_run_env("MOTE_STACK_FREEZE", "1ms", main_signals, NULL), 0);
}

/* ---- a thaw when the heap has nothing left ----
 *
 * A thaw copies the image through a 68 KiB buffer from the heap.  With
 * the heap at MOTE_MEMLIMIT, that allocation failed, the image was freed
 * all the same and the task ran on zero pages: its frames were gone and
 * the process crashed (8 runs in 8). */

#define MEM_N TEST_SCALE(500, 5)
static uint32_t *mem_locs[500];
static mote_chan *mem_gate;
static mote_wg mem_done = MOTE_WG_INIT;
static atomic_int mem_bad;

static void mem_task(void *arg)
{
    uint32_t id = (uint32_t)(uintptr_t)arg, s = id * 2654435761u + 1;
    uint32_t loc[256];
    for (int i = 0; i < 256; i++)
        loc[i] = s + (uint32_t)i;
    mem_locs[id] = loc;
    mote_chan_recv(mem_gate, NULL);
    for (int i = 0; i < 256; i++)
        if (loc[i] != s + (uint32_t)i) {
            atomic_fetch_add(&mem_bad, 1);
            break;
        }
    mote_wg_done(&mem_done);
}

static void *mem_reader(void *arg)
{
    (void)arg;
    uint64_t x = 0;
    for (int i = MEM_N - 1; i >= 0; i--)
        x += mem_locs[i][3]; /* a fault on a frozen stack: a thaw */
    return (void *)(uintptr_t)x;
}

static void main_full_heap(void *arg)
{
    (void)arg;
    NEED_FREEZING();
    mem_gate = mote_chan_make(0, 0);
    CHECK_EQ(mote_wg_add(&mem_done, MEM_N), 0);
    for (long i = 0; i < MEM_N; i++)
        CHECK_EQ(mote_go(mem_task, (void *)(intptr_t)i), 0);
    CHECK(wait_frozen(MEM_N));
    /* (the heap read MOTE_MEMLIMIT when this process first allocated) */
    CHECK_EQ(mote__heap_set_limit(mote__heap_committed_bytes() + (32u << 20)), 0);
    /* fill the heap to its limit, the biggest blocks first (those a
     * thaw's buffer is) */
    static void *keep[200000];
    size_t nk = 0, sizes[] = {69632, 16384, 1024, 64};
    for (int z = 0; z < 4; z++)
        while (nk < sizeof keep / sizeof *keep) {
            void *p = z ? mote_malloc(sizes[z]) : mote_aligned_alloc(4096, sizes[z]);
            if (!p)
                break;
            memset(p, 1, sizes[z]);
            keep[nk++] = p;
        }
    void *probe = mote_aligned_alloc(4096, 69632);
    CHECK(probe == NULL); /* no room for a thaw's buffer */
    pthread_t t[2];
    for (int k = 0; k < 2; k++)
        CHECK_EQ(pthread_create(&t[k], NULL, mem_reader, NULL), 0);
    mote_chan_close(mem_gate);
    for (int k = 0; k < 2; k++)
        CHECK_EQ(pthread_join(t[k], NULL), 0);
    CHECK_EQ(mote_wg_wait(&mem_done), 0);
    CHECK_EQ(atomic_load(&mem_bad), 0);
    while (nk)
        mote_free(keep[--nk]);
    CHECK_EQ(mote__heap_set_limit(0), 0);
}

TEST(a_thaw_with_the_heap_at_its_limit_brings_the_stack_back)
{
    if (TEST_SANITIZED)
        TEST_SKIP(
            "under a sanitizer, whose own allocations are not under the heap's limit");
    CHECK_EQ(test_run_env("MOTE_STACK_FREEZE", "10ms", main_full_heap, NULL), 0);
}

/* ---- images freed on one worker, allocated on another that sleeps ---- */

/* A frozen task's image comes from the heap cache of the worker that froze
 * it, and is freed by the worker that thaws it.  Freed on the other
 * worker, it goes home to the first, which takes it in at its next malloc
 * slow path.  An outside test saw 900 MB of images of 200,000 exited tasks
 * stay in use until the run ended, mote_mem_release or not: the owner
 * slept.  A worker now settles its frees before it sleeps, and wakes the
 * sleepers that frees wait for (the heap's part is tested in
 * test_heap2_handoff.c).  This case is the end to end check: with 4,000
 * tasks, the old code's housekeeping wake-ups took the images in within a
 * second too, so it would not have caught that defect; it catches images
 * that never go back. */
#define IMAGES_N     (TEST_SANITIZED ? 400 : 4000)
#define IMAGES_FRAME 8192
static mote_chan *images_gate;
static mote_wg images_done = MOTE_WG_INIT;

static void images_task(void *arg)
{
    (void)arg;
    volatile char *buf = __builtin_alloca(IMAGES_FRAME);
    for (int i = 0; i < IMAGES_FRAME; i += 512)
        buf[i] = (char)i;
    mote_chan_recv(images_gate, NULL);
    buf[0] = 2;
    mote_wg_done(&images_done);
}

TEST_TASK(images_freed_on_another_worker_go_back_while_it_sleeps)
{
    NEED_FREEZING();
    images_gate = mote_chan_make(0, 0);
    uint64_t base = metric("/heap/inuse:bytes");
    mote_wg_add(&images_done, IMAGES_N);
    for (int i = 0; i < IMAGES_N; i++)
        CHECK_EQ(mote_go(images_task, NULL), 0);
    CHECK(wait_frozen(IMAGES_N * 9 / 10));
    uint64_t frozen = metric("/heap/inuse:bytes") - base;
    /* (under TSan an image holds less than the frame: ~860 B a task) */
    CHECK(frozen >= (uint64_t)IMAGES_N * 512);
    CHECK_EQ(mote_chan_close(images_gate), 0);
    mote_wg_wait(&images_done);
    /* No call asks for it, and this task sleeps long (looking often would
     * keep its worker awake to take the frees in): within a few seconds,
     * on a loaded machine. */
    int64_t t0 = mote_now();
    uint64_t now = metric("/heap/inuse:bytes");
    uint64_t bound = base + frozen / 4 + (256 << 10); /* (tasks' own leftovers) */
    while (now > bound && mote_now() - t0 < 5000 * MS) {
        mote_sleep(1000 * MS);
        now = metric("/heap/inuse:bytes");
    }
    printf("heap in use: %llu KiB before, %llu KiB more frozen, %llu KiB more after the "
           "exits (%lld ms)\n",
           (unsigned long long)base >> 10, (unsigned long long)frozen >> 10,
           (unsigned long long)(now > base ? now - base : 0) >> 10,
           (long long)((mote_now() - t0) / MS));
    CHECK(now <= bound);
    mote_chan_free(images_gate);
}

TEST_MAIN()
