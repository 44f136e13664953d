/*
 * tcache.c - per-thread caches ("heaps" in mimalloc's words): for each size
 * class a queue of pages the thread allocates from; the slow paths of
 * malloc and free; blocks freed by other threads coming home; thread exit
 * and the pool of dead caches that new threads adopt.
 *
 * Invariants:
 *   - a live cache is touched only by its thread, except `inbox` (other
 *     threads push lists of blocks with one CAS, the owner takes them all
 *     with one exchange: no ABA) and `dead`;
 *   - cur[c] is a page of queue[c] (the first, or the one a malloc found
 *     blocks in), or the class's recent list (a local free last went
 *     there), or its foreign list, or &mote__heap_page_empty when the
 *     queue is empty; for a bitmap class it is always the class's
 *     stash (or the empty page for classes without one); so the
 *     fast path needs no NULL test; the static mote__heap_tcache_empty has
 *     every cur[c] at &mote__heap_page_empty and sends each thread to the
 *     slow path on its first malloc;
 *   - a small page is in its class queue, or out of it with in_full = 1
 *     (it had no free block and no room to carve when it left); it comes
 *     back when one of its blocks does;
 *   - a block of ours freed on this thread is on its page's list or on the
 *     class's recent list (still counted as used on its page, so its page
 *     stays); a recent list holds at most `reserved` blocks, `used` is its
 *     room, and a draining one (in_full) is empty with no room;
 *   - a block freed by a thread other than its page's owner is, until the
 *     owner takes it back, either in the freeing thread's rbuf (at most
 *     HEAP_RBUF_MAX per slot; sent when a slot fills or is needed for
 *     another cache, on every HEAP_RBUF_FLUSH-th malloc slow path of that
 *     thread, at its exit and on mote_mem_release) or in the owner's
 *     inbox.  Its page's used count still counts it, so a page never goes
 *     back to the arena with a block in flight;
 *   - a page of blocks changes owner only while its cache is dead, in the
 *     pool, under the pool lock (tcache_reclaim): a live thread about to
 *     take a new page takes a partly used one of a dead cache instead.  A block
 *     still on its way to the old owner is passed on by whoever takes that
 *     inbox in (inbox_block), so every block reaches its page's owner;
 *   - caches are never freed: at thread exit a cache puts its recent lists
 *     back on their pages, sends its rbuf and foreign lists, takes its inbox
 *     in, frees its empty pages except one per one-slice class and
 *     keeps every other page in its queues; it goes to the pool, and the next
 *     new thread adopts it with those pages (LIFO: the warmest first), so a
 *     successor allocates into its predecessor's partly used pages.  While
 *     dead, the scavenger (pool lock) takes its inbox in and frees its kept
 *     empty pages once it has been dead for the decay period.  So a remote
 *     free may always dereference page->owner.
 * Lock order: pool lock, then arena lock.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "arch/arch.h"
#include "heap/internal.h"
#include "os/os.h"

heap_page mote__heap_page_empty;
heap_tcache mote__heap_tcache_empty = {
    .cur = {[0 ... HEAP_NCLS - 1] = &mote__heap_page_empty}};
__thread heap_tcache *mote__heap_tls __attribute__((tls_model("initial-exec"))) =
    &mote__heap_tcache_empty;

static heap_lock pool_lock = HEAP_LOCK_INIT;
static heap_tcache *pool; /* dead caches, under pool_lock (read without it: atomic) */
static heap_tcache *all_caches; /* every cache, push-only */
static uint32_t ncaches;
static uint8_t *meta_cur, *meta_end; /* bump allocator for caches */
static pthread_key_t tcache_key;
static bool tcache_key_ok;
/* This thread's cache went to the pool at its exit (tcache_thread_exit).
 * glibc may still free for the thread after that (a failed dlopen's
 * message, other threads' TLS blocks when a detached thread ends), and a
 * key destructor in its last round may allocate: no destructor is left to
 * give a cache back then, so such a thread takes none (a cache leaked per
 * thread: 13.6 KB of RSS each, ~250 MB of address space for 2,000). */
static __thread bool tcache_exited __attribute__((tls_model("initial-exec")));
/* Frees this thread made with no cache (it has not allocated yet): the
 * first TCACHE_LONE_FREES go home alone, so a thread that frees only a few
 * blocks on its way out (glibc frees other threads' TLS blocks in an
 * exiting detached thread, after every destructor) takes no cache it could
 * never give back; a thread that keeps freeing (a consumer) takes one. */
static __thread uint32_t tcache_lone_frees __attribute__((tls_model("initial-exec")));
#define TCACHE_LONE_FREES 64

heap_tcache *mote__tcache_all(void) { return LOAD(&all_caches, ACQUIRE); }

/* ---- class queues ---- */

/* A bitmap class's stash, or the empty page when it has no room. */
static inline heap_page *stash_cur(heap_tcache *h, unsigned c)
{
    heap_page *s = &h->stash[c - HEAP_BITMAP_CLS];
    return s->reserved ? s : &mote__heap_page_empty;
}

static inline void queue_sync_cur(heap_tcache *h, unsigned c)
{
    if (c >= HEAP_BITMAP_CLS) { /* the fast path serves only the stash */
        h->cur[c] = stash_cur(h, c);
        return;
    }
    if (h->recent[c].free) { /* the warmest blocks first */
        h->cur[c] = &h->recent[c];
        return;
    }
    heap_page *first = queue_first(&h->queue[c]);
    h->cur[c] = first ? first : &mote__heap_page_empty;
}

static void queue_remove(heap_tcache *h, heap_page *pg)
{
    mote__assert(!pg->in_full && page_owner(pg) == h);
    mote__assert_expensive(list_contains(&h->queue[pg->cls], &pg->qlink));
    list_remove(&h->queue[pg->cls], &pg->qlink);
    if (h->cur[pg->cls] == pg || !h->queue[pg->cls].head)
        queue_sync_cur(h, pg->cls);
}

static void queue_push_front(heap_tcache *h, heap_page *pg)
{
    list_push_front(&h->queue[pg->cls], &pg->qlink);
    queue_sync_cur(h, pg->cls);
}

/* A parked page that got a block back rejoins its queue: in front when it
 * lies below the first page, else at the back.  Roughly address-ordered
 * queues keep a class on the same few pages from one burst to the next
 * (the others stay untouched, or empty and free to go). */
static void queue_return(heap_tcache *h, heap_page *pg)
{
    heap_page *first = queue_first(&h->queue[pg->cls]);
    if (first && pg->start < first->start) {
        list_push_front(&h->queue[pg->cls], &pg->qlink);
        queue_sync_cur(h, pg->cls);
        return;
    }
    list_push_back(&h->queue[pg->cls], &pg->qlink);
    if (h->cur[pg->cls] == &mote__heap_page_empty)
        queue_sync_cur(h, pg->cls);
}

static inline heap_page *block_page(const void *b);

/* Whole-structure check (MOTE_DEBUG=2): every queued page is ours, not
 * parked, and cur[c] is in queue[c]. */
