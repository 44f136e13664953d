/*
 * sizeclass.c - the size classes.  Classes 1..8 are 16..128 in steps of 16;
 * above that there are four classes per power of two (160, 192, 224, 256,
 * 320, ...), up to 32 KiB (HEAP_SMALL_MAX; bigger blocks are large ones),
 * so a block wastes at most 20% of its size (and every size is a multiple
 * of 16, which keeps blocks 16-byte aligned).  sizeclass_of() (internal.h)
 * maps a request to its class without a table.  Each class has a page
 * length in slices: one 64 KiB slice up to 8 KiB blocks, else enough slices
 * for 8 blocks (4 above 16 KiB), of the three lengths from there the one
 * that wastes the least tail.  Classes above 4 KiB (HEAP_BITMAP_CLS up)
 * live in bitmap pages (within HEAP_BM_MAXBLOCKS blocks a page).  A thread
 * uses a big class a few blocks at a time, and each class has its own pages
 * per thread, so big classes have pages of few blocks: with 8 blocks of
 * 128 KiB (when classes went that far) a page of 16 slices that few blocks
 * ever used made long free runs scarce (bench/malloc/churn, 8 threads: 4
 * blocks, peak RSS 25.5 -> 20.6 MiB, faults 6.6k -> 5.4k).
 */
#include "heap/internal.h"

uint32_t mote__sizeclass_size[HEAP_NCLS];
uint8_t mote__sizeclass_slices[HEAP_NCLS];
/* Filled by mote__sizeclass_init; entry 0 (malloc(0)) and 1 are class 1.  Until
 * init every entry is 0: class 0's current page is always empty, so the
 * first malloc goes to the slow path, which initialises. */
uint8_t mote__sizeclass_table[HEAP_CLS_TABLE_MAX / 16 + 1];

void mote__sizeclass_init(void)
{
    for (unsigned c = 1; c <= 8; c++)
        mote__sizeclass_size[c] = 16 * c;
    unsigned c = 9;
    for (uint32_t base = 128; base < HEAP_SMALL_MAX; base *= 2)
        for (uint32_t j = 1; j <= 4; j++)
            mote__sizeclass_size[c++] = base + j * (base / 4);
    mote__assert(mote__sizeclass_size[HEAP_BITMAP_CLS - 1] == 4096);
    for (size_t i = 0; i <= HEAP_CLS_TABLE_MAX / 16; i++)
        mote__sizeclass_table[i] = (uint8_t)sizeclass_of_slow(i * 16);
    for (c = 1; c < HEAP_NCLS; c++) {
        uint32_t s = mote__sizeclass_size[c];
        if (s <= 8192) {
            mote__sizeclass_slices[c] = 1;
        } else {
            unsigned long blocks = s > 16384 ? 4 : 8;
            uint32_t n = (uint32_t)((blocks * s + HEAP_SLICE_SIZE - 1) / HEAP_SLICE_SIZE);
            /* pick the length in [n, n+2] that wastes the least tail */
            uint32_t best = n;
            for (uint32_t k = n; k <= n + 2; k++)
                if ((k * HEAP_SLICE_SIZE) % s * best < (best * HEAP_SLICE_SIZE) % s * k)
                    best = k;
            mote__sizeclass_slices[c] = (uint8_t)best;
        }
    }
}
