/*
 * pagebatch.c - batched page release (see pagebatch.h).  Nothing is
 * estimated: residency comes from the kernel, and `released` counts the
 * pages it said were resident.
 */
#include "pagebatch.h"

#include "atomic.h"
#include "os/os.h"

size_t mote__pagebatch_resident(pagebatch *b, uintptr_t lo, uintptr_t hi, uintptr_t *low)
{
    size_t count = 0;
    *low = hi;
    for (uintptr_t p = lo; p < hi;) {
        size_t pages = (hi - p) / OS_PAGE;
        if (pages > sizeof b->vec)
            pages = sizeof b->vec;
        if (mote__os_residency((void *)p, pages * OS_PAGE, b->vec) != 0)
            return count;
        for (size_t i = 0; i < pages; i++)
            if (b->vec[i] & 1) {
                if (*low == hi)
                    *low = p + i * OS_PAGE;
                count++;
            }
        p += pages * OS_PAGE;
    }
    return count;
}

void mote__pagebatch_flush(pagebatch *b)
{
    if (b->n) {
        mote__os_decommit_batch(b->ranges, b->n);
        b->n = 0;
    }
}

void mote__pagebatch_add(pagebatch *b, uintptr_t lo, uintptr_t hi, size_t pages)
{
    if (!pages)
        return;
    if (b->n == PAGEBATCH_RANGES)
        mote__pagebatch_flush(b);
    b->ranges[b->n].iov_base = (void *)lo;
    b->ranges[b->n].iov_len = hi - lo;
    b->n++;
    COUNT(&b->released, pages * OS_PAGE);
}

uintptr_t mote__pagebatch_range(pagebatch *b, uintptr_t lo, uintptr_t hi)
{
    uintptr_t low;
    size_t n = mote__pagebatch_resident(b, lo, hi, &low);
    mote__pagebatch_add(b, low, hi, n);
    return low;
}