__attribute__((unused)) static bool tcache_valid(heap_tcache *h)
{
    for (unsigned c = 1; c < HEAP_NCLS; c++) {
        if (!list_valid(&h->queue[c]))
            return false;
        bool bm = c >= HEAP_BITMAP_CLS;
        heap_page *l = bm ? &h->stash[c - HEAP_BITMAP_CLS] : &h->foreign[c];
        bool cur_found =
            bm ? h->cur[c] == stash_cur(h, c)
               : (h->cur[c] == &mote__heap_page_empty && !h->queue[c].head) ||
                     h->cur[c] == l || h->cur[c] == &h->recent[c];
        if (page_used(l) + (l->free ? 1 : 0) > l->reserved)
            return false;
        if (!bm) { /* the recent list: our blocks, its length as counted */
            const heap_page *r = &h->recent[c];
            uint32_t n = 0;
            for (const heap_block *b = r->free; b; b = b->next, n++)
                if (n > r->reserved || page_owner_raw(block_page(b)) != h)
                    return false;
            if (r->in_full ? n != 0 || page_used(r) != 0
                           : n + page_used(r) != r->reserved)
                return false;
        }
        for (heap_page *pg = queue_first(&h->queue[c]); pg; pg = queue_next(pg)) {
            if (page_owner(pg) != h || pg->cls != c || pg->in_full ||
                pg->kind != (bm ? HEAP_PAGE_BITMAP : HEAP_PAGE_SMALL) ||
                (bm && page_owner_raw(pg) == h))
                return false;
            /* one load: the scavenger puts claimed blocks back and clears
             * PURGING in one store, which could fall between two */
            uint64_t bits = bm ? LOAD(&pg->bits, RELAXED) : 0;
            if (bm &&
                page_used(pg) !=
                    pg->reserved - (uint32_t)__builtin_popcountll(bits & bm_all(pg)) &&
                !(bits & HEAP_BM_PURGING))
                return false;
            cur_found |= pg == h->cur[c];
        }
        if (!cur_found)
            return false;
    }
    return true;
}

/* ---- pages back to the arena ---- */

static void pages_to_arena(list *l)
{
    if (list_empty(l))
        return;
    heap_lock_acquire(&mote__heap_arena_lock);
    list_node *n;
    while ((n = list_pop_front(l)))
        mote__arena_page_free(list_entry(n, heap_page, qlink));
    heap_lock_release(&mote__heap_arena_lock);
    mote__scavenger_ensure();
}

/* An empty page of a one-slice class stays with its cache while the class
 * has at most two pages: a thread that frees its last block often allocates
 * the next one at once, and a class that needs a second page now and then
 * would otherwise take a new one each time (from slices another class may
 * have made resident: RSS grows with each round).  So at most two empty
 * pages per class stay with a thread.  Bitmap pages of any length may stay:
 * the scavenger releases their free blocks anyway. */
static inline bool page_stays_empty(heap_tcache *h, heap_page *pg)
{
    heap_queue *q = &h->queue[pg->cls];
    return (pg->slices == 1 || pg->kind == HEAP_PAGE_BITMAP) &&
           (q->head == q->tail || q->head->next == q->tail);
}

/* An empty bitmap page leaves only once its bitmap is taken whole, so no
 * block of it can be claimed any more; false while the scavenger holds
 * some of its blocks (it stays, and goes at a later look). */
static bool bm_retire(heap_page *pg)
{
    uint64_t all = bm_all(pg);
    heap_asym *a = page_asym(pg);
    bool whole;
    if (heap_asym_enter(a)) { /* (see bm_take) */
        whole = LOAD(&pg->bits, RELAXED) == all;
        mote__debug_widen();
        if (whole)
            STORE(&pg->bits, HEAP_BM_RETIRED, RELAXED);
        heap_asym_leave(a);
    } else {
        whole = CAS(&pg->bits, &all, HEAP_BM_RETIRED, ACQUIRE);
    }
    if (!whole)
        return false;
    if (XCHG(&pg->dirty, 0, RELAXED))
        FETCH_SUB(&mote__heap_bm_dirty, 1, RELAXED);
    return true;
}

static inline unsigned block_index(const heap_page *pg, const void *p)
{
    return (unsigned)page_block_index(pg, (uintptr_t)p - (uintptr_t)pg->start);
}

/* Block p of bitmap page pg, owned by h, is back. */
static void bm_return(heap_tcache *h, heap_page *pg, void *p, list *to_free)
{
    uint64_t bit = 1ULL << block_index(pg, p), old;
    heap_asym *a = page_asym(pg);
    if (heap_asym_enter(a)) { /* (see bm_take) */
        old = LOAD(&pg->bits, RELAXED);
        mote__debug_widen();
        STORE(&pg->bits, old | bit, RELAXED);
        heap_asym_leave(a);
    } else {
        old = FETCH_OR(&pg->bits, bit, RELEASE);
    }
    if (old & bit)
        mote__heap_invalid_free(p, "free");
    uint32_t u = page_used_add(pg, -1);
    h->bm_out[pg->cls - HEAP_BITMAP_CLS]--;
    mote__page_bm_note_free(pg);
    if (pg->in_full) {
        pg->in_full = 0;
        queue_return(h, pg);
    }
    if (u == 0 && !page_stays_empty(h, pg) && bm_retire(pg)) {
        queue_remove(h, pg);
        list_push_back(to_free, &pg->qlink);
    }
}

/* A block of pg, owned by h, is back (cookie already set): on its page's
 * list; a parked page goes back in its queue; an empty one may leave. */
static inline void page_take_block(heap_tcache *h, heap_page *pg, heap_block *b,
                                   list *to_free)
{
    mote__assert(page_owner(pg) == h && page_used(pg) > 0);
    if (pg->kind == HEAP_PAGE_BITMAP) { /* the cookie stays: bm_claim clears it */
        bm_return(h, pg, b, to_free);
        return;
    }
    mote__assert(pg->kind == HEAP_PAGE_SMALL);
    b->next = pg->free;
    pg->free = b;
    uint32_t u = page_used_add(pg, -1);
    if (pg->in_full) {
        pg->in_full = 0;
        queue_return(h, pg);
    }
    if (u == 0 && !page_stays_empty(h, pg)) {
        queue_remove(h, pg);
        list_push_back(to_free, &pg->qlink);
    }
}

/* ---- blocks freed by other threads ----
 *
 * An inbox entry is a message (its address | 1: link in msg->link) or a
 * single block (its address: link in block->next), for a free that could
 * not get a message block and for messages going home.  Entries are pushed
 * with one CAS and taken all at once with one exchange. */

#define INBOX_MSG 1u

static void inbox_push(heap_tcache *to, uintptr_t e, uintptr_t *link)
{
    uintptr_t old = LOAD(&to->inbox, RELAXED);
    do {
        *link = old;
    } while (!CAS_WEAK(&to->inbox, &old, e, SEQ_CST));
    /* The exiting owner sets dead before its last look at the inbox, and
     * looks again once in the pool: it or we see the other (seq_cst). */
    if (!old && LOAD(&to->dead, SEQ_CST))
        mote__scavenger_kick();
}

static void inbox_push_block(heap_tcache *to, heap_block *b)
{
    inbox_push(to, (uintptr_t)b, (uintptr_t *)&b->next);
}

static inline heap_page *block_page(const void *b)
{
    heap_segment *seg = heap_segment_of(b);
    return seg->map[((uintptr_t)b >> HEAP_SLICE_SHIFT) & (HEAP_SLICES - 1)];
}

