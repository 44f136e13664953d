/*
 * freeze.c - frozen stacks (see freeze.h for the mechanism and the state
 * word; the proof sketch follows, the measurements are in
 * bench/results/REPORT.md, section 5).
 *
 * Why no write is lost.  Take a live page P of a task being frozen and a
 * thread W storing to it, in user mode or inside a system call:
 *  - a store that completes before the write-protect ioctl returns is in P
 *    (the ioctl flushes every TLB before it returns), and the copy reads P
 *    after it;
 *  - a store attempted after that faults: on the protection until P is
 *    dropped, on the missing page after; either way W sleeps in the kernel
 *    and its message reaches the handler, which marks the task FZ_WANTED
 *    while it is FREEZING (the freezer then puts the image back itself) or
 *    thaws it once FROZEN.  P is mapped again only by a restore, which
 *    writes the image taken after the protection: W's store lands on it.
 * Tasks are pinned to their worker, which is the one freezing them, so a
 * frozen task never runs: it is thawed before its worker switches to it.
 *
 * State: one userfaultfd for the process (opened at the first run that
 * freezes), a handler thread per run, counters.  Locks: each task's FZ_LOCK
 * bit, a leaf lock; the handler takes no other, and no heap lock either (a
 * thread that faults on a stack page while holding one waits for the
 * handler): the images it thaws go to a graveyard the workers empty.
 */
#include "freeze.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "os/os.h"
#include "sanitizer.h"
#include "spin.h"
#include "stack.h"

#if defined(MOTE_HAVE_VALGRIND_H)
#include <valgrind/valgrind.h>
#endif

uint64_t mote__freeze_nfrozen;

static struct {
    int ufd;           /* -1: none yet */
    int pagemap;       /* /proc/self/pagemap, opened with ufd */
    int mode;          /* OS_UFFD_* of ufd */
    int off_reason;    /* enum freeze_off for this run */
    int64_t threshold; /* ns; -1 off */
    int stop_fd;       /* eventfd that stops the handler */
    pthread_t handler;
    bool handler_on;
    uint64_t frozen, bytes, freezes, cancelled, stray, ns, windows, thaw_ns; /* atomic */
    uint64_t thaws[FREEZE_NCAUSE];                                           /* atomic */
    void (*orphaned)(struct worker *w); /* the run's (atomic) */
    uint32_t telling;                   /* atomic: thaws that may call it */
} fz = {.ufd = -1, .pagemap = -1, .stop_fd = -1, .threshold = -1};

/* ---- the state word --------------------------------------------------- */

static uint8_t fz_lock(task *t)
{
    for (;;) {
        uint8_t v = LOAD(&t->fz, RELAXED);
        if (!(v & FZ_LOCK) && CAS_WEAK(&t->fz, &v, (uint8_t)(v | FZ_LOCK), ACQUIRE))
            return v;
        spin_relax();
    }
}

/* Publishes v (state and FZ_WANTED) and drops the lock. */
static void fz_unlock(task *t, uint8_t v)
{
    STORE(&t->fz, (uint8_t)(v & ~FZ_LOCK), RELEASE);
}

/* ---- copying stack bytes ------------------------------------------------ */

/* The live bytes, word by word.  Not instrumented (SANITIZER_UNCHECKED):
 * ASan keeps redzones between locals poisoned, and TSan cannot see that
 * the write-protection orders this read after every store it can return
 * (freeze.h). */
SANITIZER_UNCHECKED static void fz_copy_words(unsigned char *dst, uintptr_t src,
                                              size_t len)
{
    const volatile uint64_t *s = (const volatile uint64_t *)src;
    uint64_t *d = (uint64_t *)(void *)dst;
    for (size_t i = 0; i < len / 8; i++)
        d[i] = s[i];
}

/* [src, top) into dst, the pages from lo in `empty` as the zeros they
 * hold: a page the task never wrote (a large local array left alone) is
 * missing, and reading it would fault to the handler, which leaves a
 * freezing task's faults waiting for its freezer, here: the worker hung
 * for good. */
static void fz_copy_out(unsigned char *dst, uintptr_t src, uintptr_t top, uintptr_t lo,
                        uint64_t empty)
{
    while (src < top) {
        uintptr_t page = src & ~(uintptr_t)(OS_PAGE - 1), end = page + OS_PAGE;
        size_t n = (end < top ? end : top) - src;
        if (empty >> ((page - lo) / OS_PAGE) & 1)
            memset(dst, 0, n);
        else
            fz_copy_words(dst, src, n);
        dst += n;
        src += n;
    }
}

/* Bounce buffers for UFFDIO_COPY, which copies whole pages from a
 * page-aligned source (FZ_MAX_LIVE + a page each): a few kept for the
 * process and shared by every thread that thaws.  (One per thread, kept in
 * TLS, went with its thread: the thaw thread's, 68 KiB a run.)  `lock` is
 * a leaf lock. */
#define FZ_BOUNCE_KEEP 4
static struct {
    int lock;
    unsigned n;
    unsigned char *buf[FZ_BOUNCE_KEEP];
} fz_bounces;

/* And one more for when the heap has none (MOTE_MEMLIMIT, or no memory):
 * a thaw must not fail, since its task's stack is nowhere else.  It serves
 * one thaw at a time (each holds it for one copy); BSS, so resident only
 * once used. */
static unsigned char fz_reserve[FZ_MAX_LIVE + OS_PAGE] __attribute__((aligned(OS_PAGE)));
static int fz_reserve_lock;
/* The fault handler thread has one of its own and never waits for the
 * others: a thread holding one (or the heap's lock) may fault on a stack
 * page a trim gave back, which only the handler can fill (seen: a thaw
 * holding the reserve met a page in memcpy's lazy binding while the
 * handler waited for the reserve). */
