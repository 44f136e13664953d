/*
 * trim.c - gives back the stack pages that parked tasks and pooled stacks
 * no longer use (see trim.h for the design).
 *
 * Owned by one worker: every function runs on that worker's thread, and
 * every task it touches is pinned to that worker and not running.  The only
 * shared state is the cumulative byte count, kept per worker and summed.
 *
 * Costs measured on this VM: mincore ~0.4 us per stack, MADV_DONTNEED via
 * process_madvise ~0.55 us per range (1.1 us one call each), a page fault
 * to bring a page back 1.3-1.8 us.  So a task is trimmed at most once per
 * park, only after it stayed parked for the delay, and only where mincore
 * says something is resident.
 */
#include "trim.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "config.h"
#include "os/os.h"
#include "task.h"

#define TRIM_LAZY_DELAY (20 * 1000000LL)   /* ns parked before a trim */
#define TRIM_DECAY_PERIOD (1000 * 1000000LL) /* pool decay */
#define TRIM_SCAN_MAX 4096 /* candidates looked at per call */
#define TRIM_SAMPLE_EVERY 256

static uint64_t trim_global_trimmed; /* from runs that ended */

void mote__trim_init(trim_state *s, int mode)
{
    memset(s, 0, sizeof *s);
    s->delay = mode == CONFIG_TRIM_OFF     ? -1
               : mode == CONFIG_TRIM_EAGER ? 0
                                           : TRIM_LAZY_DELAY;
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
        __atomic_store_n(&s->hist[t->hw_bucket], s->hist[t->hw_bucket] - 1,
                         __ATOMIC_RELAXED);
    t->hw_bucket = (int8_t)b;
    if (b >= 0)
        __atomic_store_n(&s->hist[b], s->hist[b] + 1, __ATOMIC_RELAXED);
}

static void trim_unlink(trim_state *s, task *t)
{
    if (t->trim_prev)
        t->trim_prev->trim_next = t->trim_next;
    else
        s->head = t->trim_next;
    if (t->trim_next)
        t->trim_next->trim_prev = t->trim_prev;
    else
        s->tail = t->trim_prev;
    t->trim_prev = t->trim_next = NULL;
    t->trim_queued = false;
    s->n--;
}

static void trim_append(trim_state *s, task *t)
{
    t->trim_next = NULL;
    t->trim_prev = s->tail;
    if (s->tail)
        s->tail->trim_next = t;
    else
        s->head = t;
    s->tail = t;
    t->trim_queued = true;
    s->n++;
}

void mote__trim_on_park(trim_state *s, task *t)
{
    t->parked_at = s->clock;
    if (s->delay >= 0 && !t->trim_queued) {
        trim_append(s, t);
        if (s->next > s->clock + s->delay)
            s->next = s->clock + s->delay;
    }
}

static void trim_flush(trim_state *s)
{
    if (s->nbatch) {
        mote__os_decommit_batch(s->batch, s->nbatch);
        s->nbatch = 0;
    }
}

static void trim_queue_range(trim_state *s, uintptr_t lo, uintptr_t hi)
{
    if (s->nbatch == TRIM_BATCH)
        trim_flush(s);
    s->batch[s->nbatch].iov_base = (void *)lo;
    s->batch[s->nbatch].iov_len = hi - lo;
    s->nbatch++;
}

/* Lowest resident page in [lo, hi) and how many are resident; *low = hi
 * when none.  The kernel's own answer: nothing is estimated. */
static size_t trim_resident(trim_state *s, uintptr_t lo, uintptr_t hi,
                            uintptr_t *low)
{
    size_t count = 0;
    *low = hi;
    for (uintptr_t p = lo; p < hi;) {
        size_t pages = (hi - p) / OS_PAGE;
        if (pages > sizeof s->vec)
            pages = sizeof s->vec;
        if (mincore((void *)p, pages * OS_PAGE, s->vec) != 0)
            return count;
        for (size_t i = 0; i < pages; i++)
            if (s->vec[i] & 1) {
                if (*low == hi)
                    *low = p + i * OS_PAGE;
                count++;
            }
        p += pages * OS_PAGE;
    }
    return count;
}