/* A block from h's inbox, back on its page; or on to the page's owner, when
 * the page went to another cache while h was dead (tcache_reclaim). */
static inline void inbox_block(heap_tcache *h, heap_block *b, list *to_free)
{
    heap_page *pg = block_page(b);
    heap_tcache *own = page_owner(pg);
    if (HEAP_LIKELY(own == h))
        page_take_block(h, pg, b, to_free);
    else
        inbox_push_block(own, b);
}

/* A message block whose message was read (or never sent): back on its page
 * when the page is h's or its shadow's (where h's messages come from),
 * else home to its owner as a single block. */
static void msg_block_free(heap_tcache *h, heap_block *mb, list *to_free)
{
    heap_page *pg = block_page(mb);
    heap_tcache *own = page_owner(pg);
    mb->cookie = (uintptr_t)mb ^ mote__heap_key;
    if (own == h || own == h->shadow)
        page_take_block(own, pg, mb, to_free);
    else
        inbox_push_block(own, mb);
}

static void rbuf_send(heap_tcache *h, heap_rbuf *r)
{
    heap_msg *m = r->msg;
    mote__assert(m && m->n && r->to && r->to != h);
    h->rbuf_n -= m->n;
    r->msg = NULL;
    if (m->n > HEAP_RBUF_SOLO) {
        inbox_push(r->to, (uintptr_t)m | INBOX_MSG, &m->link);
        return;
    }
    /* A message this short would cost more than its blocks: 512 bytes in
     * flight, and a trip home, for one or two pointers.  The blocks go
     * alone (each is its own link) and the message block stays. */
    for (uint32_t i = 0; i < m->n; i++)
        inbox_push_block(r->to, m->blk[i]);
    list to_free = {0};
    msg_block_free(h, (heap_block *)m, &to_free);
    pages_to_arena(&to_free);
}

static void rbuf_send_all(heap_tcache *h)
{
    for (unsigned i = 0; i < HEAP_RBUF_SLOTS && h->rbuf_n; i++)
        if (h->rbuf[i].msg)
            rbuf_send(h, &h->rbuf[i]);
    mote__assert(h->rbuf_n == 0);
}

/* A block of class cls from h's current page or list, as malloc's fast
 * path takes one, else from mote__tcache_alloc_in; never sampled.  For the
 * caches malloc's countdown does not serve: messages' and the shadow's. */
static inline void *cache_take(heap_tcache *h, unsigned cls)
{
    heap_page *pg = h->cur[cls];
    heap_block *b = pg->free;
    if (HEAP_UNLIKELY(cls >= HEAP_BITMAP_CLS || !b))
        return mote__tcache_alloc_in(h, cls);
    pg->free = b->next;
    page_used_add(pg, 1);
    b->cookie = 0;
    return b;
}

/* A message block, from h's secondary cache (the profiler's shadow): its
 * own pages, so messages, which live a different life from the program's
 * blocks, do not fragment the pages of the 512-byte class.  Never sampled.
 * From h itself when the secondary cache cannot be made. */
static heap_msg *msg_alloc(heap_tcache *h)
{
    unsigned msg_cls = sizeclass_of(sizeof(heap_msg));
    heap_tcache *s = mote__tcache_shadow(h);
    return cache_take(s ? s : h, msg_cls);
}

/* Puts b, a block of cache to's, in the message being filled for to. */
static inline __attribute__((always_inline)) void rbuf_put(heap_tcache *h,
                                                           heap_tcache *to, heap_block *b)
{
    heap_rbuf *r = heap_rbuf_of(h, to);
    if (r->to != to) {
        if (r->msg)
            rbuf_send(h, r);
        r->to = to;
    }
    heap_msg *m = r->msg;
    if (!m) {
        m = msg_alloc(h);
        if (HEAP_UNLIKELY(!m)) { /* out of memory: send it alone */
            inbox_push_block(to, b);
            return;
        }
        /* msg_alloc may have sent this very slot (slow path) */
        if (HEAP_UNLIKELY(r->msg || r->to != to)) {
            if (r->msg)
                rbuf_send(h, r);
            r->to = to;
        }
        m->n = 0;
        r->msg = m;
    }
    m->blk[m->n++] = b;
    h->rbuf_n++;
    if (m->n == HEAP_RBUF_MAX)
        rbuf_send(h, r);
}

/* ---- foreign lists (see HEAP_PAGE_FOREIGN in internal.h) ---- */

/* A list descriptor (foreign list or stash) of class c, empty, room for
 * cap blocks. */
static void list_page_init(heap_page *l, uint8_t kind, unsigned c, uint32_t cap)
{
    l->kind = kind;
    l->cls = (uint8_t)c;
    l->bsize = mote__sizeclass_size[c];
    l->reserved = cap;
    l->free = NULL;
    page_used_set(l, cap);
}

static void foreign_init(heap_tcache *h)
{
    for (unsigned c = 1; c < HEAP_BITMAP_CLS; c++) {
        heap_page *f = &h->foreign[c];
        uint32_t bsize = mote__sizeclass_size[c];
        mote__assert(bsize != 0); /* caches are made after heap init */
        /* A block that shares a cache line with its neighbours stays out:
         * reused here, it would be written on this CPU while its
         * neighbours are written on the owner's (passive false sharing:
         * cache-scratch ran 4.5x slower).  A list with no room sends
         * every free of the class home. */
        uint32_t cap = 0;
        if (bsize && bsize % HEAP_LINE == 0) {
            cap = (uint32_t)(HEAP_FOREIGN_BYTES / bsize);
            cap = cap < HEAP_FOREIGN_MIN ? HEAP_FOREIGN_MIN : cap;
            cap = cap > HEAP_FOREIGN_MAX ? HEAP_FOREIGN_MAX : cap;
        }
        list_page_init(f, HEAP_PAGE_FOREIGN, c, cap);
    }
}

static void recent_init(heap_tcache *h)
{
    for (unsigned c = 1; c < HEAP_BITMAP_CLS; c++) {
        uint32_t cap = (uint32_t)(HEAP_RECENT_BYTES / mote__sizeclass_size[c]);
        cap = cap < HEAP_RECENT_MIN ? HEAP_RECENT_MIN : cap;
        cap = cap > HEAP_RECENT_MAX ? HEAP_RECENT_MAX : cap;
        list_page_init(&h->recent[c], HEAP_PAGE_RECENT, c, cap);
    }
}

/* A stash's least room, in blocks of bsize (0: the class has none). */
static inline uint32_t stash_least(uint32_t bsize)
{
    return (uint32_t)(HEAP_STASH_BYTES / bsize);
}

static void stash_init(heap_tcache *h)
{
    for (unsigned c = HEAP_BITMAP_CLS; c < HEAP_NCLS; c++) {
        list_page_init(&h->stash[c - HEAP_BITMAP_CLS], HEAP_PAGE_STASH, c,
                       stash_least(mote__sizeclass_size[c]));
        h->cur[c] = stash_cur(h, c);
    }
}

