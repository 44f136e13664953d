/*
 * sched.c - the M:N scheduler's core: a worker's loop (pick, steal, idle),
 * switching, a task's first run and its exit, and mote_run with its
 * teardown.  The state it works on is described in runtime.h; how tasks
 * wait and wake is park.c; the public task calls are task_api.c.
 *
 * Tasks switch directly to the next task (one arch_switch); the worker's
 * own context (sched_ctx, on the thread's stack) only runs when the worker
 * has nothing to do, and sleeps in the kernel after a short bounded spin.
 *
 * A run ends when main returns: its worker sets `shutdown`, every worker
 * stops at its next scheduling point and is joined, then teardown (with
 * ext_lock held for writing, so no plain thread spawns) waits for plain
 * threads in the middle of a wake-up, takes the wait records of every
 * remaining task out of the objects they wait on, and destroys the tasks.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "freeze.h"
#include "heap/heap.h"
#include "monitor.h"
#include "netpoll.h"
#include "offload.h"
#include "option.h"
#include "os/os.h"
#include "overflow.h"
#include "runtime.h"
#include "waitq.h"

/* An idle worker polls for ~20 us before sleeping in the kernel: long
 * enough to catch a wake-up that is already on its way (a futex round trip
 * costs ~5 us here), short enough to waste little.  PAUSE costs ~25 ns on
 * this machine's CPUs, so the count of them is what sets the time. */
#define SCHED_SPIN_ROUNDS     100
#define SCHED_SPIN_PAUSES     8
#define SCHED_ID_BLOCK        1024
#define SCHED_STARVED_BACKOFF 1000000   /* ns between retries to map a stack */
#define SCHED_STARVED_RELEASE 100000000 /* ns between a starved worker's releases */
#define SCHED_FRESH_ROUND     64        /* new tasks a round starts, at least */
/* A thief leaves a worker's few new tasks (SCHED_STEAL_FEW at most) to it
 * for this long; more it takes at once.  A task that has run never moves
 * (errno's and thread-locals' addresses), so where a task starts is where
 * it runs for good: two tasks spawned together to talk over a channel,
 * split by a thief that happened to be spinning, paid a cache-line
 * transfer (or a futex wake) per message for the rest of their lives.
 * chan_buffered at 2 workers, 100 runs: 18 at 72-99 ns a message and 82
 * at 22, against 1 and 99 with this rule; chan_pingpong's runs at 2.4 us
 * a message went from 11 in 60 to 2.  5 us (Go's runnext grace is 3)
 * left 4 in 100: the spawner can be held longer than that here (the idle
 * worker its spawn woke may be put on its CPU).  A fan-out (more than a
 * few) is spread at once: spawning in batches of 1024, 8 runs took 372 ns
 * a spawn against 304 when every batch waited its 20 us. */
#define SCHED_STEAL_AGE_NS    20000
#define SCHED_STEAL_FEW       8
/* A sleeping worker whose heap cache has frees waiting wakes after this
 * to take them in (a worker freeing its blocks that stays busy never
 * wakes it): the most such memory waits, a tenth of the heap's decay. */
#define SCHED_FREES_RETRY_NS  (50 * 1000000LL)
/* A busy worker looks at the netpoller at least this often (checked every
 * 16th pick): a ready socket waits for at most this plus one task's run
 * when every worker is busy; an idle worker blocks in epoll instead. */
#define NETPOLL_INTERVAL_NS   (100 * 1000)

runtime mote__rt = {.idle_lock = PTHREAD_MUTEX_INITIALIZER,
                    .ext_lock = PTHREAD_RWLOCK_INITIALIZER};

__thread worker *mote__worker_self __attribute__((tls_model("initial-exec")));
__thread task *mote__current_task __attribute__((tls_model("initial-exec")));

#define rt mote__rt

/* ---- queues ------------------------------------------------------------ */

