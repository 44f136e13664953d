/*
 * freeze.h - frozen stacks: a task parked longer than MOTE_STACK_FREEZE has
 * the live part of its stack (saved stack pointer to slot top) copied into
 * a compact heap image and its pages given back; the bytes come back at the
 * same addresses before it runs again and whenever anything touches them,
 * from any thread and from the kernel (a system call's copy into a frozen
 * stack waits for the thaw instead of failing).
 *
 * The mechanism is userfaultfd (docs/architecture.md, "Stacks", step 5;
 * the measurements are in bench/results/REPORT.md, section 5): a chunk is
 * registered for missing-page and write-protect faults when its first task
 * freezes; a freeze write-protects the live pages, copies them, drops
 * them and releases the protection, so a write racing with it waits in the
 * kernel and is never lost; a thaw maps the bytes back with one
 * UFFDIO_COPY, which also wakes every thread waiting on them.  A fault
 * handler thread thaws for everyone but the owner, which thaws before it
 * resumes the task, and the runtime, which thaws before it writes into a
 * parked task's frame.
 *
 * A task's freeze state is t->fz: the state in the low bits, FZ_WANTED (a
 * thaw was asked for while freezing: the freezer undoes it) and FZ_LOCK (a
 * spin bit held only to decide and publish, never across a system call).
 * Only the owner worker moves ACTIVE -> FREEZING; whoever wins FROZEN ->
 * THAWING (owner, fault handler, runtime) alone touches the image.
 *
 * Deep freeze.  A 2 MiB-aligned window whose slots all hold frozen tasks
 * is emptied whole: guard markers removed, then one MADV_DONTNEED over it,
 * which lets the kernel free the window's page table (CONFIG_PT_RECLAIM):
 * ~512 bytes a task, as much as its image.  Its tasks are marked FZ_DEEP;
 * a thaw puts the guard back, and until then the fault handler turns an
 * access to the missing guard into a guard fault (it installs the marker
 * and lets the access retry).
 */
#ifndef MOTE_FREEZE_H
#define MOTE_FREEZE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "atomic.h"
#include "task.h"

enum { FZ_ACTIVE = 0, FZ_FREEZING = 1, FZ_FROZEN = 2, FZ_THAWING = 3 };
#define FZ_STATE  3u
#define FZ_WANTED 4u
#define FZ_LOCK   8u
#define FZ_DEEP   16u /* frozen, and its 2 MiB window was emptied: no guard */
#define FZ_SHORT  32u /* thawed soon after its freeze: raise its threshold */
#define FZ_LONG   64u /* thawed long after: lower it */
/* Thawed in place by another thread (a record written beside it, a stray
 * access) while it stays parked: it left its worker's candidate list when
 * it froze, so the thaw tells the worker (the hook given to
 * mote__freeze_start), which sweeps its tasks for this bit (trim.c) and
 * queues them again.  The owner clears it, at resume or in the sweep. */
#define FZ_ORPHAN 128u

enum freeze_cause { FREEZE_RESUME, FREEZE_RUNTIME, FREEZE_FAULT, FREEZE_NCAUSE };

/* Why freezing is off, for /stacks/freeze/off-reason:enum. */
enum freeze_off {
    FREEZE_ON = 0,
    FREEZE_OFF_CONFIG, /* MOTE_STACK_FREEZE=off */
    FREEZE_OFF_DENIED, /* no full-mode userfaultfd (privilege, seccomp) */
    FREEZE_OFF_KERNEL, /* no userfaultfd or no write-protect (ENOSYS ...) */
    FREEZE_OFF_GUARDS, /* mprotect guards (MOTE_STACK_GUARD=mprotect) */
    FREEZE_OFF_VALGRIND,
    FREEZE_OFF_TRIM, /* MOTE_STACK_TRIM=off: a stack is frozen by its trim */
};

typedef struct fz_image {
    uint32_t len;                      /* bytes from the saved sp to the top */
    uint32_t after_ms;                 /* the task's threshold when it froze */
    int64_t frozen_at;                 /* coarse clock */
    _Alignas(8) unsigned char bytes[]; /* copied by words */
} fz_image;

/* Tasks that are not ACTIVE now, process-wide: while it is 0 no check
 * below costs more than this load. */
extern uint64_t mote__freeze_nfrozen;

/* At the start of a run: threshold_ns < 0 turns freezing off; explicit says
 * the user asked for it (then a user-mode-only userfaultfd is accepted,
 * with a warning); trim_off: MOTE_STACK_TRIM=off, which turns it off too
 * (a task is frozen by its trim), with a message when it was asked for.
 * Starts the fault handler.  Never fails the run.
 * orphaned(w), on any thread, tells worker w that a task of its carries
 * FZ_ORPHAN; it is not called once mote__freeze_stop has returned. */
void mote__freeze_start(int64_t threshold_ns, bool explicit, bool trim_off,
                        bool mprotect_guards, void (*orphaned)(struct worker *w));
/* At the end of a run, when no task remains: stops the handler. */
void mote__freeze_stop(void);
/* ns a task must stay parked to be frozen, or -1 when freezing is off. */
int64_t mote__freeze_threshold(void);

#define FZ_BATCH 64

/* Tasks whose live stack is larger are not frozen: a task parked deep in
 * its stack saves little, and the bounce buffers stay small. */
#define FZ_MAX_LIVE (64u * 1024)

/* Whether parked t may be frozen, by the size of its live stack. */
static inline bool mote__freeze_fits(const task *t)
{
    return stack_top(&t->stack) - (uintptr_t)t->ctx.sp <= FZ_MAX_LIVE;
}