uint32_t mote__tcache_listed_count(const heap_tcache *h, unsigned cls)
{
    if (cls == 0 || cls >= HEAP_NCLS)
        return 0;
    const heap_page *l =
        cls < HEAP_BITMAP_CLS ? &h->foreign[cls] : &h->stash[cls - HEAP_BITMAP_CLS];
    uint32_t room = page_used(l), cap = LOAD(&l->reserved, RELAXED);
    uint32_t n = room <= cap ? cap - room : 0;
    /* (in_full: the owner's, written atomically for this reader) */
    if (cls < HEAP_BITMAP_CLS && !LOAD(&h->recent[cls].in_full, RELAXED)) {
        const heap_page *r = &h->recent[cls];
        room = page_used(r);
        n += room <= r->reserved ? r->reserved - room : 0;
    }
    return n;
}

/* Block b (cookie set) of our small page pg is free: on pg's list. */
static void page_take_back(heap_tcache *h, heap_page *pg, heap_block *b)
{
    mote__assert(page_owner_raw(pg) == h && pg->kind == HEAP_PAGE_SMALL);
    b->next = pg->free;
    pg->free = b;
    if (page_used_add(pg, -1) == 0 || pg->in_full)
        mote__tcache_page_freed(h, pg);
}

/* The blocks of recent list r past its first `keep` go to their pages. */
static void recent_cut(heap_tcache *h, heap_page *r, uint32_t keep)
{
    mote__assert(r->kind == HEAP_PAGE_RECENT);
    heap_block *b = r->free, **link = &r->free;
    for (uint32_t i = 0; i < keep && b; i++) {
        link = &b->next;
        b = b->next;
    }
    *link = NULL; /* detached first: page_freed may look at cur */
    uint32_t n = 0;
    while (b) {
        heap_block *next = b->next;
        page_take_back(h, block_page(b), b);
        b = next;
        n++;
    }
    page_used_add(r, (int32_t)n);
}

void mote__tcache_recent_full(heap_tcache *h, heap_page *pg, heap_block *b)
{
    unsigned c = pg->cls;
    heap_page *r = &h->recent[c];
    if (!r->in_full) {
        if (!r->dirty || r->allocs != h->slow_ticks) { /* the older half goes */
            recent_cut(h, r, r->reserved / 2);
            r->dirty = 1;
            r->allocs = h->slow_ticks;
            list_page_push(r, b);
            h->cur[c] = r;
            return;
        }
        recent_cut(h, r, 0); /* full again, only frees since: the class drains */
        page_used_set(r, 0);
        STORE(&r->in_full, 1, RELAXED);
    }
    bool stays = page_used(pg) > 1 && !pg->in_full; /* then no queue move */
    page_take_back(h, pg, b);
    if (stays)
        h->cur[c] = pg; /* LIFO: as the list would */
    else if (h->cur[c] == r)
        queue_sync_cur(h, c);
}

/* A malloc slow path of class c: a draining class gets its room back. */
static inline void recent_refill(heap_tcache *h, unsigned c)
{
    heap_page *r = &h->recent[c];
    if (HEAP_UNLIKELY(r->in_full)) {
        mote__assert(!r->free && page_used(r) == 0);
        STORE(&r->in_full, 0, RELAXED);
        r->dirty = 0;
        page_used_set(r, r->reserved);
    }
}

/* Recent list c back to its pages. */
static void recent_return(heap_tcache *h, unsigned c)
{
    heap_page *r = &h->recent[c];
    recent_cut(h, r, 0);
    if (h->cur[c] == r)
        queue_sync_cur(h, c);
}

/* Every recent list back to its pages. */
static void recent_return_all(heap_tcache *h)
{
    for (unsigned c = 1; c < HEAP_BITMAP_CLS; c++) {
        if (h->recent[c].free)
            recent_return(h, c);
        recent_refill(h, c);
    }
}

/* Stashed blocks from b on (a detached list) back in their bitmaps;
 * pages left empty go on to_free. */
static void stash_give_back(heap_tcache *h, heap_block *b, list *to_free)
{
    while (b) {
        heap_block *next = b->next;
        bm_return(h, block_page(b), b, to_free); /* its cookie stays */
        b = next;
    }
}

/* Puts stash s's blocks back in their bitmaps; pages left empty go on
 * to_free. */
static void stash_return(heap_tcache *h, heap_page *s, list *to_free)
{
    heap_block *b = s->free;
    s->free = NULL;
    /* back to its least room: stash_resize grows it again only once the
     * program holds enough of the class */
    STORE(&s->reserved, stash_least(s->bsize), RELAXED);
    page_used_set(s, s->reserved);
    stash_give_back(h, b, to_free);
}

/* Stash s is full and a block of its class is being freed: sets its room
 * to the class's blocks out of the stash (the program's, or on their way
 * home), within [HEAP_STASH_BYTES, HEAP_STASH_MAX].  A stash then holds no
 * more than the program does, and after a mass free its least room.  When
 * the room shrinks below what it holds, the older blocks past half the new
 * room go back to their bitmaps, so the next frees stash again.  Whether
 * the freed block may join the stash. */
static bool stash_resize(heap_tcache *h, heap_page *s, list *to_free)
{
    unsigned i = s->cls - HEAP_BITMAP_CLS;
    uint32_t held = s->reserved, live = h->bm_out[i] - held;
    uint32_t lo = stash_least(s->bsize), hi = (uint32_t)(HEAP_STASH_MAX / s->bsize);
    uint32_t want = live < lo ? lo : live > hi ? hi : live;
    mote__assert(page_used(s) == 0 && h->bm_out[i] >= held);
    /* under a memory limit, what one thread keeps no other can have (the
     * run caches keep nothing then) */
    if (want > lo && mote__arena_limited())
        want = lo;
    if (want == held)
        return false;
    if (want > held) {
        STORE(&s->reserved, want, RELAXED); /* (metrics read it) */
        page_used_set(s, want - held);
        return true;
    }
    uint32_t keep = want / 2, n = 0;
    heap_block *b = s->free, **link = &s->free;
    for (; n < keep; n++) {
        link = &b->next;
        b = b->next;
    }
    *link = NULL;
    STORE(&s->reserved, want, RELAXED);
    page_used_set(s, want - keep);
    stash_give_back(h, b, to_free);
    return true;
}

static void stash_return_all(heap_tcache *h)
{
    list to_free = {0};
    for (unsigned i = 0; i < HEAP_STASH_NCLS; i++)
        stash_return(h, &h->stash[i], &to_free);
    pages_to_arena(&to_free);
}

/* Sends f's blocks home. */
static void foreign_send(heap_tcache *h, heap_page *f)
{
    mote__assert(f->kind == HEAP_PAGE_FOREIGN);
    heap_block *b = f->free;
    f->free = NULL;
    page_used_set(f, f->reserved);
    if (h->cur[f->cls] == f)
        queue_sync_cur(h, f->cls);
    list to_free = {0};
    while (b) { /* detached first: msg_alloc may take from these lists */
        heap_block *next = b->next;
        heap_page *pg = block_page(b);
        heap_tcache *own = page_owner(pg);
        if (own == h) /* its page came to us since (tcache_reclaim) */
            page_take_block(h, pg, b, &to_free);
        else
            rbuf_put(h, own, b); /* its cookie is still set */
        b = next;
    }
    pages_to_arena(&to_free);
}

