/*
 * vm.c - Linux virtual memory for mote (see os.h): reservations, aligned
 * mappings, guards, decommit and residency.  Nothing here allocates.  The
 * guard mode is probed once, on first use, and cached in an atomic: a kernel
 * either has MADV_GUARD_INSTALL or not for the whole run.
 */
#include "os/os.h"

#include "atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#ifndef MADV_GUARD_REMOVE
#define MADV_GUARD_REMOVE 103
#endif
#ifndef PR_SET_VMA
#define PR_SET_VMA           0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif
#ifndef MADV_HUGEPAGE
#define MADV_HUGEPAGE 14
#endif
#ifndef MADV_NOHUGEPAGE
#define MADV_NOHUGEPAGE 15
#endif

/* ThreadSanitizer learns of fresh ranges from mmap and munmap, not from
 * mremap: a range a move vacated keeps its last accesses in TSan's shadow,
 * and a mapping that then grows in place over it would be reported racing
 * with them.  The kernel orders the two (the range is free only once the
 * move is done); vm_vacated and vm_occupied say so to TSan.  Nothing in
 * other builds. */
#if defined(__SANITIZE_THREAD__)
#define VM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define VM_TSAN 1
#endif
#endif
#ifdef VM_TSAN
#include <sanitizer/tsan_interface.h>
static char vm_order;
static void vm_vacated(void) { __tsan_release(&vm_order); }
static void vm_occupied(void) { __tsan_acquire(&vm_order); }
#else
static void vm_vacated(void) {}
static void vm_occupied(void) {}
#endif

/* Maps len bytes of fresh reservation, at `at` (replacing what is there)
 * when at is not NULL; named when name is not NULL. */
static void *os_map(void *at, size_t len, const char *name)
{
    void *p =
        mmap(at, len, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (at ? MAP_FIXED : 0), -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    /* A huge page would make a 4 KiB stack cost 2 MiB. */
    (void)madvise(p, len, MADV_NOHUGEPAGE);
    /* A name shows in /proc/self/maps and keeps the kernel from merging
     * this mapping with unrelated anonymous memory; older kernels refuse
     * it harmlessly. */
    if (name)
        (void)prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)p, len,
                    (unsigned long)name);
    return p;
}

void *mote__os_reserve(size_t len, const char *name) { return os_map(NULL, len, name); }

void mote__os_no_hugepages(void *p, size_t len)
{
    (void)madvise(p, len, MADV_NOHUGEPAGE);
}

void mote__os_hugepages(void *p, size_t len) { (void)madvise(p, len, MADV_HUGEPAGE); }

