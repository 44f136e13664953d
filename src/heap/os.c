/*
 * os.c - everything the allocator asks of the kernel: aligned mappings,
 * decommit (MADV_DONTNEED), futexes, a coarse millisecond clock and error
 * output.  Nothing here allocates: it runs inside malloc.
 */
#include <errno.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "heap/internal.h"

void *mote__heap_os_map(size_t size, size_t align, bool noreserve)
{
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | (noreserve ? MAP_NORESERVE : 0);
    if (align <= HEAP_OS_PAGE) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, flags, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    size_t over = size + align - HEAP_OS_PAGE;
    if (over < size)
        return NULL;
    uint8_t *p = mmap(NULL, over, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    if (a > p)
        munmap(p, (size_t)(a - p));
    if (a + size < p + over)
        munmap(a + size, (size_t)(p + over - (a + size)));
    return a;
}

void mote__heap_os_unmap(void *p, size_t size)
{
    munmap(p, size);
}

void mote__heap_os_decommit(void *p, size_t size)
{
    /* MADV_DONTNEED, not MADV_FREE: RSS must fall now, visibly, and a later
     * touch gets a zero page either way. */
    madvise(p, size, MADV_DONTNEED);
}

uint32_t mote__heap_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint32_t)((uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u);
}

void mote__heap_write_err(const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = write(2, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

void mote__heap_invalid_free(const void *p, const char *what)
{
    char buf[128];
    snprintf(buf, sizeof buf, "mote: %s(): invalid pointer %p\n", what, p);
    mote__heap_write_err(buf);
    abort();
}

void mote__heap_futex_wake(_Atomic int *addr, int n)
{
    syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

void mote__heap_futex_wait(_Atomic int *addr, int val, long timeout_ms)
{
    struct timespec ts, *tp = NULL;
    if (timeout_ms >= 0) {
        ts.tv_sec = timeout_ms / 1000;
        ts.tv_nsec = (timeout_ms % 1000) * 1000000L;
        tp = &ts;
    }
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, tp, NULL, 0);
}

void mote__heap_lock_slow(heap_lock *l)
{
    for (int i = 0; i < 64; i++) {
        int c = 0;
        if (atomic_load_explicit(&l->v, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_weak_explicit(&l->v, &c, 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return;
        __builtin_ia32_pause();
    }
    while (atomic_exchange_explicit(&l->v, 2, memory_order_acquire) != 0)
        mote__heap_futex_wait(&l->v, 2, -1);
}