static void foreign_send_all(heap_tcache *h)
{
    for (unsigned c = 1; c < HEAP_BITMAP_CLS; c++)
        if (h->foreign[c].free)
            foreign_send(h, &h->foreign[c]);
}

/* See HEAP_LIST_STALE_MS: foreign and recent lists, and bitmap stashes.  A
 * list pushed and popped back to the same head between two looks reads as
 * stale: it goes home a little early. */
static void tcache_drain(heap_tcache *h);

static void lists_sweep(heap_tcache *h)
{
    uint32_t now = mote__os_coarse_ms();
    if (now - h->sweep_ms < HEAP_LIST_STALE_MS)
        return;
    h->sweep_ms = now;
    /* Other threads' frees of our samples: here, not at every slow malloc,
     * where the shadow's inbox was a miss each time with the profiler on
     * (the shadow's own slow path drains it too). */
    if (h->shadow && LOAD(&h->shadow->inbox, RELAXED))
        tcache_drain(h->shadow);
    for (unsigned c = 1; c < HEAP_BITMAP_CLS; c++) {
        heap_page *f = &h->foreign[c], *r = &h->recent[c];
        if (f->free && f->free == h->seen_foreign[c])
            foreign_send(h, f);
        h->seen_foreign[c] = f->free;
        if (r->free && r->free == h->seen_recent[c])
            recent_return(h, c);
        h->seen_recent[c] = r->free;
    }
    list to_free = {0};
    for (unsigned i = 0; i < HEAP_STASH_NCLS; i++) {
        heap_page *st = &h->stash[i];
        if (st->free && st->free == h->seen_stash[i])
            stash_return(h, st, &to_free);
        h->seen_stash[i] = st->free;
    }
    pages_to_arena(&to_free);
}

static inline void lists_tick(heap_tcache *h)
{
    if (HEAP_UNLIKELY(++h->sweep_ticks % HEAP_LIST_SWEEP_TICKS == 0))
        lists_sweep(h);
}

static heap_tcache *tcache_acquire(void);

void mote__tcache_free_remote(heap_page *pg, heap_block *b)
{
    heap_tcache *h = mote__heap_tls;
    heap_tcache *to = page_owner(pg);
    /* Not a shadow's page (those are prof): its owner is some thread's main
     * cache, whose fields this test must not read (its owner writes them).
     * The free fast path put the block in h's foreign list if it had room. */
    if (HEAP_LIKELY(pg->kind == HEAP_PAGE_SMALL && !pg->prof &&
                    h != &mote__heap_tcache_empty && to != h)) {
        rbuf_put(h, to, b);
        lists_tick(h);
        return;
    }
    if (HEAP_UNLIKELY(h == &mote__heap_tcache_empty)) {
        if (tcache_exited || tcache_lone_frees < TCACHE_LONE_FREES) {
            tcache_lone_frees++; /* the block goes home alone */
            inbox_push_block(to, b);
            return;
        }
        /* A thread that keeps freeing before it ever allocates gets a
         * cache, to batch its frees like any other thread's. */
        h = tcache_acquire();
        if (!h) {
            inbox_push_block(to, b);
            return;
        }
    }
    if (to == h || to->shadow_of == h) {
        /* we adopted the block's own cache, or it is our profiler shadow */
        list to_free = {0};
        page_take_block(to, pg, b, &to_free);
        pages_to_arena(&to_free);
        return;
    }
    rbuf_put(h, to, b);
    lists_tick(h);
}

/* Takes the inbox in (owner, or pool lock for a dead cache).  Messages are
 * read as arrays; the blocks they name are only written.  Messages then
 * go home: to h's own pages, or as a single block to their owner. */
static void tcache_drain(heap_tcache *h)
{
    uintptr_t e = XCHG(&h->inbox, 0, ACQUIRE);
    if (!e)
        return;
    list to_free = {0};
    heap_block *home = NULL;
    while (e) {
        if (e & INBOX_MSG) {
            heap_msg *m = (heap_msg *)(e & ~(uintptr_t)INBOX_MSG);
            e = m->link;
            uint32_t n = m->n;
            mote__assert(n >= 1 && n <= HEAP_RBUF_MAX);
            /* The blocks' lines are on the freeing CPU: asked for all at
             * once, their transfers overlap (written one by one, each
             * waited in the store buffer behind the last). */
            for (uint32_t i = 0; i < n; i++)
                arch_prefetch_write(m->blk[i]);
            for (uint32_t i = 0; i < n; i++)
                inbox_block(h, m->blk[i], &to_free);
            heap_block *mb = (heap_block *)m;
            mb->next = home;
            home = mb;
        } else {
            heap_block *b = (heap_block *)e;
            e = (uintptr_t)b->next;
            inbox_block(h, b, &to_free);
        }
    }
    while (home) {
        heap_block *mb = home;
        home = mb->next;
        msg_block_free(h, mb, &to_free);
    }
    pages_to_arena(&to_free);
    mote__assert_expensive(tcache_valid(h));
}

/* ---- acquiring and dropping a cache ---- */

static void tcache_thread_exit(void *arg);

void mote__tcache_init_once(void)
{
    tcache_key_ok = pthread_key_create(&tcache_key, tcache_thread_exit) == 0;
}

/* Pool lock held.  A new cache from the bump allocator (caches are never
 * freed); NULL when out of memory.  Secondary caches (shadow) are not on
 * the list of all caches: they are reached through their main cache. */
static heap_tcache *tcache_new(bool listed)
{
    if (meta_end - meta_cur < (ptrdiff_t)sizeof(heap_tcache)) {
        size_t chunk = 256 * 1024;
        meta_cur = mote__os_map_aligned(chunk, HEAP_OS_PAGE, false);
        if (!meta_cur) {
            meta_end = NULL;
            return NULL;
        }
        meta_end = meta_cur + chunk;
    }
    heap_tcache *h = (heap_tcache *)meta_cur;
    meta_cur += (sizeof(heap_tcache) + 63) & ~(size_t)63;
    for (unsigned c = 0; c < HEAP_NCLS; c++)
        h->cur[c] = &mote__heap_page_empty;
    foreign_init(h);
    recent_init(h);
    stash_init(h);
    h->sample_left = INT64_MAX;
    h->id = ncaches++;
    if (listed) {
        h->all_next = LOAD(&all_caches, RELAXED);
        STORE(&all_caches, h, RELEASE);
    }
    return h;
}

static heap_tcache *tcache_acquire(void)
{
    heap_lock_acquire(&pool_lock);
    heap_tcache *h = pool;
    if (h) {
        STORE(&pool, h->pool_next, RELAXED);
        h->pool_next = NULL;
        h->keeps_empty = 0;
    } else {
        h = tcache_new(true);
    }
    heap_lock_release(&pool_lock);
    if (!h)
        return NULL;
    STORE(&h->dead, 0, SEQ_CST);
    if (h->shadow)
        STORE(&h->shadow->dead, 0, SEQ_CST);
    h->stack_hi = 0;
    h->prof_busy = 0;
    mote__prof_cache_init(h);
    mote__heap_tls = h;
    /* Set after mote__heap_tls: pthread_setspecific may itself allocate. */
    if (tcache_key_ok)
        pthread_setspecific(tcache_key, h);
    return h;
}

