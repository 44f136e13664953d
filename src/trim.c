/*
 * trim.c - gives back the stack pages that parked tasks no longer use, and
 * samples how deep tasks go (see trim.h for the design).
 *
 * Owned by one worker: every function runs on that worker's thread, and
 * every task it touches is pinned to that worker and not running.  The only
 * shared state is the cumulative byte count and the high-water histogram,
 * kept per worker (single writer) and summed by metrics, and the orphan
 * flag, which any thread that thaws one of the worker's tasks in place
 * sets (mote__trim_orphaned) and the worker takes (trim_sweep).
 *
 * A task is trimmed at most once per park, only after it stayed parked for
 * the delay, and only where mincore says something is resident.
 */
#include "trim.h"

#include <stdlib.h>
#include <string.h>

#include "os/os.h"
#include "sanfiber.h"
#include "task.h"

#define TRIM_LAZY_DELAY   (20 * 1000000LL) /* ns parked before a trim */
/* A task that keeps going deep again after its trims waits longer before
 * the next: up to the base << TRIM_MAX_SHIFT (1.28 s lazily). */
#define TRIM_MAX_SHIFT    6
/* The least shift of a task the netpoller woke: 160 ms lazily.  (Measured,
 * echo with 1000 connections, each waiting ~10 ms between requests: when a
 * stall of the whole VM held most waits past 20 ms, every connection was
 * trimmed and faulted its buffer back on the next request, 10-13k faults
 * and a p99 of 47-121 ms instead of 10-15 ms, in 1 run of 4.) */
#define TRIM_IO_SHIFT     3
#define TRIM_DECAY_PERIOD (1000 * 1000000LL) /* pool decay */
#define TRIM_SCAN_MAX     4096               /* candidates looked at per call */
/* A sweep for orphans (trim_sweep) looks at this many tasks at a time, at
 * most this often: 200k tasks a second, ~1% of a CPU at worst. */
#define TRIM_SWEEP_MAX    2048
#define TRIM_SWEEP_EVERY  (10 * 1000000LL)
#define TRIM_SAMPLE_EVERY 256
/* Freezes per pass while tasks wait to run. */
#define TRIM_FREEZE_BUSY  16
/* Bytes at the top of a sampled stack left as they are when it is zeroed:
 * the slot's own words and the first frame (arch_ctx_init) live there. */
#define TRIM_TOP_KEEP     256

static uint64_t trim_global_trimmed; /* atomic: from runs that ended */

void mote__trim_init(trim_state *s, int mode, stackprof *prof, list *all)
{
    memset(s, 0, sizeof *s);
    s->prof = prof;
    s->all = all;
    s->freeze_after = mode == TRIM_OFF ? -1 : mote__freeze_threshold();
    s->delay = mode == TRIM_OFF ? -1 : mode == TRIM_EAGER ? 0 : TRIM_LAZY_DELAY;
    s->pool_depth = OS_PAGE;
    s->clock = mote__os_now_ns();
    s->next_decay = s->clock + TRIM_DECAY_PERIOD;
    s->next = INT64_MAX;
}

static int trim_bucket(uint64_t depth)
{
    int b = 0;
    while (b < TRIM_NBUCKET - 1 && ((uint64_t)OS_PAGE << b) < depth)
        b++;
    return b;
}

static void trim_set_bucket(trim_state *s, task *t, int b)
{
    if (t->hw_bucket >= 0)
        COUNT(&s->hist[t->hw_bucket], -1);
    t->hw_bucket = (int8_t)b;
    if (b >= 0)
        COUNT(&s->hist[b], 1);
}

static void trim_unlink(trim_state *s, task *t)
{
    mote__assert(t->trim_queued);
    if (t->in_limbo) {
        list_remove(&s->limbo, &t->trim_link);
        t->in_limbo = 0;
    } else {
        list_remove(&s->parked, &t->trim_link);
    }
    t->trim_queued = false;
    s->n--;
}

/* Queues t as a candidate, or (limbo: an orphan just adopted) to join the
 * candidates at the next sweep step (trim_sweep). */