static unsigned char fz_handler_buf[FZ_MAX_LIVE + OS_PAGE]
    __attribute__((aligned(OS_PAGE)));
static __thread bool fz_in_handler;

/* A thawed task's image, once restored.  The handler's go to the graveyard
 * (a lock-free stack, linked through the images): its mote_free could wait
 * for a heap lock held by a thread that is itself waiting for the handler,
 * faulting on its own stack (a worker freeing a dead task, on the stack of
 * the task it just thawed and resumed). */
typedef struct fz_grave {
    struct fz_grave *next;
} fz_grave;
void *mote__freeze_graveyard;

static void fz_image_free(fz_image *img)
{
    if (!fz_in_handler) {
        mote_free(img);
        return;
    }
    fz_grave *g = (fz_grave *)(void *)img;
    void *old = LOAD(&mote__freeze_graveyard, RELAXED);
    do {
        g->next = old;
    } while (!CAS_WEAK(&mote__freeze_graveyard, &old, (void *)g, RELEASE));
}

void mote__freeze_reap_slow(void)
{
    fz_grave *g = XCHG(&mote__freeze_graveyard, NULL, ACQUIRE);
    while (g) {
        fz_grave *next = g->next;
        mote_free(g);
        g = next;
    }
}

static unsigned char *fz_bounce_take(void)
{
    if (fz_in_handler)
        return fz_handler_buf;
    unsigned char *b = NULL;
    spin_lock(&fz_bounces.lock);
    if (fz_bounces.n)
        b = fz_bounces.buf[--fz_bounces.n];
    spin_unlock(&fz_bounces.lock);
    if (!b)
        b = mote_aligned_alloc(OS_PAGE, FZ_MAX_LIVE + OS_PAGE);
    if (!b) {
        spin_lock(&fz_reserve_lock);
        b = fz_reserve;
    }
    return b;
}

static void fz_bounce_give(unsigned char *b)
{
    if (b == fz_handler_buf)
        return;
    if (b == fz_reserve) {
        spin_unlock(&fz_reserve_lock);
        return;
    }
    spin_lock(&fz_bounces.lock);
    if (fz_bounces.n < FZ_BOUNCE_KEEP) {
        fz_bounces.buf[fz_bounces.n++] = b;
        b = NULL;
    }
    spin_unlock(&fz_bounces.lock);
    mote_free(b);
}

/* Puts t's image back at [lo, top), mapping those pages and waking every
 * thread blocked on them (so it comes last; a deep task's guard first).
 * The caller owns the THAWING (or FREEZING) state. */
static int fz_restore(task *t, const fz_image *img, bool deep)
{
    uintptr_t top = stack_top(&t->stack), sp = top - img->len;
    uintptr_t lo = sp & ~(uintptr_t)(OS_PAGE - 1);
    if (deep)
        mote__os_guard((void *)(stack_lo(&t->stack) - STACK_GUARD), STACK_GUARD, true);
    unsigned char *bounce = fz_bounce_take();
    memset(bounce, 0, sp - lo);
    memcpy(bounce + (sp - lo), img->bytes, img->len);
    int r = mote__os_uffd_copy(fz.ufd, (void *)lo, bounce, top - lo);
    fz_bounce_give(bounce);
    /* -EEXIST would mean a page came back behind our back: a lost freeze */
    mote__assert(r == 0);
    return r;
}

/* FZ_SHORT, FZ_LONG or 0: how the freeze that img records turned out. */
static uint8_t fz_outcome(const fz_image *img)
{
    int64_t ms = (mote__os_coarse_ns() - img->frozen_at) / 1000000;
    return ms < 3 * (int64_t)img->after_ms    ? FZ_SHORT
           : ms > 16 * (int64_t)img->after_ms ? FZ_LONG
                                              : 0;
}

/* ---- thawing --------------------------------------------------------------- */

/* A fault on a task's stack waits for whoever holds its lock bit or has it
 * FREEZING or THAWING; a signal handler run by that very thread that
 * touched the stack (a pointer to a parked task's local) waited on itself
 * for good.  So every entry that locks a task, or freezes or thaws one,
 * runs with the program's signals blocked, from before it takes the lock
 * (blocked after it, a handler could still slip in between: seen under
 * TSan, which runs pending handlers in its interceptors). */