heap_tcache *mote__tcache_shadow(heap_tcache *h)
{
    if (h->shadow)
        return h->shadow;
    heap_lock_acquire(&pool_lock);
    heap_tcache *s = tcache_new(false);
    heap_lock_release(&pool_lock);
    if (!s)
        return NULL;
    s->shadow_of = h;
    STORE(&h->shadow, s, RELEASE); /* (read by mote__tcache_frees_waiting) */
    return s;
}

/* Takes the inbox in and frees every empty page, except (keep) one per
 * one-slice class; returns whether one was kept.  Owner only.  An empty
 * bitmap page goes even when its class would keep it in a live thread:
 * it spans up to 8 slices, and kept by dead caches until some successor
 * needed its class, such pages pinned warm slices that the arena could
 * have handed to any page (bench/malloc/churn, 8 threads at a time, 400
 * thread lifetimes: peak RSS 39 MiB kept, 28 MiB gone back). */
static bool tcache_trim(heap_tcache *h, bool keep)
{
    list to_free = {0};
    bool kept = false;
    tcache_drain(h);
    for (unsigned c = 1; c < HEAP_NCLS; c++) {
        heap_page *pg = queue_first(&h->queue[c]);
        while (pg) {
            heap_page *next = queue_next(pg);
            if (page_used(pg) == 0) {
                if (keep && pg->kind == HEAP_PAGE_SMALL && page_stays_empty(h, pg)) {
                    kept = true;
                } else if (pg->kind == HEAP_PAGE_SMALL || bm_retire(pg)) {
                    queue_remove(h, pg);
                    list_push_back(&to_free, &pg->qlink);
                }
            }
            pg = next;
        }
    }
    pages_to_arena(&to_free);
    mote__assert_expensive(tcache_valid(h));
    return kept;
}

static void tcache_thread_exit(void *arg)
{
    heap_tcache *h = arg;
    if (!h || h != mote__heap_tls)
        return;
    recent_return_all(h);
    foreign_send_all(h);
    stash_return_all(h);
    rbuf_send_all(h);
    mote__runcache_flush(h);
    /* dead = 1 before the last look at the inbox: a free that pushes after
     * it sees dead and kicks the scavenger (both seq_cst). */
    STORE(&h->dead, 1, SEQ_CST);
    if (h->shadow)
        STORE(&h->shadow->dead, 1, SEQ_CST);
    bool kept = tcache_trim(h, true);
    if (h->shadow)
        kept |= tcache_trim(h->shadow, true);
    /* Decided before h goes to the pool: from then on another thread may
     * adopt it and give it a shadow (TSan saw that write race this read,
     * with a thaw thread that adopted a worker's cache). */
    bool kick = kept || LOAD(&h->inbox, SEQ_CST) ||
                (h->shadow && LOAD(&h->shadow->inbox, SEQ_CST));
    mote__heap_tls = &mote__heap_tcache_empty;
    tcache_exited = true;
    heap_lock_acquire(&pool_lock);
    h->died_ms = mote__os_coarse_ms();
    h->keeps_empty = kept;
    h->pool_next = pool;
    STORE(&pool, h, RELAXED);
    heap_lock_release(&pool_lock);
    if (kick)
        mote__scavenger_kick();
    mote__scavenger_thread_exit(mote__os_gettid() == getpid());
}

long mote__tcache_collect_dead(bool force, uint32_t decay_ms)
{
    long next;
    bool again;
    int passes = 0;
    heap_lock_acquire(&pool_lock);
    uint32_t now = mote__os_coarse_ms();
    /* Taking one cache's inbox in may send message blocks home to another
     * that was already looked at: when forced, go round until none moves
     * (messages go home once, as plain blocks: three rounds at most). */
    do {
        next = -1;
        again = false;
        for (heap_tcache *h = pool; h; h = h->pool_next) {
            uint32_t age = now - h->died_ms;
            bool due = force || age >= decay_ms;
            heap_tcache *sh = h->shadow;
            if (LOAD(&h->inbox, ACQUIRE) || (sh && LOAD(&sh->inbox, ACQUIRE)) ||
                (h->keeps_empty && due)) {
                bool kept = tcache_trim(h, !due);
                if (sh)
                    kept |= tcache_trim(sh, !due);
                h->keeps_empty = kept;
                again = force;
            }
            if (h->keeps_empty) {
                long wait = due ? 0 : (long)(decay_ms - age);
                if (next < 0 || wait < next)
                    next = wait;
            }
        }
    } while (again && ++passes < 3);
    heap_lock_release(&pool_lock);
    return next;
}

void mote__tcache_release_own(void)
{
    heap_tcache *h = mote__heap_tls;
    if (h == &mote__heap_tcache_empty)
        return;
    recent_return_all(h);
    foreign_send_all(h);
    stash_return_all(h);
    rbuf_send_all(h);
    mote__runcache_flush(h);
    tcache_trim(h, false);
    if (h->shadow)
        tcache_trim(h->shadow, false);
}

/* A thread about to idle: see mote__heap_thread_idle (heap.h).  The lists
 * of other caches' blocks go home too: an idle thread's mallocs will not
 * take them. */
void mote__tcache_idle(void)
{
    heap_tcache *h = mote__heap_tls;
    if (h == &mote__heap_tcache_empty)
        return;
    stash_return_all(h); /* (a sleeper's stash would wait for its next wake-up) */
    foreign_send_all(h);
    if (h->rbuf_n)
        rbuf_send_all(h);
    if (LOAD(&h->inbox, RELAXED))
        tcache_drain(h);
    if (h->shadow && LOAD(&h->shadow->inbox, RELAXED))
        tcache_drain(h->shadow);
}

bool mote__tcache_frees_waiting(const heap_tcache *h)
{
    const heap_tcache *s = LOAD(&h->shadow, ACQUIRE);
    return LOAD(&h->inbox, RELAXED) || (s && LOAD(&s->inbox, RELAXED));
}

/* ---- pages of dead caches ---- */

#define TCACHE_RECLAIM_CACHES 8  /* dead caches looked at, from the newest */
#define TCACHE_RECLAIM_PAGES  16 /* pages looked at in each */

/* Whether pg, a dead cache's page, may go to another cache: it holds live
 * blocks, which nothing but their frees can give back, and a free one (or
 * room to carve).  A bitmap page's word is stable only under the arena
 * lock (the scavenger claims blocks under it, and holds PURGING while it
 * releases them). */
static bool reclaimable(const heap_page *pg)
{
    if (page_used(pg) == 0)
        return false;
    if (pg->kind == HEAP_PAGE_SMALL)
        return pg->free || page_capacity(pg) < pg->reserved;
    uint64_t b = LOAD(&pg->bits, RELAXED);
    return (b & bm_all(pg)) && !(b & (HEAP_BM_PURGING | HEAP_BM_RETIRED));
}