static void trim_link(trim_state *s, task *t, bool limbo)
{
    mote__assert(!t->trim_queued);
    list_push_back(limbo ? &s->limbo : &s->parked, &t->trim_link);
    t->in_limbo = limbo;
    t->trim_queued = true;
    s->n++;
}

void mote__trim_on_io_wake(task *t)
{
    if (t->trim_shift < TRIM_IO_SHIFT)
        t->trim_shift = TRIM_IO_SHIFT;
}

void mote__trim_on_park(trim_state *s, task *t)
{
    t->trimmed = 0;
    /* The coarse clock (~3 ns): s->clock is refreshed only when trim_run
     * runs, and a stale park time would trim tasks that parked a moment
     * ago (measured: every 20 ms a busy server's tasks lost their warm
     * buffer pages and faulted them back). */
    s->clock = mote__os_coarse_ns();
    STORE(&t->parked_at, s->clock, RELAXED);
    if (s->delay >= 0 && !t->trim_queued) {
        trim_link(s, t, false);
        int64_t delay = s->delay << t->trim_shift;
        if (s->next > s->clock + delay)
            s->next = s->clock + delay;
    }
}

/* The depth of a sampled task: its deepest page is the lowest resident one
 * (all below the top page were decommitted at its start, and the kernel
 * zero-fills a page at first touch), and in it the lowest non-zero word.
 * A resident page holding only zeros was touched all the same (a zeroed
 * buffer, say): it counts whole, so the depth is never under the page's
 * (it was dropped, and a task 150 KB deep measured 0). */
static void trim_measure(trim_state *s, task *t, uintptr_t low)
{
    uintptr_t top = stack_top(&t->stack);
    if (low >= top)
        return;
    const uint64_t *p = (const uint64_t *)low, *end = (const uint64_t *)(low + OS_PAGE);
    while (p < end && *p == 0)
        p++;
    mote__stackprof_depth(s->prof, t->fn, top - (p < end ? (uintptr_t)p : low));
}

/* Adapts t's trim delay: pages found again below its stack pointer mean it
 * went deep since its last trim, and would fault them back after this one
 * too (measured: a busy server's tasks paid a page fault or two per request
 * when trimmed between requests): wait longer next time.  Nothing found
 * means trims of it are free: come back toward the base delay. */
static void trim_backoff(task *t, size_t released)
{
    if (released && t->trim_shift < TRIM_MAX_SHIFT)
        t->trim_shift++;
    else if (!released && t->trim_shift)
        t->trim_shift--;
}

/* The bottom of what t keeps: the page holding its saved stack pointer;
 * nothing to trim (its slot's bottom) when that is not in its slot. */
static uintptr_t trim_keep(const task *t)
{
    uintptr_t sp = (uintptr_t)t->ctx.sp;
    if (!stack_holds_sp(&t->stack, sp))
        return stack_lo(&t->stack);
    uintptr_t keep = sp & ~(uintptr_t)(OS_PAGE - 1);
    return keep > stack_lo(&t->stack) ? keep : stack_lo(&t->stack);
}

/* Gives back what t has resident in [lo, keep), given the residency of its
 * pages in vec (one byte per page from lo), and records its high water. */
static void trim_apply(trim_state *s, task *t, const unsigned char *vec)
{
    uintptr_t lo = stack_lo(&t->stack), keep = trim_keep(t), low = keep;
    size_t n = 0, pages = (keep - lo) / OS_PAGE;
    for (size_t i = 0; i < pages; i++)
        if (vec[i] & 1) {
            if (low == keep)
                low = lo + i * OS_PAGE;
            n++;
        }
    if (t->hw_sample)
        trim_measure(s, t, low);
    mote__pagebatch_add(&s->pages, low, keep, n);
    trim_set_bucket(s, t, trim_bucket(stack_top(&t->stack) - low));
    trim_backoff(t, n);
}