static void fz_signals_off(sigset_t *old) { mote__os_async_signals_block(old); }
static void fz_signals_on(const sigset_t *old)
{
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

static void fz_thaw(task *t, enum freeze_cause cause, bool stays);

void mote__freeze_thaw(task *t, enum freeze_cause cause, bool stays)
{
    sigset_t old;
    fz_signals_off(&old);
    fz_thaw(t, cause, stays);
    fz_signals_on(&old);
}

static void fz_thaw(task *t, enum freeze_cause cause, bool stays)
{
    for (;;) {
        /* Not under the lock: a call there (out of line) could grow this
         * thread's stack into a page only the handler brings back, while
         * the handler waits for this very lock. */
        int64_t t0 = mote__os_now_ns();
        uint8_t v = fz_lock(t);
        switch (v & FZ_STATE) {
        case FZ_ACTIVE: fz_unlock(t, v); return;
        case FZ_FREEZING: /* the freezer restores it when its batch ends */
            fz_unlock(t, (uint8_t)(v | FZ_WANTED));
            if (cause == FREEZE_FAULT)
                return; /* the faulting access waits in the kernel */
            break;
        case FZ_FROZEN: {
            /* Read while THAWING: once ACTIVE, the task may run, end and
             * be freed before the hook is called; the worker outlives the
             * hook (mote__freeze_stop waits for `telling`). */
            struct worker *owner = t->worker;
            if (stays)
                FETCH_ADD(&fz.telling, 1, ACQ_REL);
            fz_unlock(t, FZ_THAWING);
            fz_image *img = t->fz_img;
            /* Counted before the copy: it wakes a faulting thread, which
             * may look at the metrics next and must see its thaw. */
            FETCH_SUB(&fz.bytes, img->len, RELAXED);
            FETCH_SUB(&fz.frozen, 1, RELAXED);
            FETCH_ADD(&fz.thaws[cause], 1, RELAXED);
            int r = fz_restore(t, img, v & FZ_DEEP);
            uint8_t outcome = fz_outcome(img);
            fz_image_free(img);
            t->trim_link = (list_node){NULL, NULL};
            /* Left parked, it is on no list that would freeze it again:
             * its worker sweeps for it. */
            if (stays)
                outcome |= FZ_ORPHAN;
            /* Under the lock: a thread that took it meanwhile saw THAWING
             * and writes that back when it lets go; a plain store here
             * could land in between and be undone (the task stayed
             * THAWING for good, its worker waiting on it: 1 run in ~25 of
             * a test under gcc's TSan and load). */
            fz_lock(t);
            fz_unlock(t, FZ_ACTIVE | outcome);
            FETCH_SUB(&mote__freeze_nfrozen, 1, RELAXED);
            FETCH_ADD(&fz.thaw_ns, (uint64_t)(mote__os_now_ns() - t0), RELAXED);
            if (r) { /* (on a task's stack, maybe: no stdio) */
                char id[21];
                mote__os_write_err4("mote: cannot thaw the stack of task ",
                                    mote__os_u64_str(t->id, id), ": ", mote_strerror(r));
                mote__os_write_err("\n");
            }
            if (stays) {
                void (*orphaned)(struct worker *) = LOAD(&fz.orphaned, ACQUIRE);
                if (orphaned)
                    orphaned(owner);
                FETCH_SUB(&fz.telling, 1, RELEASE);
            }
            return;
        }
        case FZ_THAWING: /* another thread is putting it back */
            fz_unlock(t, v);
            if (cause == FREEZE_FAULT)
                return;
            break;
        }
        /* Until the freezer or the other thaw is done.  Not until ACTIVE:
         * a freeze that gave way may be followed by another, and a FROZEN
         * task is ours to thaw (waiting for ACTIVE there spun for good,
         * holding a channel's lock). */
        for (;;) {
            uint8_t s = LOAD(&t->fz, ACQUIRE) & FZ_STATE;
            if (s != FZ_FREEZING && s != FZ_THAWING)
                break;
            sched_yield();
        }
    }
}

/* A freeze pays for itself only if the task stays parked well past the
 * threshold: a task woken soon after its freeze (a periodic timer, a
 * connection with steady traffic) had its stack copied out and back for
 * little, and would again.  So, as the trim delay does (trim.c), its
 * threshold doubles each time that happens, up to 128x, and halves after a
 * freeze that lasted 16 times it.  The thaw, on whatever thread, marks the
 * outcome in t->fz; the owner applies it here, before the task runs. */
static uint8_t fz_apply_outcome(task *t, uint8_t v)
{
    if (v & FZ_SHORT)
        mote__freeze_backoff(t);
    else if ((v & FZ_LONG) && t->fz_shift > 0)
        t->fz_shift--;
    return (uint8_t)(v & ~(FZ_SHORT | FZ_LONG | FZ_ORPHAN));
}

void mote__freeze_resume_slow(task *t)
{
    sigset_t old;
    fz_signals_off(&old);
    if (LOAD(&t->fz, ACQUIRE) & FZ_STATE)
        fz_thaw(t, FREEZE_RESUME, false);
    uint8_t v = fz_lock(t);
    fz_unlock(t, fz_apply_outcome(t, v));
    fz_signals_on(&old);
}

bool mote__freeze_adopt(task *t)
{
    if (!(LOAD(&t->fz, ACQUIRE) & FZ_ORPHAN))
        return false;
    sigset_t old;
    fz_signals_off(&old);
    uint8_t v = fz_lock(t);
    /* (only an owner's freeze follows an orphan's thaw, and only once it
     * is queued again: the bit goes with the state it was set with) */
    mote__assert((v & FZ_STATE) == FZ_ACTIVE && (v & FZ_ORPHAN));
    fz_unlock(t, fz_apply_outcome(t, v));
    fz_signals_on(&old);
    return true;
}

task *mote__freeze_touch_slow(const void *p, bool stays)
{
    stack_where at;
    if (!mote__stack_locate((uintptr_t)p, &at) || !at.owner)
        return NULL;
    task *t = at.owner;
    /* Held before the state is read, and the freezer reads the hold after
     * it publishes FREEZING (fz_batch): one of the two sees the other. */
    FETCH_ADD(&t->fz_hold, 1, SEQ_CST);
    if (LOAD(&t->fz, SEQ_CST) & FZ_STATE)
        mote__freeze_thaw(t, FREEZE_RUNTIME, stays);
    return t;
}

/* ---- freezing ------------------------------------------------------------------ */

static bool fz_register(int chunk)
{
    uintptr_t base;
    size_t len;
    if (!mote__stack_chunk_claim(chunk, &base, &len))
        return true; /* done before */
    return mote__os_uffd_register(fz.ufd, (void *)base, len) == 0;
}

#define FZ_WINDOW     ((uintptr_t)2 << 20) /* what one page table maps */
#define FZ_WINDOW_MAX 96                   /* slots: 2 MiB of 24 KiB ones, + 2 */

/* Empties window w of chunk if every slot overlapping it holds a FROZEN
 * task and not all of them are deep yet.  Their locks are held across the
 * zap (taken in address order, so two deepeners cannot deadlock): no thaw
 * can map a page there for the zap to destroy, and no stray fill either
 * (the handler fills an owned slot's page under its owner's lock). */
static void fz_deepen_window(int chunk, uintptr_t w)
{
    void *own[FZ_WINDOW_MAX];
    size_t slot,
        n = mote__stack_window(chunk, w, w + FZ_WINDOW, own, FZ_WINDOW_MAX, &slot);
    /* A slot of more than 1 MiB may span windows that no task of it
     * reaches; with two or more whole slots inside, "all deep" means the
     * window itself was emptied. */
    if (n == 0 || slot > FZ_WINDOW / 2)
        return;
    bool all_deep = true;
    for (size_t i = 0; i < n; i++) {
        task *t = own[i];
        uint8_t v = t ? LOAD(&t->fz, RELAXED) : 0;
        if (!t || (v & FZ_STATE) != FZ_FROZEN)
            return;
        all_deep &= (v & FZ_DEEP) != 0;
    }
    if (all_deep)
        return;
    size_t locked = 0;
    bool ok = true;
    for (; locked < n; locked++) {
        task *t = own[locked];
        uint8_t v = fz_lock(t);
        if ((v & FZ_STATE) != FZ_FROZEN || (v & FZ_WANTED)) {
            fz_unlock(t, v);
            ok = false;
            break;
        }
    }
    /* An owner cannot change under the locks: a frozen task does not exit. */
    if (ok && mote__os_guard_remove((void *)w, FZ_WINDOW) == 0) {
        mote__os_decommit((void *)w, FZ_WINDOW);
        FETCH_ADD(&fz.windows, 1, RELAXED);
        for (size_t i = 0; i < n; i++) {
            task *t = own[i];
            fz_unlock(t, (uint8_t)(LOAD(&t->fz, RELAXED) | FZ_DEEP));
        }
        return;
    }
    for (size_t i = 0; i < locked; i++)
        fz_unlock(own[i], LOAD(&((task *)own[i])->fz, RELAXED));
}

/* The windows the freshly frozen candidates lie in (c is in address
 * order, so each window comes up once in a row). */
static void fz_deepen(const fz_cand *c, size_t m)
{
    uintptr_t last = 0;
    for (size_t i = 0; i < m; i++) {
        if (!c[i].img || (LOAD(&c[i].t->fz, RELAXED) & FZ_STATE) != FZ_FROZEN)
            continue;
        stack_where at;
        if (!mote__stack_locate(c[i].top - 1, &at))
            continue;
        uintptr_t lo = c[i].top - c[i].slot, w0 = lo & ~(FZ_WINDOW - 1);
        for (uintptr_t w = w0; w < c[i].top; w += FZ_WINDOW)
            if (w != last) {
                last = w;
                fz_deepen_window(at.chunk, w);
            }
    }
}

/* Whether b continues the write-protect run that a (just below it) is in:
 * the next slot of the same chunk.  (Spanning the slots of other tasks
 * between candidates would save ioctls but protect and unprotect those
 * tasks' pages for nothing; measured, no better.) */
static bool fz_same_run(const fz_cand *a, const fz_cand *b)
{
    return a->chunk == b->chunk && b->top - b->slot == a->top;
}

/* The pages of candidate i that hold nothing (see fz_copy_out), from the
 * scratch's window of pagemap entries, read again from c[i].lo (up to the
 * last candidate the window reaches: the gaps cost the kernel a page-table
 * walk, far less than a read each) when it does not hold them.  0 or
 * -errno. */
static int fz_unpopulated(fz_scratch *s, const fz_cand *c, size_t m, size_t i,
                          uint64_t *empty)
{
    size_t pages = (c[i].top - c[i].lo) / OS_PAGE;
    mote__assert(pages <= 64 && pages <= FZ_PM_WINDOW);
    if (c[i].lo < s->pm_lo || c[i].top > s->pm_lo + s->pm_n * OS_PAGE) {
        size_t j = i; /* the furthest candidate the window can reach */
        while (j + 1 < m && c[j + 1].top - c[i].lo <= FZ_PM_WINDOW * OS_PAGE)
            j++;
        size_t n = (c[j].top - c[i].lo) / OS_PAGE;
        s->pm_n = 0;
        int rc = mote__os_pagemap_read(fz.pagemap, c[i].lo, n, s->pm);
        if (rc != 0)
            return rc;
        s->pm_lo = c[i].lo;
        s->pm_n = n;
    }
    *empty = mote__os_pagemap_unpopulated(&s->pm[(c[i].lo - s->pm_lo) / OS_PAGE],
                                          (unsigned)pages);
    return 0;
}

static size_t fz_batch(task *const *cand, size_t n, fz_scratch *scratch);

size_t mote__freeze_batch(task *const *cand, size_t n, fz_scratch *scratch)
{
    if (LOAD(&fz.threshold, RELAXED) < 0 || n == 0)
        return 0;
    /* Until the batch is published, a fault on a candidate's stack waits
     * for this thread (and one on a task of a window being deepened waits
     * for its lock): a signal handler run here that touched one (through a
     * pointer to a parked task's local) waited on itself for good. */
    sigset_t old;
    fz_signals_off(&old);
    size_t frozen = fz_batch(cand, n, scratch);
    fz_signals_on(&old);
    return frozen;
}

static size_t fz_batch(task *const *cand, size_t n, fz_scratch *scratch)
{
    if (n > FZ_BATCH)
        n = FZ_BATCH;
    int64_t t0 = mote__os_thread_cpu_ns(); /* per batch: the syscall is noise */
    fz_cand *c = scratch->c;
    struct iovec *iov = scratch->iov;
    size_t m = 0;
    /* 1: take the candidates (ACTIVE -> FREEZING). */
    for (size_t i = 0; i < n; i++) {
        task *t = cand[i];
        uintptr_t top = stack_top(&t->stack), sp = (uintptr_t)t->ctx.sp;
        stack_where at;
        if (!stack_holds_sp(&t->stack, sp) || top - sp > FZ_MAX_LIVE ||
            !mote__stack_locate(top - 1, &at) || !fz_register(at.chunk))
            continue;
        uint8_t v = fz_lock(t);
        if (v & FZ_ORPHAN) /* queued again before its worker swept for it */
            v = fz_apply_outcome(t, v);
        if ((v & FZ_STATE) != FZ_ACTIVE ||
            LOAD(&t->wait_state, ACQUIRE) != TASK_WAITING) {
            fz_unlock(t, v);
            continue;
        }
        fz_unlock(t, FZ_FREEZING);
        /* A thread that touched it and has yet to access it (freeze.h):
         * publish FREEZING, then look for its hold (it looks at the state
         * after taking the hold), so that either it waits for this batch
         * or the task is left alone.  The look is a read-modify-write:
         * one that comes before a toucher's increment in the hold's order
         * is read by it, which orders FREEZING before the toucher's look
         * at the state (a fence would do, but gcc's TSan rejects them).
         * A claimer lets go before it writes the claimed task's record:
         * one whose let-go this look reads made its claim visible, hence
         * the second look at the wait state. */
        if (FETCH_ADD(&t->fz_hold, 0, SEQ_CST) != 0 ||
            LOAD(&t->wait_state, ACQUIRE) != TASK_WAITING) {
            /* (a toucher that saw FREEZING retries; a fault that did went
             * back to sleep in the kernel, for the restore that would have
             * followed: nothing was protected or dropped, so it retries) */
            bool wanted = fz_lock(t) & FZ_WANTED;
            fz_unlock(t, FZ_ACTIVE);
            if (wanted)
                mote__os_uffd_wake(fz.ufd, (void *)stack_lo(&t->stack),
                                   top - stack_lo(&t->stack));
            continue;
        }
        FETCH_ADD(&mote__freeze_nfrozen, 1, RELAXED);
        c[m++] = (fz_cand){.t = t,
                           .lo = sp & ~(uintptr_t)(OS_PAGE - 1),
                           .top = top,
                           .slot = at.usable + STACK_GUARD,
                           .chunk = at.chunk,
                           .taken = true};
    }
    /* 2: write-protect each run of candidates with one ioctl (one TLB
     * shootdown a run); from here a writer waits in the kernel. */
    for (size_t i = 0; i < m;) {
        size_t j = i + 1;
        while (j < m && fz_same_run(&c[j - 1], &c[j]))
            j++;
        if (mote__os_uffd_wp(fz.ufd, (void *)c[i].lo, c[j - 1].top - c[i].lo, true) != 0)
            for (size_t k = i; k < j; k++)
                c[k].taken = false;
        i = j;
    }
    /* 3: copy the live bytes; 4: drop the pages, in one batch. */
    size_t niov = 0;
    scratch->pm_n = 0; /* the last batch's entries are stale */
    for (size_t i = 0; i < m; i++) {
        if (!c[i].taken)
            continue;
        uintptr_t sp = (uintptr_t)c[i].t->ctx.sp;
        size_t len = c[i].top - sp;
        uint64_t empty;
        fz_image *img = NULL;
        if (fz_unpopulated(scratch, c, m, i, &empty) != 0 ||
            !(img = mote_malloc(sizeof *img + len))) {
            c[i].taken = false;
            continue;
        }
        mote__assert(len % 8 == 0);
        img->len = (uint32_t)len;
        img->after_ms =
            (uint32_t)(mote__freeze_after(c[i].t, LOAD(&fz.threshold, RELAXED)) /
                       1000000);
        img->frozen_at = mote__os_coarse_ns();
        fz_copy_out(img->bytes, sp, c[i].top, c[i].lo, empty);
        c[i].img = img;
        /* the whole stack: what lies below the live pages (not trimmed,
         * if the task was never) goes too */
        uintptr_t lo = stack_lo(&c[i].t->stack);
        iov[niov++] = (struct iovec){(void *)lo, c[i].top - lo};
    }
    if (niov && mote__os_decommit_batch(iov, niov) != 0) {
        /* could not drop them: give every page back as it was */
        for (size_t i = 0; i < m; i++)
            if (c[i].img) {
                mote_free(c[i].img);
                c[i].img = NULL;
                c[i].taken = false;
            }
    }
    /* 5: release the protection where pages stayed (writers retry, and
     * proceed).  Where every page of a run went, nothing is left to
     * release: a zap drops an anonymous pte's protection with it, and a
     * writer held on one is woken by the restore its fault asked for (or,
     * its message read after FROZEN, retries into a thaw). */
    for (size_t i = 0; i < m;) {
        size_t j = i + 1;
        bool all = c[i].img != NULL;
        while (j < m && fz_same_run(&c[j - 1], &c[j]))
            all &= c[j++].img != NULL;
        if (!all)
            mote__os_uffd_wp(fz.ufd, (void *)c[i].lo, c[j - 1].top - c[i].lo, false);
        i = j;
    }
    /* 6: publish FROZEN, or undo what someone wanted back meanwhile. */
    size_t frozen = 0;
    for (size_t i = 0; i < m; i++) {
        task *t = c[i].t;
        uint8_t v = fz_lock(t);
        if (!c[i].img) { /* not taken: the pages never left */
            fz_unlock(t, FZ_ACTIVE);
            FETCH_SUB(&mote__freeze_nfrozen, 1, RELAXED);
            continue;
        }
        if (v & FZ_WANTED) {
            fz_unlock(t, FZ_THAWING);
            fz_restore(t, c[i].img, false);
            mote_free(c[i].img);
            fz_lock(t); /* (as in a thaw: a lock holder writes THAWING back) */
            fz_unlock(t, FZ_ACTIVE);
            FETCH_SUB(&mote__freeze_nfrozen, 1, RELAXED);
            FETCH_ADD(&fz.cancelled, 1, RELAXED);
            continue;
        }
        t->fz_img = c[i].img;
        /* counted first: once published, a thaw may free the image */
        FETCH_ADD(&fz.bytes, c[i].img->len, RELAXED);
        FETCH_ADD(&fz.frozen, 1, RELAXED);
        fz_unlock(t, FZ_FROZEN);
        frozen++;
    }
    FETCH_ADD(&fz.freezes, frozen, RELAXED);
    if (frozen)
        fz_deepen(c, m);
    FETCH_ADD(&fz.ns, (uint64_t)(mote__os_thread_cpu_ns() - t0), RELAXED);
    return frozen;
}

/* ---- the fault handler -------------------------------------------------------- */

/* A stack growing down through pages a trim gave back faults on them one
 * after another (a probed frame writes each in turn), and every fault is a
 * round trip through this thread: on a server whose workers share a CPU
 * with it, that was a tail (HTTP, 400 new connections after a freeze had
 * registered their chunk: 6,350 round trips in 3 s and p99 up to 25 ms,
 * against 2 ms with freezing off).  So a write fault just below the pages
 * the last fill gave fills four times as many, up to FZ_FILL_MAX: a 32 KiB
 * frame costs 3 round trips instead of 8, and a lone fault still fills one
 * page (a task that ran 2 pages deeper keeps 3 more until its next trim).
 * A task whose depth is being measured (hw_sample: the first of its entry
 * function, one start in 256) is filled a page at a time: its depth is its
 * lowest page in memory, and pages mapped ahead of it read as depth (a
 * frame of 24 KB probed top down measured 86 KB).  Zero pages mapped ahead
 * instead cost each later write a second, copy-on-write fault: growing
 * 48 KiB took 3.3x as long (bench/tasks/stack_grow).  The runs are
 * remembered by the page they expect next, in a small table only this
 * thread touches (a miss costs a one-page fill, nothing else). */
#define FZ_FILL_MAX 16
#define FZ_RUNS     64
static unsigned char fz_zeros[FZ_FILL_MAX * OS_PAGE] __attribute__((aligned(OS_PAGE)));
static struct {
    uintptr_t next; /* the page below the last fill */
    unsigned n;     /* how many pages it gave */
} fz_runs[FZ_RUNS];

static inline unsigned fz_run_slot(uintptr_t page) { return (page / OS_PAGE) % FZ_RUNS; }

/* A page of a registered chunk that is absent but frozen by no one (a
 * stack growing into a page a trim gave back, or a fresh task's first
 * touch): a zeroed page of its own for a write (no second, copy-on-write
 * fault), and for a write that continues a run, when ahead, more below
 * it, down to lo (the slot's lowest usable page). */
static void fz_fill(uintptr_t page, bool write, uintptr_t lo, bool ahead)
{
    if (write) {
        unsigned want = 1, k = fz_run_slot(page);
        if (ahead && fz_runs[k].next == page)
            want = fz_runs[k].n * 4 > FZ_FILL_MAX ? FZ_FILL_MAX : fz_runs[k].n * 4;
        uintptr_t start = page - (uintptr_t)(want - 1) * OS_PAGE;
        if (start < lo) /* the slot's end */
            start = lo;
        size_t n = (page - start) / OS_PAGE + 1;
        int r = mote__os_uffd_copy(fz.ufd, (void *)start, fz_zeros, n * OS_PAGE);
        if (r != 0 && n > 1) {
            /* a page below was there (the task ran that deep since the
             * trim): the copy stopped at it, and page was not reached */
            n = 1;
            r = mote__os_uffd_copy(fz.ufd, (void *)page, fz_zeros, OS_PAGE);
        }
        if (r == 0) {
            FETCH_ADD(&fz.stray, 1, RELAXED);
            uintptr_t below = page - (n - 1) * OS_PAGE - OS_PAGE;
            k = fz_run_slot(below);
            fz_runs[k].next = below;
            fz_runs[k].n = (unsigned)n;
            return;
        }
    } else if (mote__os_uffd_zeropage(fz.ufd, (void *)page, OS_PAGE) == 0) {
        FETCH_ADD(&fz.stray, 1, RELAXED);
        return;
    }
    /* there already (a stale message): let the thread retry */
    mote__os_uffd_wake(fz.ufd, (void *)page, OS_PAGE);
}

static void fz_fault(const os_uffd_fault *f)
{
    uintptr_t page = f->addr & ~(uintptr_t)(OS_PAGE - 1);
    stack_where at;
    if (!mote__stack_locate(f->addr, &at)) {
        mote__os_uffd_wake(fz.ufd, (void *)page, OS_PAGE);
        return;
    }
    if (at.guard) {
        /* A deep task's guard, removed with its window: put the marker
         * back, and the access, retried, is the guard fault it always was
         * (SIGSEGV, or EFAULT in a system call). */
        mote__os_guard((void *)page, OS_PAGE, true);
        mote__os_uffd_wake(fz.ufd, (void *)page, OS_PAGE);
        return;
    }
    task *t = at.owner;
    uintptr_t lo = at.top - at.usable;
    if (!t) {
        fz_fill(page, f->write, lo, true);
        return;
    }
    uint8_t v = fz_lock(t);
    if (f->wp) { /* a write into a page a freeze has write-protected */
        if ((v & FZ_STATE) == FZ_FREEZING)
            v |= FZ_WANTED; /* the freezer puts it back; the writer waits */
        else if ((v & FZ_STATE) == FZ_ACTIVE)
            mote__os_uffd_wp(fz.ufd, (void *)page, OS_PAGE, false);
        else
            mote__os_uffd_wake(fz.ufd, (void *)page, OS_PAGE);
        fz_unlock(t, v);
        return;
    }
    /* (the saved sp is stable only while the task is not ACTIVE) */
    if ((v & FZ_STATE) == FZ_ACTIVE ||
        page < ((uintptr_t)t->ctx.sp & ~(uintptr_t)(OS_PAGE - 1))) {
        /* under the lock: no freeze of t can start meanwhile */
        fz_fill(page, f->write, lo, !LOAD(&t->hw_sample, RELAXED));
        fz_unlock(t, v);
        return;
    }
    fz_unlock(t, v);
    mote__freeze_thaw(t, FREEZE_FAULT, true);
}

static void *fz_handler(void *arg)
{
    (void)arg;
    mote__os_thread_name("mote-thaw");
    fz_in_handler = true;
    os_uffd_fault f[32];
    for (;;) {
        int w = mote__os_uffd_wait(fz.ufd, fz.stop_fd, -1);
        if (w < 0 || (w & 2))
            break;
        int n;
        while ((n = mote__os_uffd_read(fz.ufd, f, 32)) > 0)
            for (int i = 0; i < n; i++)
                fz_fault(&f[i]);
    }
    return NULL;
}

/* ---- a run ---------------------------------------------------------------------- */

/* A forked child shares the parent's userfaultfd, which names the parent's
 * memory: it must never use it.  The child's copies of frozen stacks read
 * as zeros (the kernel does not carry the registration over); only the
 * thread that forked exists there, and a child that calls mote_run again
 * starts afresh. */
static void fz_fork_child(void)
{
    mote__os_fd_close_own(fz.ufd);
    mote__os_fd_close_own(fz.pagemap);
    mote__os_fd_close_own(fz.stop_fd);
    fz.ufd = fz.pagemap = fz.stop_fd = -1;
    fz.handler_on = false;
    STORE(&fz.telling, 0, RELAXED); /* the parent's threads' */
    fz_bounces.lock = 0;            /* (the buffers stay: the heap forks with them) */
    STORE(&mote__freeze_graveyard, NULL, RELAXED); /* (the parent's to free) */
    STORE(&fz.threshold, -1, RELAXED);
}

void mote__freeze_start(int64_t threshold_ns, bool explicit, bool trim_off,
                        bool mprotect_guards, void (*orphaned)(struct worker *w))
{
    STORE(&fz.orphaned, orphaned, RELEASE);
    STORE(&fz.threshold, -1, RELAXED);
    STORE(&fz.off_reason, FREEZE_ON, RELAXED);
    if (threshold_ns < 0) {
        STORE(&fz.off_reason, FREEZE_OFF_CONFIG, RELAXED);
        return;
    }
    if (trim_off) {
        static int told; /* once a process, as for an invalid value */
        if (explicit && !XCHG(&told, 1, RELAXED))
            mote__os_write_err(
                "mote: MOTE_STACK_FREEZE is ignored: MOTE_STACK_TRIM=off (a "
                "stack is frozen by its trim)\n");
        STORE(&fz.off_reason, FREEZE_OFF_TRIM, RELAXED);
        return;
    }
    if (mprotect_guards) {
        STORE(&fz.off_reason, FREEZE_OFF_GUARDS, RELAXED);
        return;
    }
#if defined(MOTE_HAVE_VALGRIND_H)
    if (RUNNING_ON_VALGRIND) {
        STORE(&fz.off_reason, FREEZE_OFF_VALGRIND, RELAXED);
        return;
    }
#endif
    if (fz.ufd < 0) {
        static bool atfork_done;
        if (!atfork_done) {
            pthread_atfork(NULL, NULL, fz_fork_child);
            atfork_done = true;
        }
        int mode, fd = mote__os_uffd_open(explicit, &mode);
        int pm = fd < 0 ? -1 : mote__os_pagemap_open();
        if (fd >= 0 && pm < 0) { /* (no /proc: a freeze could not tell a missing page) */
            mote__os_fd_close_own(fd);
            fd = pm;
        }
        if (fd < 0) {
            STORE(&fz.off_reason,
                  fd == -EPERM || fd == -EACCES ? FREEZE_OFF_DENIED : FREEZE_OFF_KERNEL,
                  RELAXED);
            if (explicit)
                fprintf(stderr,
                        "mote: MOTE_STACK_FREEZE is set but stacks cannot be frozen here "
                        "(userfaultfd: %s)\n",
                        mote_strerror(fd));
            return;
        }
        if (mode == OS_UFFD_USER_ONLY)
            fprintf(stderr,
                    "mote: stacks are frozen with a user-mode-only userfaultfd: a "
                    "system call given a pointer into a frozen stack fails with "
                    "EFAULT (see README)\n");
        fz.ufd = fd;
        fz.pagemap = pm;
        STORE(&fz.mode, mode, RELAXED);
    }
    if (fz.stop_fd < 0)
        fz.stop_fd = mote__os_event_create();
    /* The handler must never run a program's signal handler. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = fz.stop_fd < 0 ? -1 : pthread_create(&fz.handler, NULL, fz_handler, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        STORE(&fz.off_reason, FREEZE_OFF_KERNEL, RELAXED);
        return;
    }
    fz.handler_on = true;
    STORE(&fz.threshold, threshold_ns, RELAXED);
}

void mote__freeze_stop(void)
{
    if (fz.handler_on) {
        mote__os_event_signal(fz.stop_fd);
        pthread_join(fz.handler, NULL);
        mote__os_event_drain(fz.stop_fd);
        fz.handler_on = false;
    }
    mote__freeze_reap();
    STORE(&fz.threshold, -1, RELAXED);
    /* The run's workers go after this: no thaw may still tell one. */
    STORE(&fz.orphaned, NULL, RELEASE);
    while (LOAD(&fz.telling, ACQUIRE))
        sched_yield();
}

int64_t mote__freeze_threshold(void) { return LOAD(&fz.threshold, RELAXED); }

bool mote__freeze_forget(task *t)
{
    /* A task that ends was almost always never frozen: its lock is still
     * taken (whoever looked at it a moment ago may hold it), but without
     * the two sigprocmask calls, which made spawn+exit 8x slower (2.7 us,
     * Go 0.3).  They guard against a handler on this thread that touches
     * a parked task's stack while its lock is held; this task is dead. */
    if (!(LOAD(&t->fz, ACQUIRE) & FZ_STATE)) {
        uint8_t v = fz_lock(t);
        fz_unlock(t, v);
        if (!(v & FZ_STATE))
            return false;
    }
    sigset_t old;
    fz_signals_off(&old);
    for (;;) {
        uint8_t v = fz_lock(t);
        switch (v & FZ_STATE) {
        case FZ_ACTIVE:
            fz_unlock(t, v);
            fz_signals_on(&old);
            return false;
        case FZ_FROZEN: {
            fz_image *img = t->fz_img;
            FETCH_SUB(&fz.bytes, img->len, RELAXED);
            FETCH_SUB(&fz.frozen, 1, RELAXED);
            t->fz_img = NULL;
            fz_unlock(t, FZ_ACTIVE);
            fz_signals_on(&old);
            mote_free(img); /* (not under the lock: fz_thaw says why) */
            FETCH_SUB(&mote__freeze_nfrozen, 1, RELAXED);
            return true;
        }
        default:
            /* Thawing: the teardown read a record on the frozen stack (a
             * descriptor's or a channel's waiter), and the handler woke it
             * with the pages back before it finished with t.  Wait for it,
             * or t would be freed under it (seen: 6 runs in 10 ending with
             * a task parked on a descriptor). */
            fz_unlock(t, v);
            sched_yield();
        }
    }
}

SANITIZER_UNCHECKED static void fz_peek_copy(void *dst, uintptr_t src, size_t len)
{
    const volatile unsigned char *s = (const volatile unsigned char *)src;
    unsigned char *d = dst;
    for (size_t i = 0; i < len; i++)
        d[i] = s[i];
}

bool mote__freeze_peek(const task *ct, uintptr_t addr, void *buf, size_t len)
{
    task *t = (task *)ct; /* only its lock bit is written */
    uintptr_t top = stack_top(&t->stack);
    if (addr < stack_lo(&t->stack) || addr > top || len > top - addr)
        return false;
    if (LOAD(&t->fz, ACQUIRE) & FZ_STATE) {
        sigset_t old;
        fz_signals_off(&old);
        uint8_t v = fz_lock(t);
        if ((v & FZ_STATE) == FZ_FROZEN) { /* the image cannot go while locked */
            uintptr_t sp = top - t->fz_img->len;
            bool ok = addr >= sp; /* below the live part there is nothing */
            if (ok)
                memcpy(buf, t->fz_img->bytes + (addr - sp), len);
            fz_unlock(t, v);
            fz_signals_on(&old);
            return ok;
        }
        fz_unlock(t, v);
        fz_signals_on(&old);
    }
    /* Mapped, or about to be: a read that meets a page a freeze has just
     * dropped waits for the freezer to put it back (it is wanted). */
    fz_peek_copy(buf, addr, len);
    return true;
}

void mote__freeze_stats(freeze_stats *s)
{
    /* (a metric reader on any thread: a run may be starting) */
    s->mode = LOAD(&fz.threshold, RELAXED) >= 0 ? (uint64_t)LOAD(&fz.mode, RELAXED) : 0;
    s->off_reason = (uint64_t)LOAD(&fz.off_reason, RELAXED);
    s->frozen = LOAD(&fz.frozen, RELAXED); /* published: not FREEZING */
    s->bytes = LOAD(&fz.bytes, RELAXED);
    s->freezes = LOAD(&fz.freezes, RELAXED);
    s->cancelled = LOAD(&fz.cancelled, RELAXED);
    s->stray = LOAD(&fz.stray, RELAXED);
    s->ns = LOAD(&fz.ns, RELAXED);
    s->windows = LOAD(&fz.windows, RELAXED);
    s->thaw_ns = LOAD(&fz.thaw_ns, RELAXED);
    for (int i = 0; i < FREEZE_NCAUSE; i++)
        s->thaws[i] = LOAD(&fz.thaws[i], RELAXED);
}
