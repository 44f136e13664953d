/*
 * page.c - one small page: its blocks, carved lazily, and its remote-free
 * stack.  The owner allocates from page->free and frees into it without
 * atomics; other threads push freed blocks on page->tfree with one CAS.
 * The low bits of tfree say where the page is (HEAP_TF_*):
 *   NORMAL   in its owner's class queue; remote frees just push;
 *   FULL     the page left the queue once (no free block); the first
 *            remote free turns it NOTIFIED and pushes the page on
 *            owner->remote, so the owner (or the scavenger, for a dead
 *            owner) takes it back.  When the owner itself frees into it,
 *            the page goes back into the queue but stays FULL: no atomic
 *            op on that path, and a remote free then costs one extra push;
 *   NOTIFIED on owner->remote, or being pushed there: the page must not be
 *            freed until it has been taken off that list.
 */
#include "heap/internal.h"

/* tfree = block pointer | count of blocks on the stack << 48 | state: the
 * owner takes the whole stack with its length, without walking it. */
#define TF_COUNT_SHIFT 48
#define TF_PTR(t)      ((heap_block *)((t) & ((1UL << TF_COUNT_SHIFT) - 1) & ~HEAP_TF_STATE))
#define TF_COUNT(t)    ((uint32_t)((t) >> TF_COUNT_SHIFT))

/* Arena lock held (metrics read kind/cls/bsize under it); carve after. */
void mote__page_init_small(heap_page *pg, heap_tcache *owner, unsigned cls)
{
    uint32_t bsize = mote__sizeclass_size[cls];
    pg->kind = HEAP_PAGE_SMALL;
    pg->cls = (uint8_t)cls;
    pg->bsize = bsize;
    pg->div_magic = ((1ULL << 40) + bsize - 1) / bsize;
    pg->reserved = (uint32_t)(((size_t)pg->slices << HEAP_SLICE_SHIFT) / bsize);
    pg->first = pg->start;
    pg->owner = owner;
    STORE(&pg->tfree, 0, RELAXED);
}

/* Carves about HEAP_CARVE_BYTES more blocks onto the free list. */
void mote__page_extend(heap_page *pg)
{
    uint32_t n = (uint32_t)(HEAP_CARVE_BYTES / pg->bsize);
    if (n == 0)
        n = 1;
    if (n > pg->reserved - pg->capacity)
        n = pg->reserved - pg->capacity;
    if (n == 0)
        return;
    uint8_t *p = pg->start + (size_t)pg->capacity * pg->bsize;
    heap_block *head = (heap_block *)p;
    for (uint32_t i = 0; i + 1 < n; i++, p += pg->bsize)
        ((heap_block *)p)->next = (heap_block *)(p + pg->bsize);
    ((heap_block *)p)->next = pg->free;
    pg->free = head;
    pg->capacity += n;
}

/* Moves remote-freed blocks to the local free list (owner only). */
void mote__page_collect(heap_page *pg)
{
    uintptr_t t = LOAD(&pg->tfree, RELAXED);
    if (!TF_PTR(t))
        return;
    while (!CAS_WEAK(&pg->tfree, &t, t & HEAP_TF_STATE, ACQUIRE))
        ;
    heap_block *head = TF_PTR(t);
    if (pg->free) { /* rare: append (the usual caller has an empty list) */
        heap_block *tail = head;
        while (tail->next)
            tail = tail->next;
        tail->next = pg->free;
    }
    pg->free = head;
    page_used_add(pg, -(int32_t)TF_COUNT(t));
}

/* May the owner take pg (no free block) out of its queue?  NORMAL with no
 * remote block becomes FULL (one CAS; release: the remote free that
 * notifies, with acquire, then owns remote_next).  A page still FULL from
 * an earlier round, or NOTIFIED (it will come back through owner->remote),
 * may leave as it is.  False: remote blocks arrived, collect them. */
bool mote__page_try_mark_full(heap_page *pg)
{
    uintptr_t t = LOAD(&pg->tfree, RELAXED);
    if (t == HEAP_TF_FULL || (t & HEAP_TF_STATE) == HEAP_TF_NOTIFIED)
        return true;
    if (t != HEAP_TF_NORMAL)
        return false;
    return CAS(&pg->tfree, &t, HEAP_TF_FULL, RELEASE);
}

/* If the state is `from`, makes it NORMAL, keeping the pushed blocks. */
void mote__page_set_normal(heap_page *pg, uintptr_t from)
{
    uintptr_t t = LOAD(&pg->tfree, RELAXED);
    while ((t & HEAP_TF_STATE) == from &&
           !CAS_WEAK(&pg->tfree, &t, t & ~HEAP_TF_STATE, ACQUIRE))
        ;
}

/* A non-owner frees b (its cookie is already set). */
void mote__page_free_remote(heap_page *pg, heap_block *b)
{
    uintptr_t t = LOAD(&pg->tfree, RELAXED), nt;
    do {
        b->next = TF_PTR(t);
        uintptr_t st = t & HEAP_TF_STATE;
        nt = (uintptr_t)b | ((uintptr_t)(TF_COUNT(t) + 1) << TF_COUNT_SHIFT) |
             (st == HEAP_TF_FULL ? HEAP_TF_NOTIFIED : st);
    } while (!CAS_WEAK(&pg->tfree, &t, nt, ACQ_REL));
    if ((t & HEAP_TF_STATE) != HEAP_TF_FULL)
        return;
    /* We made it NOTIFIED: the page stays put until its owner pops it. */
    heap_tcache *h = pg->owner;
    heap_page *head = LOAD(&h->remote, RELAXED);
    do {
        pg->remote_next = head;
    } while (!CAS_WEAK(&h->remote, &head, pg, SEQ_CST));
    if (LOAD(&h->dead, SEQ_CST))
        mote__scavenger_kick();
}