/* Trims one parked task down to the page holding its saved stack pointer. */
static void trim_task(trim_state *s, task *t)
{
    uintptr_t low, keep = trim_keep(t);
    size_t n = mote__pagebatch_resident(&s->pages, stack_lo(&t->stack), keep, &low);
    if (t->hw_sample) {
        uintptr_t top_low = low;
        if (!n) /* nothing below the kept pages: the deepest is among them */
            mote__pagebatch_resident(&s->pages, stack_lo(&t->stack), stack_top(&t->stack),
                                     &top_low);
        trim_measure(s, t, top_low);
    }
    mote__pagebatch_add(&s->pages, low, keep, n);
    trim_set_bucket(s, t, trim_bucket(stack_top(&t->stack) - low));
    trim_backoff(t, n);
}

static int trim_by_addr(const void *a, const void *b)
{
    uintptr_t x = stack_lo(&(*(task *const *)a)->stack);
    uintptr_t y = stack_lo(&(*(task *const *)b)->stack);
    return x < y ? -1 : x > y;
}

/* Trims the matured candidates in s->ready.  Tasks spawned together sit in
 * neighbouring slots, so one mincore call usually answers for a whole run
 * of them (guards and kept pages in between are simply not looked at):
 * ~0.1 us a task instead of ~0.7 us for a call each. */
static void trim_ready(trim_state *s, size_t n)
{
    task **v = s->ready;
    unsigned char *vec = s->pages.vec;
    qsort(v, n, sizeof *v, trim_by_addr);
    for (size_t i = 0; i < n;) {
        uintptr_t lo = stack_lo(&v[i]->stack), hi = trim_keep(v[i]);
        size_t j = i + 1;
        while (j < n && trim_keep(v[j]) - lo <= PAGEBATCH_VEC * OS_PAGE &&
               stack_lo(&v[j]->stack) - hi <= 64 * OS_PAGE)
            hi = trim_keep(v[j++]);
        if (j - i > 1 && mote__os_residency((void *)lo, hi - lo, vec) == 0) {
            for (size_t k = i; k < j; k++)
                trim_apply(s, v[k], vec + (stack_lo(&v[k]->stack) - lo) / OS_PAGE);
        } else { /* a lone task, or a gap between chunks: one at a time */
            for (size_t k = i; k < j; k++)
                trim_task(s, v[k]);
        }
        i = j;
    }
}

void mote__trim_on_start(trim_state *s, task *t, bool sample)
{
    t->hw_bucket = -1;
    STORE(&t->hw_sample, false, RELAXED); /* the fault handler reads it */
    /* (not under valgrind, to which bytes below a stack pointer are dead) */
    if ((sample || (s->delay >= 0 && ++s->starts % TRIM_SAMPLE_EVERY == 0)) &&
        !sanfiber_on_valgrind()) {
        /* A pooled stack carries the residency and the bytes of its earlier
         * users; start this one from a zeroed top page and nothing below,
         * so the lowest byte it writes shows its own depth. */
        uintptr_t top = stack_top(&t->stack), keep = top - OS_PAGE, low;
        size_t n = mote__pagebatch_resident(&s->pages, stack_lo(&t->stack), keep, &low);
        if (n) { /* now, not batched: the task runs next */
            mote__pagebatch_add(&s->pages, low, keep, n);
            mote__pagebatch_flush(&s->pages);
        }
        /* (the slot's top words and the first frame come after this) */
        memset((void *)keep, 0, OS_PAGE - TRIM_TOP_KEEP);
        STORE(&t->hw_sample, true, RELAXED);
    }
}

void mote__trim_on_exit(trim_state *s, task *t)
{
    if (t->trim_queued)
        trim_unlink(s, t);
    if (s->delay >= 0 && s->next > s->next_decay)
        s->next = s->next_decay; /* its stack joins the pool: decay it */
    if (t->hw_sample) {
        uintptr_t low;
        mote__pagebatch_resident(&s->pages, stack_lo(&t->stack), stack_top(&t->stack),
                                 &low);
        trim_measure(s, t, low);
        uint64_t depth = stack_top(&t->stack) - low;
        /* The pool keeps what recent tasks needed: a max that decays by
         * 1/8 per sample, so one deep task does not pin memory for long. */
        uint64_t decayed = s->pool_depth - s->pool_depth / 8;
        s->pool_depth = depth > decayed ? depth : decayed;
        if (s->pool_depth < OS_PAGE)
            s->pool_depth = OS_PAGE;
    }
    trim_set_bucket(s, t, -1);
}