/* For h, about to take a new page of class cls from the arena: a page of
 * that class with a free block or room to carve, taken from a dead cache,
 * or NULL.  A thread that ends after starting its successor (a worker
 * replaced while its work goes on) leaves its cache in the pool with its
 * pages partly used; the successor frees the blocks it inherited into them,
 * and until a new thread adopts the cache that memory serves nobody while
 * the live threads' classes grow on fresh pages (bench/malloc/replace's
 * pattern, 2 workers: 41.9 MB peak where tcmalloc, whose exiting threads
 * give their blocks to shared lists, held 36.4; 34.2 since).  The page
 * changes owner under the pool lock (and a bitmap page under the arena lock
 * too: the scavenger's claims go by its owner's asym), after the dead
 * cache's inbox was taken in; a block still on its way to the old owner is
 * passed on (inbox_block).  Only pages that hold live blocks: an empty page
 * waits for the cache's next thread, which would otherwise carve a fresh
 * one for the class (a thread per request, whose caches are empty but for
 * the leftovers, read 5% more peak RSS when any page moved), or goes back
 * after the decay period. */
static HEAP_NOINLINE heap_page *tcache_reclaim(heap_tcache *h, unsigned cls)
{
    mote__assert(!h->shadow_of);
    if (h->rbuf_n) /* our frees into dead caches' pages reach them first */
        rbuf_send_all(h);
    heap_page *got = NULL;
    heap_lock_acquire(&pool_lock);
    heap_tcache *d = pool;
    for (unsigned i = 0; d && i < TCACHE_RECLAIM_CACHES; d = d->pool_next, i++) {
        if (LOAD(&d->inbox, RELAXED))
            tcache_drain(d);
        heap_page *pg = queue_first(&d->queue[cls]);
        for (unsigned n = 0; pg && n < TCACHE_RECLAIM_PAGES; pg = queue_next(pg), n++)
            if (reclaimable(pg)) {
                got = pg;
                break;
            }
        if (got)
            break;
    }
    if (got && got->kind == HEAP_PAGE_SMALL) {
        queue_remove(d, got);
        STORE(&got->owner, h, RELAXED);
        queue_push_front(h, got);
    } else if (got) {
        heap_lock_acquire(&mote__heap_arena_lock);
        if (reclaimable(got)) {
            unsigned i = cls - HEAP_BITMAP_CLS;
            uint32_t u = page_used(got);
            mote__assert(d->bm_out[i] >= u);
            queue_remove(d, got);
            d->bm_out[i] -= u;
            h->bm_out[i] += u;
            STORE(&got->owner, (heap_tcache *)((uintptr_t)h | 1), RELAXED);
            queue_push_front(h, got);
        } else {
            got = NULL;
        }
        heap_lock_release(&mote__heap_arena_lock);
    }
    heap_lock_release(&pool_lock);
    return got;
}

/* tcache_reclaim where there may be something to take, without a call
 * where there is not (no dead cache, or a shadow). */
static inline heap_page *tcache_reclaim_if_any(heap_tcache *h, unsigned cls)
{
    return !h->shadow_of && LOAD(&pool, RELAXED) ? tcache_reclaim(h, cls) : NULL;
}

/* ---- bitmap classes ---- */

void mote__tcache_free_bitmap(heap_page *pg, void *p)
{
    heap_tcache *h = mote__heap_tls, *owner = page_owner(pg);
    heap_block *b = p;
    uintptr_t ck = (uintptr_t)p ^ mote__heap_key;
    if (owner == h || owner->shadow_of == h) {
        /* free already: in its bitmap, or in the stash (the cookie) */
        if ((LOAD(&pg->bits, RELAXED) & (1ULL << block_index(pg, p))) || b->cookie == ck)
            mote__heap_invalid_free(p, "free");
        b->cookie = ck; /* so a later free on another thread is caught there */
        heap_page *s = &h->stash[pg->cls - HEAP_BITMAP_CLS];
        list to_free = {0};
        if (owner == h && (page_used(s) != 0 || stash_resize(h, s, &to_free))) {
            list_page_push(s, b);
            pages_to_arena(&to_free);
            return;
        }
        bm_return(owner, pg, p, &to_free);
        pages_to_arena(&to_free);
        return;
    }
    /* Another thread's block: the cookie alone says whether it is free
     * (a free block keeps it until malloc claims it again).  Reading the
     * page's bitmap here would pull the owner's busiest line to this CPU
     * on every free, and the owner's next claim would wait for it back
     * (producer/consumer: 15% of the run in that claim).  A cookie the
     * scavenger took with its page is the one gap: that second free is
     * caught when the block reaches its owner, whose bitmap says it is
     * free already. */
    if (b->cookie == ck)
        mote__heap_invalid_free(p, "free");
    b->cookie = ck;
    mote__tcache_free_remote(pg, b);
}

/* Takes the lowest free block of pg out of its bitmap; NULL if none is
 * free (the scavenger may hold some).  Touches no block: see bm_handout.
 * Owner only, as bm_return and bm_retire: with the scavenger out of the
 * owning cache (asym.h) the owner is the word's only writer, so a plain
 * load and store do; a locked instruction would wait for the owner's
 * earlier stores (producer/consumer: this CAS was 72% of the malloc slow
 * path).  With it in, the atomic RMW its claims expect. */
static inline heap_block *bm_take(heap_page *pg)
{
    heap_asym *a = page_asym(pg);
    uint64_t bit;
    if (heap_asym_enter(a)) {
        uint64_t b = LOAD(&pg->bits, RELAXED), f = b & bm_all(pg);
        bit = f & (~f + 1);
        mote__debug_widen();
        if (bit)
            STORE(&pg->bits, b & ~bit, RELAXED);
        heap_asym_leave(a);
        if (!bit)
            return NULL;
    } else {
        uint64_t b = LOAD(&pg->bits, RELAXED);
        for (;;) {
            uint64_t f = b & bm_all(pg);
            if (!f)
                return NULL;
            bit = f & (~f + 1);
            if (CAS_WEAK(&pg->bits, &b, b & ~bit, ACQUIRE))
                break;
        }
    }
    page_used_add(pg, 1);
    COUNT(&pg->allocs, 1);
    return (heap_block *)(pg->start + (size_t)__builtin_ctzll(bit) * pg->bsize);
}

/* A block just taken goes out.  The slice may have held a small page whose
 * free block here kept its cookie: a block the program never writes would
 * then look freed twice on its first remote free. */
static inline void *bm_handout(heap_block *blk)
{
    blk->cookie = 0;
    return blk;
}

static inline void *bm_claim(heap_page *pg)
{
    heap_block *blk = bm_take(pg);
    return blk ? bm_handout(blk) : NULL;
}

static void *tcache_alloc_bitmap(heap_tcache *h, unsigned cls)
{
    heap_queue *q = &h->queue[cls];
    heap_page *pg = queue_first(q);
    while (pg) {
        heap_page *next = queue_next(pg);
        void *p = bm_claim(pg);
        if (p) {
            h->bm_out[cls - HEAP_BITMAP_CLS]++;
            if (pg != queue_first(q)) {
                list_remove(q, &pg->qlink);
                list_push_front(q, &pg->qlink);
            }
            return p;
        }
        /* Full: out of the queue until a block comes back.  Never while
         * the scavenger holds blocks (they come back without the owner
         * hearing of it): such a page is only skipped. */
        if (LOAD(&pg->bits, RELAXED) == 0) {
            queue_remove(h, pg);
            pg->in_full = 1;
        }
        pg = next;
    }
    if ((pg = tcache_reclaim_if_any(h, cls))) {
        void *p = bm_claim(pg); /* NULL if the scavenger took its free blocks */
        if (p) {
            h->bm_out[cls - HEAP_BITMAP_CLS]++;
            return p;
        }
    }
    bool zero;
    heap_block *blk = NULL;
    heap_lock_acquire(&mote__heap_arena_lock);
    pg = mote__arena_page_alloc(mote__sizeclass_slices[cls], &zero, h->shadow_of != NULL);
    if (pg) {
        mote__page_init_bitmap(pg, h, cls, zero);
        /* Taken before the lock goes: the scavenger claims under it, and a
         * page on reused slices may be due at once (a short decay), when it
         * would take every free block first and leave us none. */
        blk = bm_take(pg);
        mote__assert(blk);
    }
    heap_lock_release(&mote__heap_arena_lock);
    if (!pg) {
        errno = ENOMEM;
        return NULL;
    }
    queue_push_front(h, pg);
    h->bm_out[cls - HEAP_BITMAP_CLS]++;
    return bm_handout(blk);
}

