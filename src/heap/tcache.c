/*
 * tcache.c - per-thread caches ("heaps" in mimalloc's words): for each size
 * class a queue of pages the thread allocates from; the slow paths of
 * malloc and free; thread exit; the pool of dead caches.
 *
 * Invariants:
 *   - a live cache is touched only by its thread, except cache->remote
 *     (lock-free stack of notified pages) and the relaxed counters;
 *   - cur[c] is a page in queue[c] (the one a local free last went to, or
 *     the first), or &mote__heap_page_empty when the queue is empty, so the fast
 *     path needs no NULL test; the static mote__heap_tcache_empty has
 *     every cur[c] at &mote__heap_page_empty and sends each thread to the slow
 *     path on its first malloc;
 *   - caches are never freed: a thread's cache goes to the pool when the
 *     thread exits (pthread key destructor) and a new thread adopts it.  So
 *     a remote free may always dereference page->owner;
 *   - a dead cache has no queued page: every page it still holds is FULL or
 *     NOTIFIED, so the first remote free into it notifies and kicks the
 *     scavenger, which empties it under the pool lock (no polling).
 * Lock order: pool lock, then arena lock.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "heap/internal.h"
#include "os/os.h"

heap_page mote__heap_page_empty;
heap_tcache mote__heap_tcache_empty = {
    .cur = {[0 ... HEAP_NCLS - 1] = &mote__heap_page_empty}};
__thread heap_tcache *mote__heap_tls __attribute__((tls_model("initial-exec"))) =
    &mote__heap_tcache_empty;

static heap_lock pool_lock = HEAP_LOCK_INIT;
static heap_tcache *pool;       /* dead caches, under pool_lock */
static heap_tcache *all_caches; /* every cache, push-only */
static uint32_t ncaches;
static uint8_t *meta_cur, *meta_end; /* bump allocator for caches */
static pthread_key_t tcache_key;
static bool tcache_key_ok;

heap_tcache *mote__tcache_all(void) { return LOAD(&all_caches, ACQUIRE); }

/* ---- class queues ---- */

static inline void queue_sync_cur(heap_tcache *h, unsigned c)
{
    heap_page *first = queue_first(&h->queue[c]);
    h->cur[c] = first ? first : &mote__heap_page_empty;
}

static void queue_remove(heap_tcache *h, heap_page *pg)
{
    list_remove(&h->queue[pg->cls], &pg->qlink);
    queue_sync_cur(h, pg->cls);
}

static void queue_push_front(heap_tcache *h, heap_page *pg)
{
    list_push_front(&h->queue[pg->cls], &pg->qlink);
    queue_sync_cur(h, pg->cls);
}

static void queue_push_back(heap_tcache *h, heap_page *pg)
{
    list_push_back(&h->queue[pg->cls], &pg->qlink);
    queue_sync_cur(h, pg->cls);
}

/* ---- acquiring and dropping a cache ---- */

static void tcache_thread_exit(void *arg);

void mote__tcache_init_once(void)
{
    tcache_key_ok = pthread_key_create(&tcache_key, tcache_thread_exit) == 0;
}

static heap_tcache *tcache_acquire(void)
{
    heap_lock_acquire(&pool_lock);
    heap_tcache *h = pool;
    if (h) {
        pool = h->pool_next;
        h->pool_next = NULL;
    } else {
        if (meta_end - meta_cur < (ptrdiff_t)sizeof(heap_tcache)) {
            size_t chunk = 256 * 1024;
            meta_cur = mote__os_map_aligned(chunk, HEAP_OS_PAGE, false);
            if (!meta_cur) {
                meta_end = NULL;
                heap_lock_release(&pool_lock);
                return NULL;
            }
            meta_end = meta_cur + chunk;
        }
        h = (heap_tcache *)meta_cur;
        meta_cur += (sizeof(heap_tcache) + 63) & ~(size_t)63;
        for (unsigned c = 0; c < HEAP_NCLS; c++)
            h->cur[c] = &mote__heap_page_empty;
        h->id = ncaches++;
        h->all_next = LOAD(&all_caches, RELAXED);
        STORE(&all_caches, h, RELEASE);
    }
    heap_lock_release(&pool_lock);
    STORE(&h->dead, 0, SEQ_CST);
    mote__heap_tls = h;
    /* Set after mote__heap_tls: pthread_setspecific may itself allocate. */
    if (tcache_key_ok)
        pthread_setspecific(tcache_key, h);
    return h;
}

/* Takes notified pages back into their queues (owner only). */
static void tcache_drain_remote(heap_tcache *h)
{
    heap_page *pg = XCHG(&h->remote, NULL, ACQUIRE);
    while (pg) {
        heap_page *next = pg->remote_next;
        pg->remote_next = NULL;
        mote__page_set_normal(pg, HEAP_TF_NOTIFIED);
        if (pg->in_full) {
            pg->in_full = 0;
            queue_push_back(h, pg);
        }
        pg = next;
    }
}

static inline bool page_notified(heap_page *pg)
{
    return (LOAD(&pg->tfree, RELAXED) & HEAP_TF_STATE) == HEAP_TF_NOTIFIED;
}

/* Frees every page of h that holds no live block, and (if park) takes every
 * other page out of the queues marked FULL.  Owner only. */