void mote__trim_on_unlist(trim_state *s, task *t)
{
    if (s->sweep_at == &t->all_link)
        s->sweep_at = t->all_link.next;
}

void mote__trim_forget(trim_state *s, task *t)
{
    if (t->trim_queued)
        trim_unlink(s, t);
    trim_set_bucket(s, t, -1);
}

/* A task frozen and then thawed by another thread while it stayed parked
 * (a task that parked behind it wrote its record, a stray access) is on
 * no list: it left the candidates when it froze, and stayed resident until
 * it next ran (the one task in thousands parked on one channel that the
 * idle tests found unfrozen, when a park came more than a threshold after
 * the one before).  The thaw marks it FZ_ORPHAN and sets s->orphaned; the
 * worker then walks its tasks, TRIM_SWEEP_MAX a step, a step at most every
 * TRIM_SWEEP_EVERY, and puts its orphans in limbo, which joins the
 * candidates at the next step: at least that long after the thaw, whose
 * thread often writes the record next (frozen again before, the task
 * would fault its way back).  The walk goes on from where it stopped
 * (mote__trim_on_unlist moves it past a task that leaves), and once more
 * from the top if another orphan came meanwhile. */
static void trim_sweep(trim_state *s, const task *current, int64_t now)
{
    /* Taken at once, even when the step must wait: a flag left set keeps
     * the worker from sleeping (sched_idle), and s->next times the step. */
    if (XCHG(&s->orphaned, 0, ACQUIRE))
        s->sweep_again = true;
    if (now < s->sweep_next)
        return;
    for (list_node *n; (n = list_pop_front(&s->limbo));) {
        task *t = list_entry(n, task, trim_link);
        t->in_limbo = 0;
        list_push_back(&s->parked, &t->trim_link);
    }
    if (!s->sweep_at && s->sweep_again && s->all) {
        s->sweep_again = false;
        s->sweep_at = s->all->head;
    }
    if (!s->sweep_at)
        return;
    s->sweep_next = now + TRIM_SWEEP_EVERY;
    for (uint32_t k = 0; s->sweep_at && k < TRIM_SWEEP_MAX; k++) {
        task *t = list_entry(s->sweep_at, task, all_link);
        s->sweep_at = s->sweep_at->next;
        if (t == current || !mote__freeze_adopt(t) || t->trim_queued ||
            LOAD(&t->wait_state, ACQUIRE) != TASK_WAITING)
            continue;
        trim_link(s, t, true);
    }
}

/* Freezes the collected candidates (freeze.c): by address, so that the
 * write-protection covers runs of neighbouring slots in one call. */
static void trim_freeze(trim_state *s)
{
    if (!s->nfreeze)
        return;
    mote__pagebatch_flush(&s->pages); /* their trims first */
    qsort(s->freeze, s->nfreeze, sizeof *s->freeze, trim_by_addr);
    mote__freeze_batch(s->freeze, s->nfreeze, &s->fz);
    /* A candidate that did not freeze and is still parked (a write raced
     * the freeze, the kernel said EAGAIN, no memory for its image) goes
     * back on the list, due again after twice its threshold: else it would
     * stay resident until it next parks (seen under load: 26 of 4000). */
    for (size_t i = 0; i < s->nfreeze; i++) {
        task *t = s->freeze[i];
        /* Frozen, then thawed in place already: its thawer may not be done
         * with its record, so it waits a step, as a sweep's find does. */
        bool orphan = mote__freeze_adopt(t);
        if ((LOAD(&t->fz, ACQUIRE) & FZ_STATE) != FZ_ACTIVE || t->trim_queued ||
            LOAD(&t->wait_state, ACQUIRE) != TASK_WAITING)
            continue;
        if (orphan) {
            trim_link(s, t, true);
            if (s->sweep_next < s->clock + TRIM_SWEEP_EVERY)
                s->sweep_next = s->clock + TRIM_SWEEP_EVERY;
            continue;
        }
        mote__freeze_backoff(t);
        trim_link(s, t, false); /* (looked at again within the decay period: trim_run) */
    }
    s->nfreeze = 0;
}

