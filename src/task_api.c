/*
 * task_api.c - the public task calls: spawning (from tasks and from plain
 * threads), identity, yield, sleep and the clock.
 *
 * A spawn from a task pushes onto its own worker's fresh queue (idle
 * workers steal from there).  A spawn from a plain thread holds ext_lock
 * for reading, so the run cannot end under it, reads the run's settings
 * only after seeing the run, queues on one worker and makes sure some idle
 * worker is awake to take the task if that one is busy.
 */
#include <errno.h>
#include <sched.h>

#include "os/os.h"
#include "runtime.h"

#define rt mote__rt

/* Reads the fields of opts that the caller's mote.h had: size 0 is the
 * original layout (name, stack_size). */
static int task_opts(const mote_task_opts *opts, const char **name, int *cls)
{
    *name = NULL;
    *cls = -1;
    if (!opts)
        return 0;
    if (opts->size != 0 &&
        opts->size < offsetof(mote_task_opts, stack_size) + sizeof opts->stack_size)
        return -EINVAL;
    *name = opts->name;
    if (opts->stack_size) {
        *cls = mote__stack_class_of(opts->stack_size);
        if (*cls < 0)
            return -EINVAL;
    }
    return 0;
}

/* MOTE_MEMLIMIT: past it, no new task (the RSS is re-read if the cached
 * figure says so, so a freed process recovers at once). */
static bool task_over_limit(void)
{
    uint64_t lim = LOAD(&rt.memlimit, RELAXED);
    return lim && mote__memory_used(false) >= lim && mote__memory_used(true) >= lim;
}

int mote_go_ex(mote_fn fn, void *arg, const mote_task_opts *opts)
{
    if (!fn)
        return -EINVAL;
    const char *name;
    int cls;
    int r = task_opts(opts, &name, &cls);
    if (r)
        return r;
    worker *w = mote__worker_self;
    if (w) {
        if (task_over_limit())
            return -ENOMEM;
        task *t;
        r = mote__task_create(fn, arg, name, cls < 0 ? rt.default_cls : cls, &t);
        if (r)
            return r;
        COUNT(&w->n_spawned, 1);
        fresh_push(w, t);
        mote__sched_wake_idle(w);
        return 0;
    }
    pthread_rwlock_rdlock(&rt.ext_lock);
    if (!LOAD(&rt.state, ACQUIRE) || LOAD(&rt.shutdown, ACQUIRE) ||
        !LOAD(&rt.w, ACQUIRE)) {
        pthread_rwlock_unlock(&rt.ext_lock);
        return -EPERM;
    }
    if (task_over_limit()) {
        pthread_rwlock_unlock(&rt.ext_lock);
        return -ENOMEM;
    }
    STORE(&rt.external_seen, 1, SEQ_CST);
    task *t;
    r = mote__task_create(fn, arg, name, cls < 0 ? rt.default_cls : cls, &t);
    if (r == 0) {
        t->id = FETCH_ADD(&rt.next_id, 1, RELAXED);
        FETCH_ADD(&rt.ext_spawned, 1, RELAXED);
        uint32_t i = FETCH_ADD(&rt.ext_rr, 1, RELAXED);
        worker *v = &rt.w[i % (uint32_t)rt.nworkers];
        fresh_push(v, t);
        /* v may be busy, or stuck in a system call: then an idle worker
         * steals the task. */
        if (!mote__sched_wake(v))
            mote__sched_wake_idle(v);
    }
    pthread_rwlock_unlock(&rt.ext_lock);
    return r;
}

int mote_go(mote_fn fn, void *arg) { return mote_go_ex(fn, arg, NULL); }

uint64_t mote_id(void)
{
    task *t = mote__self();
    return t ? t->id : 0;
}

const char *mote_name(void)
{
    task *t = mote__self();
    static __thread char buf[128];
    return t ? mote__task_display_name(t, buf, sizeof buf) : NULL;
}

void mote_yield(void)
{
    worker *w = mote__worker_self;
    task *t = w ? w->current : NULL;
    if (!t) {
        sched_yield();
        return;
    }
    rq_push(w, t);
    task *next = mote__sched_pick(w);
    if (next != t)
        mote__sched_switch(w, t, next);
}

int64_t mote_now(void) { return mote__os_now_ns(); }

int mote_sleep(int64_t ns)
{
    if (!mote__self())
        return -EPERM;
    if (ns <= 0) {
        mote_yield();
        return 0;
    }
    mote__park_prepare("sleep", NULL);
    int r = mote__park_until(mote__park_deadline(ns));
    return r == -ENOMEM ? r : 0;
}

const char *mote_version(void) { return MOTE_VERSION_STRING; }