static void tcache_cleanup(heap_tcache *h, bool park)
{
    list to_free = {0};
    tcache_drain_remote(h);
    for (unsigned c = 1; c < HEAP_NCLS; c++) {
        heap_page *pg = queue_first(&h->queue[c]);
        while (pg) {
            heap_page *next = queue_next(pg);
            mote__page_collect(pg);
            if (page_used(pg) == 0 && !page_notified(pg)) {
                queue_remove(h, pg);
                list_push_back(&to_free, &pg->qlink);
            } else if (park) {
                if (mote__page_try_mark_full(pg)) {
                    queue_remove(h, pg);
                    pg->in_full = 1;
                } else {
                    continue; /* a remote free raced in: look again */
                }
            }
            pg = next;
        }
    }
    if (!list_empty(&to_free)) {
        heap_lock_acquire(&mote__heap_arena_lock);
        list_node *n;
        while ((n = list_pop_front(&to_free)))
            mote__arena_page_free(list_entry(n, heap_page, qlink));
        heap_lock_release(&mote__heap_arena_lock);
        mote__scavenger_ensure();
    }
}

static void tcache_thread_exit(void *arg)
{
    heap_tcache *h = arg;
    if (!h || h != mote__heap_tls)
        return;
    /* dead = 1 before the last drain: a remote free that pushes after it
     * sees dead and kicks the scavenger (both seq_cst). */
    STORE(&h->dead, 1, SEQ_CST);
    tcache_cleanup(h, true);
    mote__heap_tls = &mote__heap_tcache_empty;
    heap_lock_acquire(&pool_lock);
    h->pool_next = pool;
    pool = h;
    heap_lock_release(&pool_lock);
    if (LOAD(&h->remote, SEQ_CST))
        mote__scavenger_kick();
}

void mote__tcache_collect_dead(void)
{
    heap_lock_acquire(&pool_lock);
    for (heap_tcache *h = pool; h; h = h->pool_next)
        if (LOAD(&h->remote, ACQUIRE))
            tcache_cleanup(h, true);
    heap_lock_release(&pool_lock);
}

void mote__tcache_release_own(void)
{
    heap_tcache *h = mote__heap_tls;
    if (h != &mote__heap_tcache_empty)
        tcache_cleanup(h, false);
}

/* ---- slow paths ---- */

static heap_page *tcache_find_page(heap_tcache *h, unsigned cls)
{
    heap_page *pg = queue_first(&h->queue[cls]);
    while (pg) {
        heap_page *next = queue_next(pg);
        if (!pg->free)
            mote__page_collect(pg);
        if (!pg->free)
            mote__page_extend(pg);
        if (pg->free) {
            if (pg != queue_first(&h->queue[cls])) {
                queue_remove(h, pg);
                queue_push_front(h, pg);
            }
            h->cur[cls] = pg;
            return pg;
        }
        if (!mote__page_try_mark_full(pg))
            continue; /* a remote free raced in: collect it */
        queue_remove(h, pg);
        pg->in_full = 1;
        pg = next;
    }
    bool zero;
    heap_lock_acquire(&mote__heap_arena_lock);
    pg = mote__arena_page_alloc(mote__sizeclass_slices[cls], &zero);
    if (pg)
        mote__page_init_small(pg, h, cls);
    heap_lock_release(&mote__heap_arena_lock);
    if (!pg)
        return NULL;
    mote__page_extend(pg);
    queue_push_front(h, pg);
    return pg;
}

void *mote__tcache_alloc_slow(heap_tcache *h, unsigned cls, size_t n)
{
    if (h == &mote__heap_tcache_empty) {
        heap_ensure_init();
        h = tcache_acquire();
        if (!h) {
            errno = ENOMEM;
            return NULL;
        }
    }
    if (HEAP_UNLIKELY(cls == 0)) /* the class table was not filled yet */
        cls = sizeclass_of(n);
    if (LOAD(&h->remote, RELAXED))
        tcache_drain_remote(h);
    heap_page *pg = tcache_find_page(h, cls);
    if (!pg) {
        errno = ENOMEM;
        return NULL;
    }
    heap_block *b = pg->free;
    pg->free = b->next;
    page_used_add(pg, 1);
    b->cookie = 0;
    return b;
}

/* The owner freed a block of pg and pg is now empty or was parked full. */
void mote__tcache_page_freed(heap_tcache *h, heap_page *pg)
{
    if (pg->in_full) { /* back in the queue; tfree may stay FULL (page.c) */
        pg->in_full = 0;
        queue_push_back(h, pg);
    }
    if (page_used(pg) != 0)
        return;
    /* Keep the last page of a one-slice class: a thread that frees its
     * last block often allocates the next one at once.  At most one empty
     * page per class stays with a thread. */
    heap_queue *q = &h->queue[pg->cls];
    if (q->head == &pg->qlink && q->tail == &pg->qlink && pg->slices == 1)
        return;
    if (page_notified(pg))
        return;
    queue_remove(h, pg);
    heap_lock_acquire(&mote__heap_arena_lock);
    mote__arena_page_free(pg);
    heap_lock_release(&mote__heap_arena_lock);
    mote__scavenger_ensure();
}

/* ---- fork ---- */

void mote__tcache_fork_prepare(void) { heap_lock_acquire(&pool_lock); }

void mote__tcache_fork_parent(void) { heap_lock_release(&pool_lock); }

void mote__tcache_fork_child(void) { STORE(&pool_lock.v, 0, RELEASE); }