static void inbox_drain(worker *w)
{
    task *l = XCHG(&w->inbox, NULL, ACQUIRE);
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

/* Takes up to max tasks from the head of v's fresh queue: a list.  Its
 * owner (own) takes them at once.  A thief takes a few (SCHED_STEAL_FEW)
 * only once they have waited SCHED_STEAL_AGE_NS since a thief first saw
 * v with new tasks (v->fresh_eyed, cleared when the queue empties), and
 * otherwise gets NULL with *young set. */
static task *fresh_take(worker *v, uint32_t max, bool own, bool *young)
{
    if (!LOAD(&v->fresh_n, RELAXED))
        return NULL;
    if (own)
        spin_lock(&v->fresh_lock);
    else if (!spin_trylock(&v->fresh_lock))
        return NULL;
    task *head = v->fresh_head, *t = head;
    uint32_t n = 0;
    if (!own && t && v->fresh_n <= SCHED_STEAL_FEW) {
        int64_t now = mote__os_now_ns();
        if (!v->fresh_eyed)
            v->fresh_eyed = now;
        if (now - v->fresh_eyed < SCHED_STEAL_AGE_NS) {
            spin_unlock(&v->fresh_lock);
            *young = true;
            return NULL;
        }
    }
    if (t) {
        while (++n < max && t->next)
            t = t->next;
        v->fresh_head = t->next;
        if (!v->fresh_head) {
            v->fresh_tail = NULL;
            v->fresh_eyed = 0; /* v has no backlog (left) */
        }
        t->next = NULL;
        STORE(&v->fresh_n, v->fresh_n - n, RELAXED);
    }
    spin_unlock(&v->fresh_lock);
    return head;
}

bool mote__sched_wake(worker *v)
{
    if (LOAD(&v->sleeping, SEQ_CST) && XCHG(&v->sleeping, 0, SEQ_CST)) {
        /* v set `sleeping` before becoming the poller, and looks for work
         * after: if it is not the poller now, it sleeps on the futex. */
        if (mote__netpoll_is_poller(v))
            mote__netpoll_break();
        else
            mote__os_futex_wake(&v->sleeping, 1);
        return true;
    }
    return false;
}

/* The Go scheduler's rule: wake a sleeper only when nobody is spinning,
 * which keeps spawn loops from paying a futex wake per task. */
void mote__sched_wake_idle(worker *self)
{
    if (!LOAD(&rt.nsleeping, SEQ_CST) || LOAD(&rt.nspinning, SEQ_CST))
        return;
    for (int i = 0; i < rt.nworkers; i++) {
        worker *v = &rt.w[i];
        if (v != self && LOAD(&v->sleeping, SEQ_CST) && mote__sched_wake(v))
            return;
    }
}

/* ---- switching ----------------------------------------------------------- */

static void sched_release_dead(worker *w)
{
    task *d = w->dead;
    if (d) {
        w->dead = NULL;
        /* The monitor may be reading it (monitor.c's hazard protocol). */
        while (LOAD(&w->hazard, SEQ_CST) == d)
            spin_relax();
        mote__trim_on_exit(&w->trim, d);
        sanfiber_destroy(&d->san);
        mote__task_destroy(d, &w->stacks);
    }
}

static void sched_exit_books(worker *w, task *t);

/* freeze.c's hook, on any thread: a task of w's was thawed in place and
 * stays parked; w sweeps for it (trim.c), woken for it if asleep. */
static void sched_orphaned(struct worker *w)
{
    mote__trim_orphaned(&w->trim);
    mote__sched_wake(w);
}

void mote__sched_switch(worker *w, task *from, task *to)
{
    arch_ctx *fc = from ? &from->ctx : &w->sched_ctx;
    arch_ctx *tc = to ? &to->ctx : &w->sched_ctx;
    sanfiber_ctx *fs = from ? &from->san : &w->san;
    mote__assert(from != to);
    mote__assert(!to || to->worker == w);
    if (to) {
        mote__freeze_resume(to); /* its stack must be there to switch to */
        if (to->io_woken) {
            mote__sched_stats_io_wake(w, to);
            mote__trim_on_io_wake(to);
        }
    }
    w->current = to;
    mote__current_task = to;
    STORE(&w->running, to, SEQ_CST);
    COUNT(&w->switches, 1);
    sanfiber_enter(fs, from && from == w->dead, to ? &to->san : &w->san);
    int saved_errno = errno; /* errno is the thread's: keep it the task's */
    mote__arch_switch(fc, tc);
    sanfiber_landed(fs);
    task *x = w->exited;
    if (x) { /* only ever on landing in the worker's own context */
        mote__assert(!from);
        w->exited = NULL;
        w->current = NULL;
        mote__current_task = NULL;
        STORE(&w->running, NULL, SEQ_CST);
        COUNT(&w->switches, 1);
        sched_exit_books(w, x);
    }
    sched_release_dead(w);
    /* Last: what ran since the switch (a dead task's stack and struct
     * released, a sanitizer's fiber bookkeeping) may have set errno. */
    errno = saved_errno;
}

static void task_entry(void *arg);

/* No stack for t: it waits its turn again (nothing is lost) and the worker
 * backs off.  The pooled stacks of every worker and the heap's free pages
 * go back (they may be what the mapping lacked), at most every
 * SCHED_STARVED_RELEASE; the message comes once a run (a program that
 * fills its address space retried, and said so, ~1,000 times a second). */
static void sched_starved(worker *w, task *t, int r)
{
    int64_t now = mote__os_now_ns();
    if (!w->starved_from)
        w->starved_from = now;
    w->starved_retry = now + SCHED_STARVED_BACKOFF;
    fresh_push(w, t);
    if (!XCHG(&rt.starve_said, 1, RELAXED)) /* (on a task's stack, maybe: no stdio) */
        mote__os_write_err4(
            "mote: no memory for the stack of a new task (", mote_strerror(r),
            "); new tasks start when stacks are freed (said once a run)\n", NULL);
    if (now - w->starved_released >= SCHED_STARVED_RELEASE) {
        w->starved_released = now;
        w->release_due = true; /* in the worker's own context: deep frames */
        w->chores = true;
    }
}

/* First run of t on w: it takes a stack from w's pool and joins w for
 * life.  False when no stack can be mapped (sched_starved). */
static bool sched_adopt(worker *w, task *t)
{
    int r = mote__stack_acquire(stack_cls(&t->stack), &w->stacks, &t->stack);
    if (__builtin_expect(r != 0, 0)) {
        sched_starved(w, t, r);
        return false;
    }
    w->starved_from = 0;
    t->worker = w;
    t->started = true;
    list_push_front(&w->all, &t->all_link);
    if (t->id == 0) {
        if (w->id_next == w->id_end) {
            w->id_next = FETCH_ADD(&rt.next_id, SCHED_ID_BLOCK, RELAXED);
            w->id_end = w->id_next + SCHED_ID_BLOCK;
        }
        t->id = w->id_next++;
    }
    mote__stack_set_owner(&t->stack, t);
    bool first = mote__stackprof_start(&w->stackprof, t->fn,
                                       stack_class_size(stack_cls(&t->stack)));
    mote__trim_on_start(&w->trim, t, first);
    arch_ctx_init(&t->ctx, (void *)(stack_top(&t->stack) - STACK_TOP_RESERVED),
                  task_entry, t);
    sanfiber_create(&t->san, (void *)stack_lo(&t->stack),
                    stack_top(&t->stack) - stack_lo(&t->stack));
    COUNT(&w->n_started, 1);
    return true;
}

static void sched_run_timers(worker *w)
{
    int64_t now = mote__os_now_ns();
    task *t;
    while ((t = mote__timer_pop_due(&w->timers, now))) {
        if (mote__park_claim(t)) {
            t->wake_result = -ETIMEDOUT;
            rq_push(w, t);
        }
    }
}

/* Whether a chore is due: answering a dump, trimming stacks, polling for
 * I/O.  Cheap: a load, and a clock read every 16th pick. */
static bool sched_chores_due(worker *w)
{
    if (__builtin_expect(LOAD(&rt.dump_epoch, RELAXED) != w->dump_seen, 0))
        return true;
    /* A mote_mem_release to act on: at once, not at the next trim check
     * (never, for a worker with nothing to trim; and the caller's own
     * worker, whose task slept a few ms at a time, kept its pool 60 s). */
    if (__builtin_expect(LOAD(&rt.release_epoch, RELAXED) != w->release_seen, 0))
        return true;
    if (w->tick & 15)
        return false;
    bool trim = (w->trim.next != INT64_MAX && (!(w->tick & 63) || w->trim.delay == 0)) ||
                mote__trim_orphans_due(&w->trim);
    bool poll = mote__netpoll_active();
    if (!trim && !poll)
        return false;
    int64_t now = mote__os_now_ns();
    return (trim && mote__memory_trim_due(w, now)) ||
           (poll && now - w->last_poll >= NETPOLL_INTERVAL_NS);
}

/* The chores, on the worker's own stack: they need several KiB of frames
 * (mincore vectors, epoll event arrays, a formatted dump), which on the
 * stack of the task that happens to park would stay resident under it. */
static void sched_chores(worker *w)
{
    mote__assert(w->current == NULL);
    w->chores = false;
    if (w->release_due) { /* a task found no stack (sched_starved) */
        w->release_due = false;
        mote_mem_release();
    }
    mote__dump_answer(w);
    int64_t now = mote__os_now_ns();
    w->trim.busy = w->rq_head != NULL;
    mote__memory_trim(w, now);
    if (mote__netpoll_active() && now - w->last_poll >= NETPOLL_INTERVAL_NS) {
        w->last_poll = now;
        mote__netpoll_poll(w, 0, NULL);
    }
}

/* The next task to run on w, or NULL.  Inbox arrivals join the ready
 * queue and due timers fire; then fresh and ready tasks share the worker
 * in rounds: at a round's start the fresh tasks queued by then start, then
 * the tasks ready at that moment run once each.  So a spawned task (a new
 * connection's) waits at most one pass over the ready queue, as in one
 * FIFO.  (Measured: fresh tasks let in only every 61st pick took 0.3 s to
 * start 400 new connections while the others kept the ready queue full:
 * wrk's first run at 400 connections saw a p99 of 345 ms.) */
task *mote__sched_pick(worker *w)
{
    if (__builtin_expect(LOAD(&rt.shutdown, RELAXED), 0))
        return NULL;
    w->tick++;
    if (__builtin_expect(w->chores || sched_chores_due(w), 0)) {
        if (w->current) { /* go to the worker's own context, which does them */
            w->chores = true;
            return NULL;
        }
        sched_chores(w);
    }
    if (LOAD(&w->inbox, RELAXED))
        inbox_drain(w);
    if (w->timers.n && (!(w->tick & 63) || !w->rq_head))
        sched_run_timers(w);
    mote__assert(w->round_left <= w->rq_n);   /* the round counts queued tasks only */
    if (!w->round_left && !w->fresh_budget) { /* a new round */
        /* New tasks first, but no more of them than the round has ready
         * ones (at least SCHED_FRESH_ROUND): a thread spawning in a loop
         * otherwise put its whole backlog ahead of every woken task (a
         * 1 ms sleep took 0.26-1.4 s). */
        uint32_t f = LOAD(&w->fresh_n, RELAXED);
        uint32_t cap = w->rq_n > SCHED_FRESH_ROUND ? w->rq_n : SCHED_FRESH_ROUND;
        w->fresh_budget = f < cap ? f : cap;
        w->round_left = w->rq_n;
    }
    if (w->rq_head && !w->fresh_budget) {
        w->round_left -= w->round_left != 0;
        return rq_pop(w);
    }
    if (__builtin_expect(w->starved_retry != 0, 0) &&
        mote__os_now_ns() >= w->starved_retry)
        w->starved_retry = 0;
    if (!w->starved_retry) {
        task *t = fresh_take(w, 1, true, NULL);
        if (t && sched_adopt(w, t)) {
            w->fresh_budget -= w->fresh_budget != 0;
            return t;
        }
    }
    w->fresh_budget = 0; /* taken by a thief, or no stack: on with the round */
    w->round_left -= w->round_left != 0;
    return rq_pop(w);
}

static task *sched_steal(worker *w)
{
    int n = rt.nworkers;
    if (n < 2 || w->starved_retry)
        return NULL;
    w->rng = w->rng * 6364136223846793005ull + 1442695040888963407ull;
    int start = (int)((w->rng >> 33) % (uint64_t)n);
    bool young = false;
    for (int k = 0; k < n; k++) {
        worker *v = &rt.w[(start + k) % n];
        if (v == w)
            continue;
        uint32_t avail = LOAD(&v->fresh_n, RELAXED);
        if (!avail)
            continue;
        task *l = fresh_take(v, avail / 2 + 1 > 64 ? 64 : avail / 2 + 1, false, &young);
        if (!l)
            continue;
        task *first = l;
        for (task *t = l->next; t;) {
            task *nx = t->next;
            fresh_push(w, t);
            t = nx;
        }
        return sched_adopt(w, first) ? first : NULL;
    }
    if (young) /* back soon, without hammering the victims' locks */
        for (int k = 0; k < SCHED_SPIN_PAUSES; k++)
            spin_relax();
    return NULL;
}

/* ---- the worker's own loop ---------------------------------------------- */

static bool sched_has_work(worker *w)
{
    if (w->starved_retry) /* fresh tasks can't start yet: only wait */
        return LOAD(&w->inbox, SEQ_CST) || LOAD(&rt.shutdown, RELAXED) ||
               mote__os_now_ns() >= w->starved_retry;
    if (LOAD(&w->inbox, SEQ_CST) || LOAD(&w->fresh_n, SEQ_CST) ||
        LOAD(&rt.shutdown, RELAXED))
        return true;
    for (int i = 0; i < rt.nworkers; i++)
        if (LOAD(&rt.w[i].fresh_n, SEQ_CST))
            return true;
    return w->timers.n && mote__timer_next(&w->timers) <= mote__os_now_ns();
}

static void sched_stop_all(void)
{
    STORE(&rt.shutdown, 1, SEQ_CST);
    for (int i = 0; i < rt.nworkers; i++)
        mote__sched_wake(&rt.w[i]);
}

static void sched_idle(worker *w)
{
    bool polling = mote__netpoll_active();
    if (polling && rt.nworkers > 1) { /* a lone worker blocks in epoll below */
        w->last_poll = mote__os_now_ns();
        if (mote__netpoll_poll(w, 0, NULL) > 0 &&
            (w->rq_head || LOAD(&w->inbox, RELAXED)))
            return;
    }
    /* Spinning catches wake-ups already on their way: from other workers,
     * and (looking at the poller every few rounds) the next request of a
     * busy connection, which would otherwise cost a sleep and a wake-up in
     * the kernel (measured: a lone worker serving 50 connections idled 75%
     * of the time in epoll, and its latency was the wake-ups'). */
    int rounds = rt.nworkers > 1 || polling ? SCHED_SPIN_ROUNDS : 0;
    /* More spinners than CPUs only take CPU time from the workers that
     * have work (with MOTE_WORKERS far above the CPUs, hundreds spun at
     * once; under ASan, 768 workers took 90 s for a program of 0.2). */
    if (FETCH_ADD(&rt.nspinning, 1, SEQ_CST) >= rt.spin_max)
        rounds = 0;
    for (int i = 0; i < rounds; i++) {
        if (sched_has_work(w) ||
            (polling && !(i & 7) && mote__netpoll_poll(w, 0, NULL) > 0 &&
             (w->rq_head || LOAD(&w->inbox, RELAXED)))) {
            FETCH_SUB(&rt.nspinning, 1, SEQ_CST);
            return;
        }
        for (int k = 0; k < SCHED_SPIN_PAUSES; k++)
            spin_relax();
    }
    FETCH_SUB(&rt.nspinning, 1, SEQ_CST);

    /* Parked stacks give pages back while the worker has nothing to do,
     * and no freed memory waits on it while it sleeps. */
    mote__memory_trim(w, mote__os_now_ns());
    mote__memory_idle(w);

    STORE(&w->sleeping, 1, SEQ_CST);
    FETCH_ADD(&rt.nsleeping, 1, SEQ_CST);
    /* (an orphan told after the trim above: round again, to sweep for it;
     * and a mote_mem_release whose wake found us not yet sleeping: its
     * epoch, bumped before it looked at `sleeping`, is seen here) */
    if (!sched_has_work(w) && !mote__trim_orphans_due(&w->trim) &&
        LOAD(&rt.release_epoch, SEQ_CST) == w->release_seen) {
        int64_t tnext = mote__timer_next(&w->timers), next = tnext;
        if (w->starved_retry && w->starved_retry < next)
            next = w->starved_retry;
        if (w->trim.next < next)
            next = w->trim.next; /* housekeeping only: not a task's timer */
        /* Frees came in since mote__memory_idle: a worker that goes idle
         * later wakes us for them, but one that stays busy never does, so
         * look again soon (not at once: a worker whose blocks another
         * frees as fast as it can would never sleep). */
        if (mote__memory_frees_waiting(w)) {
            int64_t soon = mote__os_now_ns() + SCHED_FREES_RETRY_NS;
            if (soon < next)
                next = soon;
        }
        bool counted = false;
        if (tnext == INT64_MAX) {
            pthread_mutex_lock(&rt.idle_lock);
            rt.nidle_notimer++;
            counted = true;
            int dead = mote__deadlock_check();
            if (dead) {
                rt.result = dead;
                sched_stop_all();
            }
            pthread_mutex_unlock(&rt.idle_lock);
        }
        if (!LOAD(&rt.shutdown, RELAXED)) {
            int64_t wait = -1;
            if (next != INT64_MAX) {
                wait = next - mote__os_now_ns();
                if (wait < 0)
                    wait = 0;
            }
            /* One idle worker waits in epoll, so a ready socket wakes a
             * task at once; the others sleep on their futex. */
            if (wait != 0 && !(polling && mote__netpoll_poll(w, wait, &w->sleeping) >= 0))
                mote__os_futex_wait(&w->sleeping, 1, wait);
        }
        if (counted) {
            pthread_mutex_lock(&rt.idle_lock);
            rt.nidle_notimer--;
            pthread_mutex_unlock(&rt.idle_lock);
        }
    }
    STORE(&w->sleeping, 0, SEQ_CST);
    FETCH_SUB(&rt.nsleeping, 1, SEQ_CST);
    mote__monitor_poke();
}

static void sched_loop(worker *w)
{
    for (;;) {
        task *t = mote__sched_pick(w);
        if (!t && !LOAD(&rt.shutdown, RELAXED))
            t = sched_steal(w);
        if (t) {
            mote__sched_switch(w, NULL, t);
            continue;
        }
        if (LOAD(&rt.shutdown, RELAXED))
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
    sigset_t mask;
    mote__worker_self = w;
    mote__monitor_thread_init(w);
    mote__os_sigpipe_block(&mask); /* see fdio.c */
    mote__overflow_thread_init();
    sanfiber_thread_init(&w->san);
    sched_loop(w);
    sanfiber_thread_fini(&w->san);
    mote__overflow_thread_fini();
    mote__os_sigpipe_restore(&mask);
    mote__worker_self = NULL;
    return NULL;
}

/* ---- a task's life ---------------------------------------------------------- */

/* The books of an exit; on the task's stack, or on the worker's after a
 * sampled task jumped there (sched_exit_sampled). */
static void sched_exit_books(worker *w, task *t)
{
    mote__trim_on_unlist(&w->trim, t);
    list_remove(&w->all, &t->all_link);
    if (t->timer_idx != TIMER_NONE)
        mote__timer_cancel(&w->timers, t);
    mote__assert(t->waits == NULL);
    COUNT(&w->n_exited, 1);
    if (t->is_main)
        sched_stop_all();
    w->dead = t;
}

static _Noreturn void sched_exit(worker *w, task *t)
{
    sched_exit_books(w, t);
    mote__sched_switch(w, t, mote__sched_pick(w));
    __builtin_unreachable();
}

/* A sampled task is measured after it exits (trim.c: the lowest word
 * written), so nothing of the exit may write below the frames its function
 * used: it jumps to the worker's context straight from task_entry, whose
 * call to it reuses the slot of fn's return address, and the worker keeps
 * the books (mote__sched_switch, on landing). */
static _Noreturn void sched_exit_sampled(worker *w, task *t)
{
    w->exited = t;
    sanfiber_enter(&t->san, 1, &w->san);
    mote__arch_jump(&w->sched_ctx);
}

static void task_entry(void *arg)
{
    task *t = arg;
    worker *w = t->worker;
    sanfiber_landed(&t->san);
    sched_release_dead(w);
    uintptr_t rsp;
    __asm__ volatile("mov %%rsp, %0" : "=r"(rsp));
#if !defined(SANFIBER_ASAN) && !defined(SANFIBER_TSAN)
    if (t->hw_sample) {
        /* The release just above ran on this stack, below our frame: wipe
         * its words (trim_on_start zeroed the top page before it), or a
         * shallow task would be measured as deep as the previous task's
         * exit.  Volatile stores, not memset: a call would write a return
         * address into the range.  (Sanitizers poison what lies below a
         * stack pointer; their depths are not exact anyway.) */
        uintptr_t keep = stack_top(&t->stack) - OS_PAGE;
        mote__assert(rsp > keep && rsp - keep <= OS_PAGE);
        for (volatile uint64_t *p = (volatile uint64_t *)keep; (uintptr_t)p < rsp - 8;
             p++)
            *p = 0;
    }
#endif
    mote__stackprof_note_entry(stack_top(&t->stack), rsp);
    t->fn(t->arg);
    if (t->hw_sample)
        sched_exit_sampled(w, t);
    sched_exit(w, t);
}

/* ---- mote_run ------------------------------------------------------------------------ */

static int sched_config(run_config *c)
{
    uint64_t v;
    int r = mote__option_check_all();
    mote__option_read(OPT_WORKERS, &v);
    c->workers = (int)v;
    mote__option_read(OPT_STACK_SIZE, &v);
    c->stack_size = (size_t)v;
    mote__option_read(OPT_STACK_TRIM, &v);
    c->trim = (int)v;
    mote__option_read(OPT_BLOCKING_THREADS, &v);
    c->blocking_threads = (uint32_t)v;
    mote__option_read(OPT_DEBUG, &v);
    c->debug_stalls = v == 1;
    mote__option_read(OPT_SIGQUIT, &v);
    c->sigquit_dump = v == 1;
    mote__option_read(OPT_STACK_GUARD, &v);
    c->guard_mprotect = v == 1;
    mote__option_read(OPT_STACK_FREEZE, &v);
    c->freeze_ns = v == OPT_OFF ? -1 : (int64_t)v;
    c->freeze_explicit = mote__option_is_set(OPT_STACK_FREEZE);
    mote__option_read(OPT_MEMLIMIT, &v);
    c->memlimit = v == OPT_OFF ? 0 : v;
    return r;
}

static void sched_teardown(int started)
{
    /* Join first, lock after: a task still running on another worker may
     * read metrics or spawn (taking ext_lock for reading) until it reaches
     * its next scheduling point, and must not wait on us while we wait on
     * it.  Plain threads see shutdown set and spawn nothing new. */
    for (int i = 0; i < rt.nworkers; i++)
        mote__sched_wake(&rt.w[i]);
    for (int i = 1; i < started; i++)
        pthread_join(rt.w[i].thread, NULL);
    pthread_rwlock_wrlock(&rt.ext_lock);
    /* A plain thread between a claim and its ready still holds a task: let
     * it finish, and make later claims fail (park.c), before destroying. */
    STORE(&rt.teardown, 1, SEQ_CST);
    while (LOAD(&rt.plain_claims, SEQ_CST))
        sched_yield();
    /* Every live task is either started (on its worker's list) or fresh.
     * Records first, for all of them: a discard hook may look at the state
     * of a record's task. */
    for (int i = 0; i < rt.nworkers; i++)
        for (list_node *n = rt.w[i].all.head; n; n = n->next)
            mote__waitq_discard(list_entry(n, task, all_link));
    for (int i = 0; i < rt.nworkers; i++) {
        worker *w = &rt.w[i];
        sched_release_dead(w);
        list_node *n;
        while ((n = list_pop_front(&w->all))) {
            task *t = list_entry(n, task, all_link);
            mote__trim_on_unlist(&w->trim, t);
            if (t->timer_idx != TIMER_NONE)
                mote__timer_cancel(&w->timers, t);
            if (t->trim_queued)
                mote__trim_forget(&w->trim, t);
            sanfiber_destroy(&t->san);
            mote__task_destroy(t, &w->stacks);
        }
        task *t;
        while ((t = fresh_take(w, UINT32_MAX, true, NULL))) {
            while (t) {
                task *nx = t->next;
                mote__task_destroy(t, &w->stacks);
                t = nx;
            }
        }
        mote__trim_fini(&w->trim);
        mote__dump_forget(w); /* an answer that came after its dump gave up */
        mote__stackprof_fold(&w->stackprof);
        mote__timer_free(&w->timers);
        mote__stack_cache_drain(&w->stacks);
    }
    mote__netpoll_run_end(); /* the program's descriptors blocking again */
    mote__sched_stats_fold();
    mote__freeze_stop(); /* its handler reads the stack registry */
    mote__stack_reset();
    worker *ws = rt.w;
    STORE(&rt.w, NULL, RELEASE);
    rt.nworkers = 0;
    pthread_rwlock_unlock(&rt.ext_lock);
    mote_free(ws);
    if (rt.cfg.memlimit) /* the run's share of it ends with the run */
        mote__heap_limit_share(0, 0);
}

/* mote_run cannot start: says why, where a limit is the likely cause. */
static void sched_say_no_memory(const char *what)
{
    if (rt.cfg.memlimit)
        fprintf(stderr,
                "mote: no memory for %s: MOTE_MEMLIMIT is %llu bytes and the process "
                "holds %llu already\n",
                what, (unsigned long long)rt.cfg.memlimit,
                (unsigned long long)mote__os_rss_bytes());
    else
        fprintf(stderr, "mote: no memory for %s\n", what);
}

/* For the heap profiler (heap.h): the top of the running task's stack
 * when sp is on it, so a sample taken in a task has its whole stack, not
 * only the allocating frame.  Initial-exec TLS and two loads. */
static uintptr_t sched_task_stack_top(uintptr_t sp)
{
    const task *t = mote__current_task;
    return t && stack_holds_sp(&t->stack, sp) ? stack_top(&t->stack) : 0;
}

int mote_run(mote_fn main_fn, void *arg)
{
    if (!main_fn)
        return -EINVAL;
    int expect = 0;
    if (!CAS(&rt.state, &expect, 1, ACQ_REL))
        return -EBUSY;
    int r = sched_config(&rt.cfg);
    if (r) {
        STORE(&rt.state, 0, RELEASE);
        return r;
    }
    mote__overflow_install();
    mote__heap_set_task_stacks(sched_task_stack_top);
    mote__stack_configure(rt.cfg.guard_mprotect);
    mote__freeze_start(rt.cfg.freeze_ns, rt.cfg.freeze_explicit, rt.cfg.trim == TRIM_OFF,
                       rt.cfg.guard_mprotect, sched_orphaned);
    mote__offload_configure(rt.cfg.blocking_threads);
    int n = rt.cfg.workers;
    worker *ws = mote_aligned_alloc(64, sizeof(worker) * (size_t)n);
    if (!ws) {
        sched_say_no_memory("the workers");
        STORE(&rt.state, 0, RELEASE);
        return -ENOMEM;
    }
    memset(ws, 0, sizeof(worker) * (size_t)n);
    rt.default_cls = mote__stack_class_of(rt.cfg.stack_size);
    rt.result = 0;
    STORE(&rt.starve_said, 0, RELAXED);
    rt.next_id = 1;
    rt.ext_spawned = 0;
    rt.external_seen = 0;
    rt.nsleeping = rt.nspinning = 0;
    rt.spin_max = mote__os_ncpus();
    rt.nidle_notimer = 0;
    rt.mem_used = 0;
    rt.mem_checked = 0;
    rt.pressure = 0;
    STORE(&rt.memlimit, 0, RELAXED); /* (set once main has its task) */
    STORE(&rt.teardown, 0, RELAXED);
    STORE(&rt.shutdown, 0, RELAXED);
    for (int i = 0; i < n; i++) {
        ws[i].index = i;
        ws[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
        mote__trim_init(&ws[i].trim, rt.cfg.trim, &ws[i].stackprof, &ws[i].all);
    }
    rt.nworkers = n;
    /* Published under ext_lock: plain threads read the configuration only
     * after seeing the run (task_api.c). */
    pthread_rwlock_wrlock(&rt.ext_lock);
    STORE(&rt.w, ws, RELEASE);
    pthread_rwlock_unlock(&rt.ext_lock);

    worker *w0 = &ws[0];
    w0->thread = pthread_self();
    mote__worker_self = w0;
    mote__monitor_thread_init(w0);
    task *m;
    r = mote__task_create(main_fn, arg, "main", rt.default_cls, &m);
    if (r == 0 && !sched_adopt(w0, m)) { /* it went back to the fresh queue */
        fresh_take(w0, 1, true, NULL);
        mote__task_destroy(m, &w0->stacks);
        r = -ENOMEM;
    }
    if (r) {
        if (r == -ENOMEM)
            sched_say_no_memory("the main task");
        mote__worker_self = NULL;
        sched_teardown(1);
        STORE(&rt.state, 0, RELEASE);
        return r;
    }
    m->is_main = true;
    /* Only now the limit: under one below what the process holds, the run
     * starts and its spawns fail.  A plain thread's mote_go published
     * the heap's share of it before main had its task and stack, and main
     * then failed to start in 1 run of 40 of a loop (CI, stop 37). */
    STORE(&rt.memlimit, rt.cfg.memlimit, RELEASE);
    COUNT(&w0->n_spawned, 1);
    rq_push(w0, m);

    sigset_t mask;
    mote__os_sigpipe_block(&mask);
    mote__overflow_thread_init();
    sanfiber_thread_init(&w0->san);
    int started = 1;
    for (; started < n; started++) {
        if (pthread_create(&ws[started].thread, NULL, sched_thread, &ws[started])) {
            fprintf(stderr, "mote: cannot start worker thread %d of %d\n", started + 1,
                    n);
            rt.result = -EAGAIN;
            STORE(&rt.shutdown, 1, SEQ_CST);
            break;
        }
    }
    if (mote__monitor_start() != 0)
        fprintf(stderr, "mote: no monitor thread: stalls go undetected in this run\n");
    sched_loop(w0);
    sanfiber_thread_fini(&w0->san);
    mote__overflow_thread_fini();
    mote__os_sigpipe_restore(&mask);
    mote__worker_self = NULL;
    mote__monitor_stop();
    sched_teardown(started);
    r = rt.result;
    STORE(&rt.state, 0, RELEASE);
    return r;
}