/* A worker's scratch space for a batch. */
typedef struct fz_cand {
    task *t;
    uintptr_t lo, top; /* the live pages */
    size_t slot;       /* slot size, for runs of neighbours */
    int chunk;
    fz_image *img;
    bool taken; /* FREEZING, pages write-protected */
} fz_cand;
/* Pagemap entries read at once: a batch's neighbours share one read (a
 * read each cost 0.8 us of a 7.4 us freeze). */
#define FZ_PM_WINDOW 1024
typedef struct fz_scratch {
    fz_cand c[FZ_BATCH];
    struct iovec iov[FZ_BATCH];
    uint64_t pm[FZ_PM_WINDOW]; /* entries of the pages from pm_lo */
    uintptr_t pm_lo;
    size_t pm_n;
} fz_scratch;

/* The owner worker, between tasks: freezes the candidates (parked, still
 * waiting, off every list of the worker, sorted by stack address; at most
 * FZ_BATCH).  Returns how many froze; the others stay as they were. */
size_t mote__freeze_batch(task *const *cand, size_t n, fz_scratch *scratch);

/* Returns when t's stack is mapped (any thread; cause for the metrics). */
/* stays: t may stay parked after this thaw (FZ_ORPHAN then); false when
 * it is about to run (its resume, or a waker that claims it next). */
void mote__freeze_thaw(task *t, enum freeze_cause cause, bool stays);

/* The owner, before it switches to t. */
void mote__freeze_resume_slow(task *t);
static inline void mote__freeze_resume(task *t)
{
    if (__builtin_expect(
            LOAD(&t->fz, ACQUIRE) & (FZ_STATE | FZ_SHORT | FZ_LONG | FZ_ORPHAN), 0))
        mote__freeze_resume_slow(t);
}

/* Owner, t parked and not running: clears FZ_ORPHAN and applies the
 * outcome of the thaw that set it (as a resume does); whether it was set. */
bool mote__freeze_adopt(task *t);

/* Doubles t's freeze threshold, up to 128x (its 3-bit fz_shift). */
static inline void mote__freeze_backoff(task *t)
{
    if (t->fz_shift < 7)
        t->fz_shift++;
}

/* The ns t must stay parked before its worker freezes it. */
static inline int64_t mote__freeze_after(const task *t, int64_t threshold)
{
    return threshold << t->fz_shift;
}

/* The runtime, before it reads or writes a parked task's frame at p (a wait
 * record, a channel value's destination): thaws its task if frozen, without
 * the fault handler's round trip, and holds it: its worker does not freeze
 * it again until the caller lets go (mote__freeze_let_go, after the access,
 * with the queue's lock still held).  Without the hold, a thaw's wake-up of
 * the owner could preempt the caller right before its access, for longer
 * than the owner takes to sweep the task up and freeze it again: the access
 * then faulted (under load, 1 run in 10 of test_freeze's 4,000 hand-offs).
 * Correctness never depended on it, only the cost: the access would fault
 * and be thawed anyway.  Returns the held task, or NULL (nothing frozen in
 * the process: a freeze that starts now makes the access wait, or, only if
 * the caller is preempted right here, fault).  _touch: the task may stay
 * parked (a neighbour's record, a look at its state); _touch_waking: the
 * caller claims it next, or someone else did (no sweep is needed for it). */
struct task *mote__freeze_touch_slow(const void *p, bool stays);
static inline struct task *mote__freeze_touch(const void *p)
{
    if (__builtin_expect(LOAD(&mote__freeze_nfrozen, RELAXED) != 0, 0))
        return mote__freeze_touch_slow(p, true);
    return NULL;
}
static inline struct task *mote__freeze_touch_waking(const void *p)
{
    if (__builtin_expect(LOAD(&mote__freeze_nfrozen, RELAXED) != 0, 0))
        return mote__freeze_touch_slow(p, false);
    return NULL;
}
/* Ends the hold a touch took (h may be NULL).  The task must still be
 * alive: its record linked where the caller's lock keeps it, or claimed by
 * the caller and not yet readied. */
static inline void mote__freeze_let_go(struct task *h)
{
    if (h)
        FETCH_SUB(&h->fz_hold, 1, RELEASE);
}

/* Frees the images the fault handler thawed (it takes no heap lock: see
 * freeze.c); a worker's chores, and the end of a run. */
extern void *mote__freeze_graveyard;
void mote__freeze_reap_slow(void);
static inline void mote__freeze_reap(void)
{
    if (__builtin_expect(LOAD(&mote__freeze_graveyard, RELAXED) != NULL, 0))
        mote__freeze_reap_slow();
}

/* Reads len bytes at addr of t's stack without thawing it (diagnostics):
 * from the image when frozen.  false when they cannot be read. */
bool mote__freeze_peek(const task *t, uintptr_t addr, void *buf, size_t len);

/* t is being destroyed (end of a run): drops its image; true if it was
 * frozen (its stack's pages are then absent: leave them alone). */
bool mote__freeze_forget(task *t);

/* Metrics. */
typedef struct freeze_stats {
    uint64_t mode;       /* 0 off, 1 full, 2 user-mode-only */
    uint64_t off_reason; /* enum freeze_off */
    uint64_t frozen, bytes, freezes, cancelled, stray, ns;
    uint64_t windows; /* 2 MiB windows emptied, page table and all */
    uint64_t thaw_ns; /* time spent thawing, every cause */
    uint64_t thaws[FREEZE_NCAUSE];
} freeze_stats;
void mote__freeze_stats(freeze_stats *s);

#endif /* MOTE_FREEZE_H */
