/*
 * sched.c - the M:N scheduler: workers, run queues, park/unpark, mote_run.
 *
 * Each worker is one OS thread (the first is the thread that called
 * mote_run) and owns:
 *   - rq: started tasks ready to run, FIFO.  Owner only, no lock.
 *   - inbox: tasks readied by other threads.  A lock-free LIFO stack that
 *     wakers push with one CAS and the owner empties with one exchange.
 *   - fresh: spawned, never-run tasks.  Spin-locked FIFO; idle workers steal
 *     from it, which is how spawns spread.  A task that has run never moves.
 *   - timers (timer.c), a stack cache (stack.c) and the trim state of its
 *     parked tasks (trim.c).  Owner only: a worker trims only its own
 *     tasks, between tasks, so no trim races a running task.
 * Tasks switch directly to the next task (one mote__arch_switch); the worker's
 * own context (sched_ctx, on the thread's stack) only runs when the worker
 * has nothing to do, and sleeps in the kernel after a short bounded spin.
 *
 * Wake-ups are never lost: a waker pushes, then reads the target's sleeping
 * word; a worker going to sleep sets that word, then re-checks its queues
 * (both sides seq_cst), so at least one of them sees the other.
 *
 * Deadlock: a worker about to sleep with no timer counts itself under
 * idle_lock; when every worker is counted, all queues are empty and tasks
 * still live, no task can ever run again, unless a plain (non-task) thread
 * may still wake one - once a plain thread has used the runtime, detection
 * is off for that run.
 *
 * ext_lock (a rwlock) is read-locked by spawns from plain threads, metric
 * reads and mote_mem_release, from any thread; it is write-locked only by
 * teardown, after every worker has been joined, so no worker waits on it.
 */
#include "sched.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "heap/heap.h"
#include "os/os.h"
#include "overflow.h"
#include "sanfiber.h"
#include "spin.h"
#include "symbol.h"
#include "task.h"
#include "trim.h"

#define API __attribute__((visibility("default")))
#define LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
/* Single-writer counters: a plain load/store pair, no locked instruction. */
#define COUNT(p, d) STORE((p), LOAD(p) + (d))

/* An idle worker polls for ~20 us before sleeping in the kernel: long
 * enough to catch a wake-up that is already on its way (a futex round trip
 * costs ~5 us here), short enough to waste little.  PAUSE costs ~25 ns on
 * this machine's CPUs, so the count of them is what sets the time. */
#define SCHED_SPIN_ROUNDS 100
#define SCHED_SPIN_PAUSES 8
#define SCHED_ID_BLOCK 1024
#define SCHED_STARVED_BACKOFF 1000000 /* ns between retries to map a stack */

typedef struct worker {
    int index;
    pthread_t thread;
    arch_ctx sched_ctx;
    task *current;
    task *rq_head, *rq_tail;
    task *inbox;                 /* atomic */
    int fresh_lock;
    task *fresh_head, *fresh_tail;
    uint32_t fresh_n;            /* atomic, for thieves to peek */
    int sleeping;                /* futex word */
    timer_heap timers;
    stack_cache stacks;
    task *dead;                  /* exited; released after the next switch */
    int64_t starved_since;       /* no stack could be mapped: back off */
    uint32_t release_seen;       /* the release_epoch this worker acted on */
    task *all;                   /* started tasks, for dumps and teardown */
    uint64_t id_next, id_end;
    uint32_t tick;
    uint64_t rng;
    /* single-writer statistics */
    uint64_t n_spawned, n_exited, n_started;
    int64_t n_blocked;
    int64_t n_running;
    sanfiber_ctx san;            /* the scheduler context's sanitizer state */
    trim_state trim;
} __attribute__((aligned(64))) worker;

static struct {
    int state;         /* atomic: 0 idle, 1 starting/running */
    int shutdown;      /* atomic */
    int result;
    int nworkers;
    int default_cls;
    worker *w;
    config cfg;
    uint64_t next_id;          /* atomic */
    uint64_t ext_spawned;      /* atomic */
    uint32_t ext_rr;           /* atomic */
    int external_seen;         /* atomic */
    int nsleeping, nspinning;  /* atomic */
    pthread_mutex_t idle_lock;
    int nidle_notimer;
    pthread_rwlock_t ext_lock; /* plain-thread spawns vs teardown */
    uint64_t mem_used;         /* atomic: RSS at the last check */
    int64_t mem_checked;       /* atomic: when */
    int pressure;              /* atomic: near MOTE_MEMLIMIT */
    uint32_t release_epoch;    /* atomic: bumped by mote_mem_release */
} rt = {.idle_lock = PTHREAD_MUTEX_INITIALIZER,
        .ext_lock = PTHREAD_RWLOCK_INITIALIZER};

