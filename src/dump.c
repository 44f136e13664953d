/*
 * dump.c - mote_tasks_dump: every task with its id, name, state, for how
 * long, and its backtrace.
 *
 * A worker's tasks are its own (lists, stacks, states), so each worker
 * writes its part itself, at its next scheduling point, when it sees the
 * dump epoch move (mote__dump_answer); the caller wakes the sleepers and
 * waits up to DUMP_WAIT_NS for the answers.  A worker that does not answer
 * in time is busy in one task (or stuck in a system call): the dump names
 * that task (through the monitor's hazard protocol) and says so.  The
 * caller's own worker answers at once: the caller is its running task.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backtrace.h"
#include "freeze.h"
#include "os/os.h"
#include "runtime.h"

#define rt           mote__rt
#define DUMP_WAIT_NS (200 * 1000000LL)

static void dump_state(FILE *f, worker *w, const task *t, int64_t now)
{
    if (t == w->current) {
        fprintf(f, "running");
        return;
    }
    int st = LOAD(&t->wait_state, ACQUIRE);
    if (st != TASK_WAITING || !t->wait_why) {
        fprintf(f, "runnable");
        return;
    }
    const char *why = t->wait_why;
    intptr_t obj = (intptr_t)t->wait_obj;
    if (!strcmp(why, "fd read"))
        fprintf(f, "waiting on fd %ld for reading", (long)obj);
    else if (!strcmp(why, "fd write"))
        fprintf(f, "waiting on fd %ld for writing", (long)obj);
    else if (!strcmp(why, "sleep"))
        fprintf(f, "sleeping");
    else if (!strcmp(why, "offload"))
        fprintf(f, "in mote_offload");
    else if (t->wait_obj)
        fprintf(f, "waiting: %s %p", why, t->wait_obj);
    else
        fprintf(f, "waiting: %s", why);
    int64_t ms = (now - LOAD(&t->parked_at, RELAXED)) / 1000000;
    fprintf(f, ", %lld ms", (long long)(ms > 0 ? ms : 0));
    if ((LOAD(&t->fz, RELAXED) & FZ_STATE) == FZ_FROZEN)
        fprintf(f, ", stack frozen (%s)",
                LOAD(&t->fz, RELAXED) & FZ_DEEP ? "deep" : "page tables kept");
}

void mote__dump_forget(worker *w)
{
    free(w->dump_text); /* open_memstream's buffer: libc malloc */
    w->dump_text = NULL;
    w->dump_len = 0;
}

void mote__dump_answer(worker *w)
{
    uint32_t epoch = LOAD(&rt.dump_epoch, ACQUIRE);
    if (epoch == w->dump_seen)
        return;
    /* An answer still here came too late for its dump, which has gone on
     * without it (the caller takes answers only for its own epoch, under
     * dump_lock, and the epoch moves only under it: nobody reads this). */
    mote__dump_forget(w);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f) {
        int64_t now = mote__os_coarse_ns();
        uint64_t n = 0;
        for (list_node *l = w->all.head; l; l = l->next)
            n++;
        fprintf(f, "worker %d: %llu tasks, %u not started\n", w->index,
                (unsigned long long)n, LOAD(&w->fresh_n, RELAXED));
        for (list_node *l = w->all.head; l; l = l->next) {
            const task *t = list_entry(l, task, all_link);
            char name[128];
            fprintf(f, "  task %llu (%s) ", (unsigned long long)t->id,
                    mote__task_display_name(t, name, sizeof name));
            dump_state(f, w, t, now);
            fputc('\n', f);
            if (t == w->current) {
                uintptr_t pcs[24];
                int k = mote__backtrace_from(t, (uintptr_t)__builtin_frame_address(0),
                                             pcs, 24);
                mote__backtrace_print_pcs(f, pcs, k, "      ");
            } else {
                mote__backtrace_print(f, t, "      ");
            }
        }
        fclose(f);
    }
    w->dump_text = text;
    w->dump_len = text ? len : 0;
    STORE(&w->dump_seen, epoch, RELEASE);
}