/* ---- slow paths ---- */

/* A page of class cls with a free block.  In order of preference: one
 * with a few free blocks (a single one would send the next malloc back
 * here), then one that can carve more, then one with any free block, then
 * a new page.  Free blocks already in the queue are used before the class
 * grows (larson carved 2-3x its live bytes when the first page was always
 * carved first).  Pages with neither leave the queue (full). */
static heap_page *tcache_find_page(heap_tcache *h, unsigned cls)
{
    heap_queue *q = &h->queue[cls];
    heap_page *pg = queue_first(q), *carve = NULL, *some = NULL;
    while (pg) {
        heap_page *next = queue_next(pg);
        if (pg->free) {
            if (page_capacity(pg) - page_used(pg) >= 4) /* free, or on their way */
                break;
            if (!some)
                some = pg;
        } else if (page_capacity(pg) < pg->reserved) {
            if (!carve)
                carve = pg;
        } else {
            queue_remove(h, pg); /* full: back when one of its blocks is */
            pg->in_full = 1;
        }
        pg = next;
    }
    if (!pg && carve) {
        pg = carve;
        mote__page_extend(pg);
    }
    if (!pg)
        pg = some;
    if (pg) {
        if (pg != queue_first(q)) {
            list_remove(q, &pg->qlink);
            list_push_front(q, &pg->qlink);
        }
        h->cur[cls] = pg;
        return pg;
    }
    if ((pg = tcache_reclaim_if_any(h, cls))) {
        if (!pg->free)
            mote__page_extend(pg);
        h->cur[cls] = pg;
        return pg;
    }
    bool zero;
    heap_lock_acquire(&mote__heap_arena_lock);
    pg = mote__arena_page_alloc(mote__sizeclass_slices[cls], &zero, h->shadow_of != NULL);
    if (pg)
        mote__page_init_small(pg, h, cls);
    heap_lock_release(&mote__heap_arena_lock);
    if (!pg)
        return NULL;
    mote__page_extend(pg);
    queue_push_front(h, pg);
    return pg;
}

void *mote__tcache_alloc_in(heap_tcache *h, unsigned cls)
{
    if (h->rbuf_n && ++h->rbuf_ticks % HEAP_RBUF_FLUSH == 0)
        rbuf_send_all(h);
    lists_tick(h);
    if (LOAD(&h->inbox, RELAXED))
        tcache_drain(h);
    if (cls >= HEAP_BITMAP_CLS)
        return tcache_alloc_bitmap(h, cls);
    h->slow_ticks++;
    recent_refill(h, cls);
    heap_page *pg = h->cur[cls];
    if (!pg->free && h->recent[cls].free) {
        pg = &h->recent[cls];
        h->cur[cls] = pg;
    } else if (!pg->free && h->foreign[cls].free) {
        pg = &h->foreign[cls];
        h->cur[cls] = pg;
    } else if (!pg->free) {
        pg = tcache_find_page(h, cls);
        if (!pg) {
            errno = ENOMEM;
            return NULL;
        }
    }
    heap_block *b = pg->free;
    pg->free = b->next;
    page_used_add(pg, 1);
    b->cookie = 0;
    return b;
}

/* The shadow's blocks come back only through page_take_block, onto their
 * pages, so its current page of a one-slice-page class is all a sample
 * needs to look at; its lists (inbox, rbuf, sweeps) wait for the general
 * path, which runs when that page is out of blocks.  A sample finds cold
 * every line alloc_in's bookkeeping reads: 2.7 misses a sample more than
 * this (cachegrind, mallocbench 1 thread, default rate). */
void *mote__tcache_alloc_shadow(heap_tcache *s, unsigned cls)
{
    mote__assert(s->shadow_of);
    return cache_take(s, cls);
}

void mote__tcache_free_shadow(heap_tcache *s, heap_page *pg, heap_block *b)
{
    mote__assert(s->shadow_of == mote__heap_tls && page_owner(pg) == s);
    list to_free = {0};
    page_take_block(s, pg, b, &to_free);
    pages_to_arena(&to_free);
}

heap_tcache *mote__tcache_take(bool *exited)
{
    heap_ensure_init();
    *exited = tcache_exited;
    return tcache_acquire();
}

void mote__tcache_give_back(heap_tcache *h) { tcache_thread_exit(h); }

void *mote__tcache_alloc_slow(heap_tcache *h, unsigned cls, size_t n, bool tail)
{
    bool exited = false;
    if (h == &mote__heap_tcache_empty) {
        /* A thread's first allocation, or one after its exit (a key
         * destructor's, say): then a cache for this one block, given back
         * at once, but sampled as any other. */
        h = mote__tcache_take(&exited);
        if (!h) {
            errno = ENOMEM;
            return NULL;
        }
    }
    if (HEAP_UNLIKELY(cls == 0)) /* the class table was not filled yet */
        cls = sizeclass_of(n);
    /* The fast path counted n only when it had a block, and then only came
     * here because the count fell below 0. */
    if (h->sample_left >= 0)
        h->sample_left -= (int64_t)n;
    void *p = NULL;
    if (HEAP_UNLIKELY(h->sample_left < 0)) {
        /* the public entry point's frame: ours when it tail-called us */
        void **fp = __builtin_frame_address(0);
        p = mote__prof_alloc_small(h, cls, n, tail ? (void *)fp : fp[0]);
    }
    if (!p)
        p = mote__tcache_alloc_in(h, cls);
    if (HEAP_UNLIKELY(exited))
        tcache_thread_exit(h);
    return p;
}

/* The owner freed a block of pg and pg is now empty or was parked full. */
void mote__tcache_page_freed(heap_tcache *h, heap_page *pg)
{
    if (pg->in_full) {
        pg->in_full = 0;
        queue_return(h, pg);
    }
    if (page_used(pg) != 0 || page_stays_empty(h, pg))
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

void mote__tcache_fork_child(void)
{
    STORE(&pool_lock.v, 0, RELEASE);
    /* A thread inside its cache's asymmetric lock at the fork left it held
     * in the child for good: every claim of its pages lost, and
     * mote_mem_release, which scavenges until nothing is due, looped on
     * them (test_heap_fork, 1 run in 2 of a MOTE_DEBUG=2 build). */
    for (heap_tcache *h = all_caches; h; h = h->all_next) {
        heap_asym_fork_child(&h->asym);
        if (h->shadow)
            heap_asym_fork_child(&h->shadow->asym);
    }
}