/* Totals that outlive a run, for metrics read after mote_run returns. */
static uint64_t sched_total_spawned;

static __thread worker *sched_tls_worker __attribute__((tls_model("initial-exec")));
__thread task *mote__sched_current __attribute__((tls_model("initial-exec")));

/* ---- queues ------------------------------------------------------------ */

static inline void rq_push(worker *w, task *t)
{
    t->next = NULL;
    if (w->rq_tail)
        w->rq_tail->next = t;
    else
        w->rq_head = t;
    w->rq_tail = t;
}

static inline task *rq_pop(worker *w)
{
    task *t = w->rq_head;
    if (t) {
        w->rq_head = t->next;
        if (!w->rq_head)
            w->rq_tail = NULL;
    }
    return t;
}

static void inbox_push(worker *w, task *t)
{
    task *old = __atomic_load_n(&w->inbox, __ATOMIC_RELAXED);
    do
        t->next = old;
    while (!__atomic_compare_exchange_n(&w->inbox, &old, t, true,
                                        __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
}

static void inbox_drain(worker *w)
{
    task *l = __atomic_exchange_n(&w->inbox, NULL, __ATOMIC_ACQUIRE);
    task *rev = NULL;
    while (l) { /* the stack is LIFO: restore arrival order */
        task *n = l->next;
        l->next = rev;
        rev = l;
        l = n;
    }
    while (rev) {
        task *n = rev->next;
        rq_push(w, rev);
        rev = n;
    }
}

static void fresh_push(worker *w, task *t)
{
    t->next = NULL;
    spin_lock(&w->fresh_lock);
    if (w->fresh_tail)
        w->fresh_tail->next = t;
    else
        w->fresh_head = t;
    w->fresh_tail = t;
    __atomic_store_n(&w->fresh_n, w->fresh_n + 1, __ATOMIC_SEQ_CST);
    spin_unlock(&w->fresh_lock);
}

/* Takes up to max tasks from the head of v's fresh queue: a list. */
static task *fresh_take(worker *v, uint32_t max, bool wait)
{
    if (!__atomic_load_n(&v->fresh_n, __ATOMIC_RELAXED))
        return NULL;
    if (wait)
        spin_lock(&v->fresh_lock);
    else if (!spin_trylock(&v->fresh_lock))
        return NULL;
    task *head = v->fresh_head, *t = head;
    uint32_t n = 0;
    if (t) {
        while (++n < max && t->next)
            t = t->next;
        v->fresh_head = t->next;
        if (!v->fresh_head)
            v->fresh_tail = NULL;
        t->next = NULL;
        __atomic_store_n(&v->fresh_n, v->fresh_n - n, __ATOMIC_RELAXED);
    }
    spin_unlock(&v->fresh_lock);
    return head;
}

static void sched_wake(worker *v)
{
    if (__atomic_load_n(&v->sleeping, __ATOMIC_SEQ_CST) &&
        __atomic_exchange_n(&v->sleeping, 0, __ATOMIC_SEQ_CST))
        mote__os_futex_wake(&v->sleeping, 1);
}

/* A spawn left work behind: get an idle worker looking, unless one is
 * already spinning (it will find it) - the Go scheduler's rule, which keeps
 * spawn loops from paying a futex wake per task. */
static void sched_wake_idle(worker *self)
{
    if (!__atomic_load_n(&rt.nsleeping, __ATOMIC_SEQ_CST) ||
        __atomic_load_n(&rt.nspinning, __ATOMIC_SEQ_CST))
        return;
    for (int i = 0; i < rt.nworkers; i++) {
        worker *v = &rt.w[i];
        if (v != self && __atomic_load_n(&v->sleeping, __ATOMIC_SEQ_CST)) {
            sched_wake(v);
            return;
        }
    }
}

/* ---- switching ----------------------------------------------------------- */

static void sched_release_dead(worker *w)
{
    task *d = w->dead;
    if (d) {
        w->dead = NULL;
        mote__trim_on_exit(&w->trim, d);
        sanfiber_destroy(&d->san);
        mote__task_destroy(d, &w->stacks);
    }
}

/* Switches from the running context (task from, or the worker's own context
 * when from is NULL) to to (likewise).  Returns when from runs again. */
static void sched_switch(worker *w, task *from, task *to)
{
    arch_ctx *fc = from ? &from->ctx : &w->sched_ctx;
    arch_ctx *tc = to ? &to->ctx : &w->sched_ctx;
    sanfiber_ctx *fs = from ? &from->san : &w->san;
    w->current = to;
    mote__sched_current = to;
    sanfiber_enter(fs, from && from == w->dead, to ? &to->san : &w->san);
    int saved_errno = errno; /* errno is the thread's: keep it the task's */
    mote__arch_switch(fc, tc);
    errno = saved_errno;
    sanfiber_landed(fs);
    sched_release_dead(w);
}

static void task_entry(void *arg);

/* First run of t on w: it takes a stack from w's pool and joins w for
 * life.  False when no stack can be mapped; the task then waits its turn
 * again (nothing is lost) and the worker backs off. */
static bool sched_adopt(worker *w, task *t)
{
    int r = mote__stack_acquire(stack_cls(&t->stack), &w->stacks, &t->stack);
    if (__builtin_expect(r != 0, 0)) {
        if (!w->starved_since)
            fprintf(stderr, "mote: no memory for the stack of a new task (%s); "
                            "it will start when stacks are freed\n",
                    mote_strerror(r));
        w->starved_since = mote__os_now_ns();
        fresh_push(w, t);
        return false;
    }
    w->starved_since = 0;
    t->worker = w;
    t->started = true;
    t->all_prev = NULL;
    t->all_next = w->all;
    if (w->all)
        w->all->all_prev = t;
    w->all = t;
    if (t->id == 0) {
        if (w->id_next == w->id_end) {
            w->id_next = __atomic_fetch_add(&rt.next_id, SCHED_ID_BLOCK,
                                            __ATOMIC_RELAXED);
            w->id_end = w->id_next + SCHED_ID_BLOCK;
        }
        t->id = w->id_next++;
    }
    stack_set_owner(&t->stack, t);
    mote__trim_on_start(&w->trim, t);
    arch_ctx_init(&t->ctx, (void *)(stack_top(&t->stack) - STACK_TOP_RESERVED),
                  task_entry, t);
    sanfiber_create(&t->san, (void *)stack_lo(&t->stack), stack_top(&t->stack) - stack_lo(&t->stack));
    COUNT(&w->n_started, 1);
    return true;
}

static void sched_run_timers(worker *w)
{
    int64_t now = mote__os_now_ns();
    task *t;
    while ((t = mote__timer_pop_due(&w->timers, now))) {
        if (mote__sched_claim(t)) {
            t->wake_result = -ETIMEDOUT;
            rq_push(w, t);
        }
    }
}

/* MOTE_MEMLIMIT: the process's resident memory, re-read at most every
 * 10 ms (or now, when force). */
static uint64_t sched_mem_used(bool force)
{
    int64_t now = mote__os_now_ns(), last = LOAD(&rt.mem_checked);
    if (force || now - last > 10 * 1000000) {
        if (force || __atomic_compare_exchange_n(&rt.mem_checked, &last, now, false,
                                                 __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            uint64_t used = mote__os_rss_bytes();
            STORE(&rt.mem_used, used);
            uint64_t lim = rt.cfg.memlimit;
            int was = LOAD(&rt.pressure);
            int now_p = used >= lim - lim / 10;
            STORE(&rt.pressure, now_p);
            if (now_p && !was)
                mote_mem_release(); /* the heap's share, once per episode */
            return used;
        }
    }
    return LOAD(&rt.mem_used);
}

/* Trimming's share of a scheduling point: cheap unless something is due. */
static void sched_trim(worker *w, int64_t now)
{
    bool force = false;
    if (rt.cfg.memlimit) {
        sched_mem_used(false);
        force = LOAD(&rt.pressure);
    }
    uint32_t epoch = __atomic_load_n(&rt.release_epoch, __ATOMIC_ACQUIRE);
    if (epoch != w->release_seen) {
        w->release_seen = epoch;
        force = true;
    }
    if (force || now >= w->trim.next)
        mote__trim_run(&w->trim, &w->stacks, w->current, now, force);
}

static void sched_release_request(worker *ws)
{
    __atomic_fetch_add(&rt.release_epoch, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < rt.nworkers; i++)
        sched_wake(&ws[i]);
}

void mote__sched_mem_release(void)
{
    /* Each worker trims its own stacks (only it may touch them): ask, and
     * wake the sleepers so they act now. */
    pthread_rwlock_rdlock(&rt.ext_lock);
    worker *ws = __atomic_load_n(&rt.w, __ATOMIC_ACQUIRE);
    if (ws)
        sched_release_request(ws);
    pthread_rwlock_unlock(&rt.ext_lock);
}

/* The next task to run on w, or NULL.  Order: inbox arrivals join the
 * ready queue; due timers fire; every 61st pick a fresh task goes first so
 * a yield loop cannot starve spawns; then the ready queue, then fresh. */
static task *sched_pick(worker *w)
{
    if (__builtin_expect(LOAD(&rt.shutdown), 0))
        return NULL;
    w->tick++;
    if (LOAD(&w->inbox))
        inbox_drain(w);
    if (w->timers.n && (!(w->tick & 63) || !w->rq_head))
        sched_run_timers(w);
    if (w->trim.next != INT64_MAX && (!(w->tick & 63) || w->trim.delay == 0))
        sched_trim(w, mote__os_now_ns());
    if (w->rq_head && w->tick % 61)
        return rq_pop(w);
    if (__builtin_expect(w->starved_since != 0, 0) &&
        mote__os_now_ns() - w->starved_since > SCHED_STARVED_BACKOFF)
        w->starved_since = 0;
    if (!w->starved_since) {
        task *t = fresh_take(w, 1, true);
        if (t && sched_adopt(w, t))
            return t;
    }
    return rq_pop(w);
}

static task *sched_steal(worker *w)
{
    int n = rt.nworkers;
    if (n < 2 || w->starved_since)
        return NULL;
    w->rng = w->rng * 6364136223846793005ull + 1442695040888963407ull;
    int start = (int)((w->rng >> 33) % (uint64_t)n);
    for (int k = 0; k < n; k++) {
        worker *v = &rt.w[(start + k) % n];
        if (v == w)
            continue;
        uint32_t avail = __atomic_load_n(&v->fresh_n, __ATOMIC_RELAXED);
        if (!avail)
            continue;
        task *l = fresh_take(v, avail / 2 + 1 > 64 ? 64 : avail / 2 + 1, false);
        if (!l)
            continue;
        task *first = l;
        for (task *t = l->next; t;) {
            task *nx = t->next;
            fresh_push(w, t);
            t = nx;
        }
        if (sched_adopt(w, first))
            return first;
        return NULL;
    }
    return NULL;
}

/* ---- the worker's own loop ---------------------------------------------- */

static bool sched_has_work(worker *w)
{
    if (w->starved_since) /* fresh tasks can't start yet: only wait */
        return __atomic_load_n(&w->inbox, __ATOMIC_SEQ_CST) ||
               LOAD(&rt.shutdown) ||
               mote__os_now_ns() - w->starved_since > SCHED_STARVED_BACKOFF;
    if (__atomic_load_n(&w->inbox, __ATOMIC_SEQ_CST) ||
        __atomic_load_n(&w->fresh_n, __ATOMIC_SEQ_CST) || LOAD(&rt.shutdown))
        return true;
    for (int i = 0; i < rt.nworkers; i++)
        if (__atomic_load_n(&rt.w[i].fresh_n, __ATOMIC_SEQ_CST))
            return true;
    return w->timers.n && mote__timer_next(&w->timers) <= mote__os_now_ns();
}

static void sched_report_deadlock(void);

/* Called with idle_lock held by a worker about to sleep with no timer. */
static bool sched_deadlocked(void)
{
    if (rt.nidle_notimer < rt.nworkers ||
        __atomic_load_n(&rt.external_seen, __ATOMIC_SEQ_CST))
        return false;
    uint64_t live = __atomic_load_n(&rt.ext_spawned, __ATOMIC_RELAXED);
    for (int i = 0; i < rt.nworkers; i++) {
        worker *v = &rt.w[i];
        if (__atomic_load_n(&v->inbox, __ATOMIC_SEQ_CST) ||
            __atomic_load_n(&v->fresh_n, __ATOMIC_SEQ_CST) || v->timers.n)
            return false;
        live += LOAD(&v->n_spawned) - LOAD(&v->n_exited);
    }
    return live > 0;
}

static void sched_idle(worker *w)
{
    __atomic_fetch_add(&rt.nspinning, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < SCHED_SPIN_ROUNDS; i++) {
        if (sched_has_work(w)) {
            __atomic_fetch_sub(&rt.nspinning, 1, __ATOMIC_SEQ_CST);
            return;
        }
        for (int k = 0; k < SCHED_SPIN_PAUSES; k++)
            spin_relax();
    }
    __atomic_fetch_sub(&rt.nspinning, 1, __ATOMIC_SEQ_CST);

    /* Parked stacks give pages back while the worker has nothing to do. */
    sched_trim(w, mote__os_now_ns());

    __atomic_store_n(&w->sleeping, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&rt.nsleeping, 1, __ATOMIC_SEQ_CST);
    if (!sched_has_work(w)) {
        int64_t tnext = mote__timer_next(&w->timers), next = tnext;
        if (w->starved_since && w->starved_since + SCHED_STARVED_BACKOFF < next)
            next = w->starved_since + SCHED_STARVED_BACKOFF;
        if (w->trim.next < next)
            next = w->trim.next; /* housekeeping only: not a task's timer */
        bool counted = false;
        if (tnext == INT64_MAX) {
            pthread_mutex_lock(&rt.idle_lock);
            rt.nidle_notimer++;
            counted = true;
            if (sched_deadlocked()) {
                sched_report_deadlock();
                rt.result = -EDEADLK;
                __atomic_store_n(&rt.shutdown, 1, __ATOMIC_SEQ_CST);
                for (int i = 0; i < rt.nworkers; i++)
                    sched_wake(&rt.w[i]);
            }
            pthread_mutex_unlock(&rt.idle_lock);
        }
        if (!LOAD(&rt.shutdown)) {
            int64_t wait = -1;
            if (next != INT64_MAX) {
                wait = next - mote__os_now_ns();
                if (wait < 0)
                    wait = 0;
            }
            if (wait != 0)
                mote__os_futex_wait(&w->sleeping, 1, wait);
        }
        if (counted) {
            pthread_mutex_lock(&rt.idle_lock);
            rt.nidle_notimer--;
            pthread_mutex_unlock(&rt.idle_lock);
        }
    }
    __atomic_store_n(&w->sleeping, 0, __ATOMIC_SEQ_CST);
    __atomic_fetch_sub(&rt.nsleeping, 1, __ATOMIC_SEQ_CST);
}

static void sched_loop(worker *w)
{
    for (;;) {
        task *t = sched_pick(w);
        if (!t && !LOAD(&rt.shutdown))
            t = sched_steal(w);
        if (t) {
            sched_switch(w, NULL, t);
            continue;
        }
        if (LOAD(&rt.shutdown))
            return;
        if (w->timers.n)
            sched_run_timers(w);
        if (!w->rq_head)
            sched_idle(w);
    }
}

static void *sched_thread(void *arg)
{
    worker *w = arg;
    sched_tls_worker = w;
    mote__overflow_thread_init();
    sanfiber_thread_init(&w->san);
    sched_loop(w);
    sanfiber_thread_fini(&w->san);
    mote__overflow_thread_fini();
    sched_tls_worker = NULL;
    return NULL;
}

/* ---- tasks ------------------------------------------------------------------ */

static _Noreturn void sched_exit(worker *w, task *t)
{
    if (t->all_prev)
        t->all_prev->all_next = t->all_next;
    else
        w->all = t->all_next;
    if (t->all_next)
        t->all_next->all_prev = t->all_prev;
    if (t->timer_idx != TIMER_NONE)
        mote__timer_cancel(&w->timers, t);
    COUNT(&w->n_exited, 1);
    if (t->is_main) {
        __atomic_store_n(&rt.shutdown, 1, __ATOMIC_SEQ_CST);
        for (int i = 0; i < rt.nworkers; i++)
            if (&rt.w[i] != w)
                sched_wake(&rt.w[i]);
    }
    w->dead = t;
    sched_switch(w, t, sched_pick(w));
    __builtin_unreachable();
}

static void task_entry(void *arg)
{
    task *t = arg;
    worker *w = t->worker;
    sanfiber_landed(&t->san);
    sched_release_dead(w);
    t->fn(t->arg);
    sched_exit(t->worker, t);
}

uint64_t mote__sched_task_id(const task *t)
{
    return t->id;
}

void mote__sched_prepare_wait(const char *why, const void *obj)
{
    task *t = sched_self();
    t->wait_why = why;
    t->wait_obj = obj;
    __atomic_store_n(&t->wait_state, TASK_WAITING, __ATOMIC_RELEASE);
}

bool mote__sched_claim(task *t)
{
    int expect = TASK_WAITING;
    return __atomic_compare_exchange_n(&t->wait_state, &expect, TASK_CLAIMED,
                                       false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_RELAXED);
}

void mote__sched_ready(task *t, int result)
{
    t->wake_result = result;
    worker *v = t->worker, *w = sched_tls_worker;
    if (v == w) {
        rq_push(w, t);
        return;
    }
    if (!w)
        __atomic_store_n(&rt.external_seen, 1, __ATOMIC_SEQ_CST);
    inbox_push(v, t);
    sched_wake(v);
}

int mote__sched_park_until(int64_t deadline)
{
    worker *w = sched_tls_worker;
    task *t = w->current;
    if (deadline >= 0 && mote__timer_add(&w->timers, t, deadline)) {
        /* No memory for the timer: end the wait now if nobody else has. */
        if (mote__sched_claim(t)) {
            __atomic_store_n(&t->wait_state, TASK_RUNNING, __ATOMIC_RELAXED);
            return -ENOMEM;
        }
    }
    COUNT(&w->n_blocked, 1);
    mote__trim_on_park(&w->trim, t);
    task *next = sched_pick(w);
    if (next != t)
        sched_switch(w, t, next);
    COUNT(&w->n_blocked, -1);
    if (t->timer_idx != TIMER_NONE)
        mote__timer_cancel(&w->timers, t);
    t->wait_why = NULL;
    __atomic_store_n(&t->wait_state, TASK_RUNNING, __ATOMIC_RELAXED);
    return t->wake_result;
}

int mote__sched_park(void)
{
    return mote__sched_park_until(-1);
}

_Noreturn void mote__sched_die_not_task(const char *fn)
{
    fprintf(stderr, "mote: %s() called outside a task: it would block this "
                    "thread forever\n", fn);
    abort();
}

/* ---- public task API ---------------------------------------------------------- */

API int mote_go_ex(mote_fn fn, void *arg, const mote_task_opts *opts)
{
    if (!fn)
        return -EINVAL;
    int cls;
    if (opts && opts->stack_size) {
        cls = mote__stack_class_of(opts->stack_size);
        if (cls < 0)
            return -EINVAL;
    } else {
        cls = -1;
    }
    const char *name = opts ? opts->name : NULL;
    if (rt.cfg.memlimit && sched_mem_used(false) >= rt.cfg.memlimit &&
        sched_mem_used(true) >= rt.cfg.memlimit)
        return -ENOMEM;
    worker *w = sched_tls_worker;
    if (w) {
        task *t;
        int r = mote__task_create(fn, arg, name, cls < 0 ? rt.default_cls : cls, &t);
        if (r)
            return r;
        COUNT(&w->n_spawned, 1);
        fresh_push(w, t);
        sched_wake_idle(w);
        return 0;
    }
    /* A plain thread: shares the runtime with its teardown. */
    pthread_rwlock_rdlock(&rt.ext_lock);
    if (!__atomic_load_n(&rt.state, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&rt.shutdown, __ATOMIC_ACQUIRE) || !rt.w) {
        pthread_rwlock_unlock(&rt.ext_lock);
        return -EPERM;
    }
    __atomic_store_n(&rt.external_seen, 1, __ATOMIC_SEQ_CST);
    task *t;
    int r = mote__task_create(fn, arg, name, cls < 0 ? rt.default_cls : cls, &t);
    if (r == 0) {
        t->id = __atomic_fetch_add(&rt.next_id, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&rt.ext_spawned, 1, __ATOMIC_RELAXED);
        uint32_t i = __atomic_fetch_add(&rt.ext_rr, 1, __ATOMIC_RELAXED);
        worker *v = &rt.w[i % (uint32_t)rt.nworkers];
        fresh_push(v, t);
        sched_wake(v);
    }
    pthread_rwlock_unlock(&rt.ext_lock);
    return r;
}

API int mote_go(mote_fn fn, void *arg)
{
    return mote_go_ex(fn, arg, NULL);
}

API uint64_t mote_id(void)
{
    task *t = sched_self();
    return t ? t->id : 0;
}

API const char *mote_name(void)
{
    task *t = sched_self();
    static __thread char buf[128];
    return t ? mote__task_display_name(t, buf, sizeof buf) : NULL;
}

API void mote_yield(void)
{
    worker *w = sched_tls_worker;
    task *t = w ? w->current : NULL;
    if (!t) {
        sched_yield();
        return;
    }
    rq_push(w, t);
    task *next = sched_pick(w);
    if (next != t)
        sched_switch(w, t, next);
}

API int64_t mote_now(void)
{
    return mote__os_now_ns();
}

API int mote_sleep(int64_t ns)
{
    if (!sched_self())
        return -EPERM;
    if (ns <= 0) {
        mote_yield();
        return 0;
    }
    int64_t now = mote__os_now_ns();
    int64_t deadline = ns > INT64_MAX - now ? INT64_MAX : now + ns;
    mote__sched_prepare_wait("sleep", NULL);
    int r = mote__sched_park_until(deadline);
    return r == -ENOMEM ? r : 0;
}

/* ---- deadlock report ------------------------------------------------------------ */

/* Walks a parked task's frame-pointer chain from its saved context,
 * staying inside its stack, and prints the functions it is in.  Frames of
 * code built without frame pointers end the walk early. */
static void sched_backtrace(const task *t)
{
    const uint64_t *f = t->ctx.sp; /* see arch_ctx_init for the layout */
    uintptr_t lo = stack_lo(&t->stack), hi = stack_top(&t->stack);
    uintptr_t fp = f[6], ret = f[7];
    bool inside_mote = true;
    for (int depth = 0; depth < 24 && ret; depth++) {
        char name[128];
        if (!mote__symbol_name((void *)(ret - 1), name, sizeof name))
            snprintf(name, sizeof name, "%p", (void *)ret);
        /* the scheduler's own frames say nothing the [why] does not */
        if (!(inside_mote && !strncmp(name, "sched_", 6)))
            fprintf(stderr, "      %s\n", name);
        inside_mote = false;
        if (fp < lo || fp + 16 > hi || (fp & 7))
            break;
        uintptr_t next = ((const uint64_t *)fp)[0];
        ret = ((const uint64_t *)fp)[1];
        if (next <= fp)
            break;
        fp = next;
    }
}

static void sched_report_deadlock(void)
{
    enum { TRACED = 32, LISTED = 1000 };
    uint64_t n = 0;
    fprintf(stderr, "mote: all tasks are asleep - deadlock!\n");
    for (int i = 0; i < rt.nworkers; i++) {
        for (task *t = rt.w[i].all; t; t = t->all_next, n++) {
            if (n >= LISTED)
                continue;
            char buf[128];
            const char *why = t->wait_why ? t->wait_why : "running";
            fprintf(stderr, "  task %llu (%s) [%s", (unsigned long long)t->id,
                    mote__task_display_name(t, buf, sizeof buf), why);
            if (t->wait_obj)
                fprintf(stderr, " %p", t->wait_obj);
            fprintf(stderr, "] on worker %d\n", i);
            if (n < TRACED)
                sched_backtrace(t);
        }
    }
    if (n > LISTED)
        fprintf(stderr, "  ... and %llu more tasks\n",
                (unsigned long long)(n - LISTED));
    fflush(stderr);
}

/* ---- mote_run ------------------------------------------------------------------------ */

static void sched_teardown(int started)
{
    /* Join first, lock after: a task still running on another worker may
     * read metrics or spawn (taking ext_lock for reading) until it reaches
     * its next scheduling point, and must not wait on us while we wait on
     * it.  Plain threads see shutdown set and spawn nothing new. */
    for (int i = 0; i < rt.nworkers; i++)
        sched_wake(&rt.w[i]);
    for (int i = 1; i < started; i++)
        pthread_join(rt.w[i].thread, NULL);
    pthread_rwlock_wrlock(&rt.ext_lock);
    /* Every live task is either started (on its worker's list) or fresh. */
    for (int i = 0; i < rt.nworkers; i++) {
        worker *w = &rt.w[i];
        sched_release_dead(w);
        while (w->all) {
            task *t = w->all;
            w->all = t->all_next;
            sanfiber_destroy(&t->san);
            mote__task_destroy(t, &w->stacks);
        }
        task *t;
        while ((t = fresh_take(w, UINT32_MAX, true))) {
            while (t) {
                task *n = t->next;
                mote__task_destroy(t, &w->stacks);
                t = n;
            }
        }
        mote__trim_fini(&w->trim);
        mote__timer_free(&w->timers);
        mote__stack_cache_drain(&w->stacks);
    }
    uint64_t spawned = __atomic_load_n(&rt.ext_spawned, __ATOMIC_RELAXED);
    for (int i = 0; i < rt.nworkers; i++)
        spawned += rt.w[i].n_spawned;
    __atomic_fetch_add(&sched_total_spawned, spawned, __ATOMIC_RELAXED);
    mote__stack_reset();
    worker *ws = rt.w;
    __atomic_store_n(&rt.w, NULL, __ATOMIC_RELEASE);
    rt.nworkers = 0;
    pthread_rwlock_unlock(&rt.ext_lock);
    mote_free(ws);
}

API int mote_run(mote_fn main_fn, void *arg)
{
    if (!main_fn)
        return -EINVAL;
    int expect = 0;
    if (!__atomic_compare_exchange_n(&rt.state, &expect, 1, false,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return -EBUSY;
    int r = mote__config_load(&rt.cfg);
    if (r == 0)
        r = mote__heap_check_env(); /* the allocator's own variables, read at its start */
    if (r) {
        __atomic_store_n(&rt.state, 0, __ATOMIC_RELEASE);
        return r;
    }
    mote__overflow_install();
    int n = rt.cfg.workers;
    worker *ws = mote_aligned_alloc(64, sizeof(worker) * (size_t)n);
    if (!ws) {
        __atomic_store_n(&rt.state, 0, __ATOMIC_RELEASE);
        return -ENOMEM;
    }
    memset(ws, 0, sizeof(worker) * (size_t)n);
    rt.default_cls = mote__stack_class_of(rt.cfg.stack_size);
    rt.result = 0;
    rt.next_id = 1;
    rt.ext_spawned = 0;
    rt.external_seen = 0;
    rt.nsleeping = rt.nspinning = 0;
    rt.nidle_notimer = 0;
    rt.mem_used = 0;
    rt.mem_checked = 0;
    rt.pressure = 0;
    __atomic_store_n(&rt.shutdown, 0, __ATOMIC_RELAXED);
    for (int i = 0; i < n; i++) {
        ws[i].index = i;
        ws[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        mote__trim_init(&ws[i].trim, rt.cfg.trim);
    }
    rt.nworkers = n;
    __atomic_store_n(&rt.w, ws, __ATOMIC_RELEASE);

    worker *w0 = &ws[0];
    w0->thread = pthread_self();
    sched_tls_worker = w0;
    task *m;
    r = mote__task_create(main_fn, arg, "main", rt.default_cls, &m);
    if (r == 0 && !sched_adopt(w0, m)) { /* it went back to the fresh queue */
        fresh_take(w0, 1, true);
        mote__task_destroy(m, &w0->stacks);
        r = -ENOMEM;
    }
    if (r) {
        sched_tls_worker = NULL;
        sched_teardown(1);
        __atomic_store_n(&rt.state, 0, __ATOMIC_RELEASE);
        return r;
    }
    m->is_main = true;
    COUNT(&w0->n_spawned, 1);
    rq_push(w0, m);

    mote__overflow_thread_init();
    sanfiber_thread_init(&w0->san);
    int started = 1;
    for (; started < n; started++) {
        if (pthread_create(&ws[started].thread, NULL, sched_thread, &ws[started])) {
            fprintf(stderr, "mote: cannot start worker thread %d of %d\n",
                    started + 1, n);
            rt.result = -EAGAIN;
            __atomic_store_n(&rt.shutdown, 1, __ATOMIC_SEQ_CST);
            break;
        }
    }
    sched_loop(w0);
    sanfiber_thread_fini(&w0->san);
    mote__overflow_thread_fini();
    sched_tls_worker = NULL;
    sched_teardown(started);
    r = rt.result;
    __atomic_store_n(&rt.state, 0, __ATOMIC_RELEASE);
    return r;
}

/* ---- statistics -------------------------------------------------------------------- */

#include "sched_stats.h"

void mote__sched_stats_read(sched_stats *s)
{
    memset(s, 0, sizeof *s);
    s->spawned = __atomic_load_n(&sched_total_spawned, __ATOMIC_RELAXED);
    s->stacks_trimmed = mote__trim_total_trimmed();
    pthread_rwlock_rdlock(&rt.ext_lock);
    worker *ws = __atomic_load_n(&rt.w, __ATOMIC_ACQUIRE);
    if (ws) {
        uint64_t spawned = __atomic_load_n(&rt.ext_spawned, __ATOMIC_RELAXED);
        uint64_t exited = 0;
        int64_t blocked = 0;
        for (int i = 0; i < rt.nworkers; i++) {
            spawned += LOAD(&ws[i].n_spawned);
            exited += LOAD(&ws[i].n_exited);
            blocked += LOAD(&ws[i].n_blocked);
            int64_t used = LOAD(&ws[i].stacks.in_use);
            s->stacks_in_use += used > 0 ? (uint64_t)used : 0;
            for (int c = 0; c < STACK_NCLASS; c++)
                s->stacks_pooled += LOAD(&ws[i].stacks.count[c]);
            s->stacks_trimmed += LOAD(&ws[i].trim.trimmed);
            for (int b = 0; b < TRIM_NBUCKET; b++)
                s->highwater[b] += LOAD(&ws[i].trim.hist[b]);
        }
        s->stacks_pooled += mote__stack_pooled_global();
        s->workers = (uint64_t)rt.nworkers;
        s->spawned += spawned;
        s->live = spawned > exited ? spawned - exited : 0;
        s->blocked = blocked > 0 ? (uint64_t)blocked : 0;
        if (s->blocked > s->live)
            s->blocked = s->live;
        s->runnable = s->live - s->blocked;
    }
    pthread_rwlock_unlock(&rt.ext_lock);
}