/* Writes all of buf to fd, keeping the first error in *err. */
static void dump_write(int fd, const char *buf, size_t len, int *err)
{
    int r = mote__os_write_all(fd, buf, len);
    if (r < 0 && !*err)
        *err = r;
}

/* A worker that did not answer: name the task it is running. */
static void dump_busy(int fd, worker *w, int *err)
{
    char line[384];
    task *t = LOAD(&w->running, SEQ_CST);
    if (t) {
        STORE(&w->hazard, t, SEQ_CST);
        if (LOAD(&w->running, SEQ_CST) == t) {
            char name[128];
            const char *nm = mote__task_display_name(t, name, sizeof name);
            long nr;
            char st = mote__os_thread_state(w->tid, &nr);
            snprintf(line, sizeof line,
                     "worker %d: busy, did not reach a scheduling point within %lld ms: "
                     "task %llu (%s) is %s\n",
                     w->index, (long long)(DUMP_WAIT_NS / 1000000),
                     (unsigned long long)t->id, nm,
                     st == 'R' ? "running" : "in a blocking system call");
            STORE(&w->hazard, NULL, SEQ_CST);
            dump_write(fd, line, strlen(line), err);
            return;
        }
        STORE(&w->hazard, NULL, SEQ_CST);
    }
    snprintf(line, sizeof line, "worker %d: did not answer in time\n", w->index);
    dump_write(fd, line, strlen(line), err);
}

int mote_tasks_dump(int fd)
{
    if (fd < 0 || fcntl(fd, F_GETFD) < 0)
        return -EBADF;
    int err = 0;
    pthread_rwlock_rdlock(&rt.ext_lock);
    worker *ws = LOAD(&rt.w, ACQUIRE);
    if (!ws || LOAD(&rt.shutdown, ACQUIRE)) {
        pthread_rwlock_unlock(&rt.ext_lock);
        static const char none[] = "mote: no run in progress: no tasks\n";
        dump_write(fd, none, sizeof none - 1, &err);
        return err;
    }
    worker *self = mote__worker_self;
    /* One dump at a time.  A holder sleeps while it waits for answers, so
     * another task of its worker must not spin here (it would keep the
     * holder from ever running again): it sleeps too. */
    while (!spin_trylock(&rt.dump_lock))
        mote__park_nap(1000000);
    FETCH_ADD(&rt.dump_epoch, 1, RELEASE);
    uint32_t epoch = LOAD(&rt.dump_epoch, RELAXED);
    if (self)
        mote__dump_answer(self);
    for (int i = 0; i < rt.nworkers; i++)
        mote__sched_wake(&ws[i]);
    int64_t deadline = mote__os_now_ns() + DUMP_WAIT_NS;
    for (;;) {
        bool all = true;
        for (int i = 0; i < rt.nworkers; i++)
            all &= LOAD(&ws[i].dump_seen, ACQUIRE) == epoch;
        if (all || mote__os_now_ns() >= deadline)
            break;
        mote__park_nap(1000000); /* a task's worker runs the others meanwhile */
    }
    char head[128];
    snprintf(head, sizeof head, "mote: task dump: %d workers\n", rt.nworkers);
    dump_write(fd, head, strlen(head), &err);
    for (int i = 0; i < rt.nworkers; i++) {
        worker *w = &ws[i];
        if (LOAD(&w->dump_seen, ACQUIRE) != epoch) {
            dump_busy(fd, w, &err);
            continue;
        }
        if (w->dump_text) {
            dump_write(fd, w->dump_text, w->dump_len, &err);
            mote__dump_forget(w);
        }
    }
    spin_unlock(&rt.dump_lock);
    pthread_rwlock_unlock(&rt.ext_lock);
    return err;
}