static void trim_count(trim_state *s, size_t pages)
{
    __atomic_store_n(&s->trimmed, s->trimmed + pages * OS_PAGE, __ATOMIC_RELAXED);
}

/* Queues [low, hi), which holds n resident pages, to be given back. */
static void trim_give_back(trim_state *s, uintptr_t low, uintptr_t hi, size_t n)
{
    if (n) {
        trim_queue_range(s, low, hi);
        trim_count(s, n);
    }
}

/* Gives back what is resident in [lo, hi); returns the lowest resident
 * address (hi when none): the high-water mark of that range. */
static uintptr_t trim_range(trim_state *s, uintptr_t lo, uintptr_t hi)
{
    uintptr_t low;
    size_t n = trim_resident(s, lo, hi, &low);
    trim_give_back(s, low, hi, n);
    return low;
}

static uintptr_t trim_keep(const task *t)
{
    uintptr_t keep = (uintptr_t)t->ctx.sp & ~(uintptr_t)(OS_PAGE - 1);
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
    trim_give_back(s, low, keep, n);
    trim_set_bucket(s, t, trim_bucket(stack_top(&t->stack) - low));
}

/* Trims one parked task down to the page holding its saved stack pointer. */
static void trim_task(trim_state *s, task *t)
{
    uintptr_t low = trim_range(s, stack_lo(&t->stack), trim_keep(t));
    trim_set_bucket(s, t, trim_bucket(stack_top(&t->stack) - low));
}

static int trim_by_addr(const void *a, const void *b)
{
    uintptr_t x = stack_lo(&(*(task *const *)a)->stack), y = stack_lo(&(*(task *const *)b)->stack);
    return x < y ? -1 : x > y;
}

/* Trims the matured candidates in s->ready.  Tasks spawned together sit in
 * neighbouring slots, so one mincore call usually answers for a whole run
 * of them (guards and kept pages in between are simply not looked at):
 * ~0.1 us a task instead of ~0.7 us for a call each. */
static void trim_ready(trim_state *s, size_t n)
{
    task **v = s->ready;
    qsort(v, n, sizeof *v, trim_by_addr);
    for (size_t i = 0; i < n;) {
        uintptr_t lo = stack_lo(&v[i]->stack), hi = trim_keep(v[i]);
        size_t j = i + 1;
        while (j < n && trim_keep(v[j]) - lo <= sizeof s->vec * OS_PAGE &&
               stack_lo(&v[j]->stack) - hi <= 64 * OS_PAGE)
            hi = trim_keep(v[j++]);
        if (j - i > 1 && mincore((void *)lo, hi - lo, s->vec) == 0) {
            for (size_t k = i; k < j; k++)
                trim_apply(s, v[k], s->vec + (stack_lo(&v[k]->stack) - lo) / OS_PAGE);
        } else { /* a lone task, or a gap between chunks: one at a time */
            for (size_t k = i; k < j; k++)
                trim_task(s, v[k]);
        }
        i = j;
    }
}

