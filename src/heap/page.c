/*
 * page.c - one small page: its blocks, carved lazily onto the owner's free
 * list.  Only the owner touches a page (internal.h): blocks other threads
 * free come back through the owner cache's inbox (tcache.c).
 */
#include "heap/internal.h"
#include "os/os.h"

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
    STORE(&pg->owner, owner, RELAXED); /* (see page_owner_raw) */
    pg->prof = owner->shadow_of != NULL;
}

/* Carves about HEAP_CARVE_BYTES more blocks onto the free list, each with
 * the cookie of a free block (on the line `next` is written to anyway): a
 * free of one that malloc never handed out is then caught as a free of a
 * free block, not taken onto the list a second time. */
void mote__page_extend(heap_page *pg)
{
    uint32_t n = (uint32_t)(HEAP_CARVE_BYTES / pg->bsize), cap = page_capacity(pg);
    if (n == 0)
        n = 1;
    if (n > pg->reserved - cap)
        n = pg->reserved - cap;
    if (n == 0)
        return;
    uint8_t *p = pg->start + (size_t)cap * pg->bsize;
    heap_block *head = (heap_block *)p;
    for (uint32_t i = 0; i + 1 < n; i++, p += pg->bsize) {
        ((heap_block *)p)->next = (heap_block *)(p + pg->bsize);
        ((heap_block *)p)->cookie = (uintptr_t)p ^ mote__heap_key;
    }
    ((heap_block *)p)->next = pg->free;
    ((heap_block *)p)->cookie = (uintptr_t)p ^ mote__heap_key;
    pg->free = head;
    page_capacity_set(pg, cap + n);
}

/* ---- bitmap pages (classes above 4 KiB) ---- */

uint64_t mote__heap_bm_dirty;

/* Arena lock held.  Every block free; none carved (nothing to write). */
void mote__page_init_bitmap(heap_page *pg, heap_tcache *owner, unsigned cls, bool zero)
{
    uint32_t bsize = mote__sizeclass_size[cls];
    uint32_t n = (uint32_t)(((size_t)pg->slices << HEAP_SLICE_SHIFT) / bsize);
    if (n > HEAP_BM_MAXBLOCKS)
        n = HEAP_BM_MAXBLOCKS;
    pg->kind = HEAP_PAGE_BITMAP;
    pg->cls = (uint8_t)cls;
    pg->bsize = bsize;
    pg->div_magic = ((1ULL << 40) + bsize - 1) / bsize;
    pg->reserved = n;
    page_capacity_set(pg, n);
    STORE(&pg->owner, (heap_tcache *)((uintptr_t)owner | 1), RELAXED);
    pg->prof = owner->shadow_of != NULL;
    /* Fresh (zero) slices hold nothing resident; reused ones may: the
     * scavenger looks at them once the decay period has passed. */
    pg->purged = zero ? bm_all(pg) | HEAP_BM_TAIL : 0;
    STORE(&pg->bits, bm_all(pg), RELEASE);
    STORE(&pg->since_ms, mote__os_coarse_ms(), RELAXED);
    STORE(&pg->allocs, 0, RELAXED);
    pg->purge_allocs = 0;
    STORE(&pg->dirty, 0, RELAXED);
    if (!zero)
        mote__page_bm_note_free(pg);
}

void mote__page_bm_note_free(heap_page *pg)
{
    STORE(&pg->since_ms, mote__os_coarse_ms(), RELAXED);
    if (LOAD(&pg->dirty, RELAXED))
        return;
    STORE(&pg->dirty, 1, RELAXED);
    FETCH_ADD(&mote__heap_bm_dirty, 1, RELAXED);
    mote__scavenger_note_dirty();
}