void *mote__os_map_aligned(size_t size, size_t align, bool noreserve)
{
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | (noreserve ? MAP_NORESERVE : 0);
    if (align <= OS_PAGE) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, flags, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    /* Over-map by the alignment, then give back the ends. */
    size_t over = size + align - OS_PAGE;
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

void *mote__os_remap(void *p, size_t len, size_t new_len)
{
    void *r = mremap(p, len, new_len, 0);
    if (r == MAP_FAILED)
        return NULL;
    if (new_len > len)
        vm_occupied();
    return r;
}

/* [dst, dst + len) mapped afresh, replacing what is there (no hints: the
 * caller's mapping keeps its own). */
static bool vm_fresh_at(void *dst, size_t len)
{
    return mmap(dst, len, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == dst;
}

int mote__os_move(void *p, size_t len, void *dst, size_t new_len)
{
    vm_vacated(); /* before: once moved, p's range may be taken at once */
    /* Moved and grown in one call, dst's range is one VMA, which the
     * block's next growth can extend in place.  Moved into the start of
     * dst's mapping, it stayed a VMA of its own beside dst's fresh rest,
     * the two never merged, and every later growth failed in place
     * (EFAULT) and moved again: 22-24 moves to grow a block 3 MB to 800
     * MB in 1.6% steps, against glibc's 8. */
    if (mremap(p, len, new_len, MREMAP_MAYMOVE | MREMAP_FIXED, dst) != MAP_FAILED)
        return 0;
    /* Only one VMA can be resized.  Several side by side (Linux >= 6.17
     * moves those) are moved as they are into a fresh dst.  The kernel
     * may have unmapped dst before it failed: dst is mapped afresh for
     * either outcome. */
    if (!vm_fresh_at(dst, new_len))
        return -1;
    if (new_len > len &&
        mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, dst) != MAP_FAILED)
        return 0;
    return vm_fresh_at(dst, new_len) ? 1 : -1;
}

int mote__os_residency(const void *p, size_t len, unsigned char *vec)
{
    return mincore((void *)p, len, vec) == 0 ? 0 : -errno;
}

int mote__os_renew(void *p, size_t len, const char *name)
{
    return os_map(p, len, name) ? 0 : -errno;
}

void mote__os_release(void *p, size_t len)
{
    if (p)
        munmap(p, len);
}

static int os_guard_probe; /* atomic: 0 unknown, 1 works, 2 does not */

bool mote__os_guard_madvise_works(void)
{
    int m = LOAD(&os_guard_probe, RELAXED);
    if (m)
        return m == 1;
    /* Probe on a scratch page so the answer does not depend on a caller. */
    m = 2;
    void *p =
        mmap(NULL, OS_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
        if (madvise(p, OS_PAGE, MADV_GUARD_INSTALL) == 0)
            m = 1;
        munmap(p, OS_PAGE);
    }
    STORE(&os_guard_probe, m, RELAXED);
    return m == 1;
}

int mote__os_guard(void *p, size_t len, bool use_madvise)
{
    int r =
        use_madvise ? madvise(p, len, MADV_GUARD_INSTALL) : mprotect(p, len, PROT_NONE);
    return r == 0 ? 0 : -errno;
}

int mote__os_guard_remove(void *p, size_t len)
{
    return madvise(p, len, MADV_GUARD_REMOVE) == 0 ? 0 : -errno;
}

int mote__os_decommit(void *p, size_t len)
{
    return madvise(p, len, MADV_DONTNEED) == 0 ? 0 : -errno;
}

/* A pidfd for this process, for process_madvise; -2 unknown, -1 none.
 * After fork it names the parent, so it is only used by the pid that made
 * it. */
static int os_self_pidfd = -2;
static pid_t os_self_pidfd_pid;

static int os_pidfd(void)
{
    int fd = LOAD(&os_self_pidfd, ACQUIRE);
    if (fd >= 0 && LOAD(&os_self_pidfd_pid, RELAXED) != getpid())
        return -1;
    if (fd != -2)
        return fd;
    pid_t me = getpid();
    int nfd = (int)syscall(SYS_pidfd_open, me, 0);
    if (nfd < 0)
        nfd = -1;
    STORE(&os_self_pidfd_pid, me, RELAXED);
    mote__os_fd_own(nfd);
    int expect = -2;
    if (!CAS_F(&os_self_pidfd, &expect, nfd, ACQ_REL, ACQUIRE)) {
        mote__os_fd_close_own(nfd);
        return expect;
    }
    return nfd;
}

int mote__os_decommit_batch(const struct iovec *ranges, size_t n)
{
    int fd = os_pidfd();
    size_t i = 0;
    /* process_madvise on ourselves halves the cost per range (measured:
     * 0.55 vs 1.1 us) by paying one system call per 1024 ranges. */
    while (fd >= 0 && i < n) {
        size_t k = n - i < 1024 ? n - i : 1024;
        long r = syscall(SYS_process_madvise, fd, ranges + i, k, MADV_DONTNEED, 0);
        size_t want = 0;
        for (size_t j = i; j < i + k; j++)
            want += ranges[j].iov_len;
        /* An error (an older kernel) or a partial run: redo the rest one
         * range at a time below; MADV_DONTNEED is idempotent. */
        if (r < 0 || (size_t)r != want)
            break;
        i += k;
    }
    for (; i < n; i++) {
        int r = mote__os_decommit(ranges[i].iov_base, ranges[i].iov_len);
        if (r)
            return r;
    }
    return 0;
}

int mote__os_pagemap_open(void)
{
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    mote__os_fd_own(fd);
    return fd;
}

int mote__os_pagemap_read(int pagemap_fd, uintptr_t lo, size_t n, uint64_t *e)
{
    if (lo % OS_PAGE)
        return -EINVAL;
    size_t want = n * sizeof e[0];
    ssize_t got = pread(pagemap_fd, e, want, (off_t)(lo / OS_PAGE * sizeof e[0]));
    if (got != (ssize_t)want)
        return got < 0 ? -errno : -EIO;
    return 0;
}

uint64_t mote__os_pagemap_unpopulated(const uint64_t *e, unsigned n)
{
    enum { PRESENT = 63, SWAPPED = 62 }; /* bits of a pagemap entry */
    uint64_t m = 0;
    for (unsigned i = 0; i < n && i < 64; i++)
        if (!(e[i] >> PRESENT & 1) && !(e[i] >> SWAPPED & 1))
            m |= 1ULL << i;
    return m;
}