void mote__trim_on_start(trim_state *s, task *t)
{
    t->hw_bucket = -1;
    t->hw_sample = false;
    if (s->delay >= 0 && ++s->starts % TRIM_SAMPLE_EVERY == 0) {
        /* A pooled stack carries the residency of its earlier users; start
         * this one from its top page so its exit shows its own depth. */
        uintptr_t keep = stack_top(&t->stack) - OS_PAGE;
        uintptr_t low;
        size_t n = trim_resident(s, stack_lo(&t->stack), keep, &low);
        if (n) { /* now, not batched: the task runs next */
            mote__os_decommit((void *)low, keep - low);
            trim_count(s, n);
        }
        t->hw_sample = true;
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
        trim_resident(s, stack_lo(&t->stack), stack_top(&t->stack), &low);
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

/* Pool decay: slots unused for a whole period are decommitted and go cold;
 * the rest keep only pool_depth resident. */
static void trim_pool(trim_state *s, stack_cache *cache, bool force)
{
    uintptr_t tops[256];
    uint64_t keep_depth = force ? OS_PAGE : (s->pool_depth + OS_PAGE - 1) & ~(uint64_t)(OS_PAGE - 1);
    for (int c = 0; c < STACK_NCLASS; c++) {
        size_t size = stack_class_size(c);
        size_t ncold = force ? cache->count[c] : cache->low[c];
        while (ncold) {
            size_t n = mote__stack_cache_take_lru(cache, c, ncold < 256 ? ncold : 256, tops);
            if (!n)
                break;
            ncold -= n;
            for (size_t i = 0; i < n; i++)
                trim_range(s, tops[i] - size, tops[i]);
            trim_flush(s); /* before the slots are visible as cold */
            mote__stack_make_cold(c, tops, n);
        }
        /* Slots that caches spilled to the class sat there unused too. */
        size_t n;
        while ((n = mote__stack_class_take_free(c, tops, 256))) {
            for (size_t i = 0; i < n; i++)
                trim_queue_range(s, tops[i] - size, tops[i]);
            trim_flush(s);
            mote__stack_make_cold(c, tops, n);
        }
        /* Warm slots: keep the top keep_depth bytes. */
        if (keep_depth < size) {
            for (uintptr_t t = cache->head[c]; t; t = stack_next(t))
                trim_range(s, t - size, t - keep_depth);
        }
        cache->low[c] = cache->count[c];
    }
    trim_flush(s);
}

void mote__trim_run(trim_state *s, stack_cache *cache, task *current, int64_t now,
              bool force)
{
    s->clock = now;
    if (s->delay < 0 && !force) {
        s->next = INT64_MAX;
        return;
    }
    int64_t next = INT64_MAX;
    int64_t delay = force ? 0 : s->delay;
    uint32_t budget = force ? UINT32_MAX : TRIM_SCAN_MAX;
    task *t = s->head;
    size_t nready = 0;
    while (t && budget--) {
        task *nx = t->trim_next;
        if (t == current) { /* it is executing this very call: later */
            if (now + delay < next)
                next = now + delay;
            t = nx;
            continue;
        }
        if (__atomic_load_n(&t->wait_state, __ATOMIC_RELAXED) == TASK_RUNNING &&
            !force) {
            /* it ran and is not parked now (it yielded): drop it; it
             * rejoins at its next park */
            trim_unlink(s, t);
        } else if (now - t->parked_at >= delay) {
            trim_unlink(s, t);
            s->ready[nready++] = t;
            if (nready == TRIM_BATCH) {
                trim_ready(s, nready);
                nready = 0;
            }
        } else {
            int64_t due = t->parked_at + delay;
            if (due < next)
                next = due;
        }
        t = nx;
    }
    trim_ready(s, nready);
    if (t && next > now + delay)
        next = now + delay; /* budget ran out: come back soon */
    trim_flush(s);
    if (force || now >= s->next_decay) {
        trim_pool(s, cache, force);
        s->next_decay = now + TRIM_DECAY_PERIOD;
    }
    if (s->n == 0 && next == INT64_MAX) {
        /* Pool decay only matters while something is pooled. */
        for (int c = 0; c < STACK_NCLASS; c++)
            if (cache->count[c]) {
                next = s->next_decay;
                break;
            }
    } else if (s->next_decay < next) {
        next = s->next_decay;
    }
    s->next = next;
}

void mote__trim_fini(trim_state *s)
{
    __atomic_fetch_add(&trim_global_trimmed, s->trimmed, __ATOMIC_RELAXED);
    s->head = s->tail = NULL;
    s->n = 0;
}

uint64_t mote__trim_total_trimmed(void)
{
    return __atomic_load_n(&trim_global_trimmed, __ATOMIC_RELAXED);
}