void mote__trim_run(trim_state *s, stack_cache *cache, task *current, int64_t now,
                    bool force)
{
    s->clock = now;
    mote__freeze_reap();
    if (s->delay < 0 && !force) {
        s->next = INT64_MAX;
        return;
    }
    trim_sweep(s, current, now);
    int64_t next = INT64_MAX;
    int64_t base = force ? 0 : s->delay;
    uint32_t budget = force ? UINT32_MAX : TRIM_SCAN_MAX;
    list_node *l = s->parked.head;
    size_t nready = 0, nfrozen = 0;
    while (l && budget--) {
        list_node *nx = l->next;
        task *t = list_entry(l, task, trim_link);
        int64_t delay = base << t->trim_shift;
        if (t == current) { /* it is executing this very call: later */
            if (now + delay < next)
                next = now + delay;
        } else if (LOAD(&t->wait_state, RELAXED) == TASK_RUNNING && !force) {
            /* it ran and is not parked now (it yielded): drop it; it
             * rejoins at its next park */
            trim_unlink(s, t);
        } else {
            /* A task parked past the freeze threshold is frozen, trimmed or
             * not (the freeze gives back its whole stack; a trim backoff
             * must not keep a long sleeper resident). */
            int64_t parked = LOAD(&t->parked_at, RELAXED);
            bool can_freeze = s->freeze_after >= 0 && mote__freeze_fits(t);
            int64_t fdue =
                can_freeze ? parked + mote__freeze_after(t, s->freeze_after) : INT64_MAX;
            int64_t tdue = t->trimmed ? INT64_MAX : parked + delay;
            if (now >= fdue && nfrozen >= (s->busy ? TRIM_FREEZE_BUSY : FZ_BATCH)) {
                /* one batch a pass (~1-5 ms here), fewer while tasks wait
                 * to run: timers and ready tasks go first, the rest later */
                next = now;
            } else if (now >= fdue) {
                trim_unlink(s, t);
                s->freeze[s->nfreeze++] = t;
                nfrozen++;
                if (s->nfreeze == FZ_BATCH)
                    trim_freeze(s);
            } else if (now >= tdue) {
                /* Trimmed, it stays a candidate for a freeze later. */
                if (!can_freeze)
                    trim_unlink(s, t);
                t->trimmed = 1;
                s->ready[nready++] = t;
                if (nready == TRIM_BATCH) {
                    trim_ready(s, nready);
                    nready = 0;
                }
                if (fdue < next)
                    next = fdue;
            } else {
                int64_t due = tdue < fdue ? tdue : fdue;
                if (due < next)
                    next = due;
            }
        }
        l = nx;
    }
    trim_ready(s, nready);
    trim_freeze(s);
    if (l && next > now + base)
        next = now + base; /* budget ran out: come back soon */
    mote__pagebatch_flush(&s->pages);
    if (force || now >= s->next_decay) {
        mote__stack_pool_decay(cache, &s->pages, force ? OS_PAGE : s->pool_depth, force);
        s->next_decay = now + TRIM_DECAY_PERIOD;
    }
    /* A sweep under way, its finds in limbo, or an orphan come too soon
     * after the last step: the next step. */
    if ((s->sweep_at || s->sweep_again || s->limbo.head || LOAD(&s->orphaned, RELAXED)) &&
        s->sweep_next < next)
        next = s->sweep_next;
    if (s->n == 0 && next == INT64_MAX) {
        /* Pool decay only matters while something is pooled. */
        if (mote__stack_cache_count(cache))
            next = s->next_decay;
    } else if (s->next_decay < next) {
        next = s->next_decay;
    }
    s->next = next;
}

void mote__trim_fini(trim_state *s)
{
    FETCH_ADD(&trim_global_trimmed, s->pages.released, RELAXED);
    s->parked.head = s->parked.tail = NULL;
    s->limbo.head = s->limbo.tail = NULL;
    s->n = 0;
    s->sweep_at = NULL;
    s->sweep_again = false;
    STORE(&s->orphaned, 0, RELAXED);
}

uint64_t mote__trim_total_trimmed(void) { return LOAD(&trim_global_trimmed, RELAXED); }
