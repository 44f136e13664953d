/*
 * os.h - the operating-system layer: virtual memory (reserve, guard, give
 * back), futexes, and truthful readings from the kernel (/proc).  Only Linux
 * exists (src/os/linux/).  Everything here is thread-safe and lock-free
 * unless stated.
 */
#ifndef MOTE_OS_H
#define MOTE_OS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define OS_PAGE 4096u

/* Reserves len bytes of address space: anonymous, private, MAP_NORESERVE,
 * read/write, never transparent-huge.  NULL on failure (errno set). */
void *mote__os_reserve(size_t len);
/* The same, with a name shown in /proc/self/maps ("[anon:name]"). */
void *mote__os_reserve_named(size_t len, const char *name);
void mote__os_release(void *p, size_t len);
/* Replaces [p, p+len) with a fresh reservation like mote__os_reserve_named's:
 * every page, guard and page table in it is gone.  0 or -errno. */
int mote__os_renew(void *p, size_t len, const char *name);

enum mote__os_guard_mode { OS_GUARD_MADVISE = 1, OS_GUARD_MPROTECT = 2 };
/* How guard pages are made here: MADV_GUARD_INSTALL (Linux >= 6.13, no VMA
 * per guard) when the kernel has it, else mprotect(PROT_NONE) (one extra VMA
 * per guard: vm.max_map_count then caps the number of stacks). */
enum mote__os_guard_mode mote__os_guard_mode(void);
/* Makes [p, p+len) fault on any access.  0 or -errno. */
int mote__os_guard(void *p, size_t len);

/* Gives the pages of each range back to the kernel (MADV_DONTNEED): the
 * next touch reads zeros.  Batched into as few system calls as the kernel
 * allows (process_madvise takes 1024 ranges a call).  Returns 0 or -errno. */
int mote__os_decommit_batch(const struct iovec *ranges, size_t n);
int mote__os_decommit(void *p, size_t len);

/* Futex wait/wake on a 32-bit word, private to the process.  wait returns
 * when *word != val, on a wake, on a signal or after timeout_ns (< 0: no
 * timeout); callers re-check their condition. */
void mote__os_futex_wait(int *word, int val, int64_t timeout_ns);
void mote__os_futex_wake(int *word, int n);

int64_t mote__os_now_ns(void);
/* The kernel's tick-granular monotonic clock (1-4 ms steps): ~3 ns a read
 * instead of ~20, for decisions that only need "about a millisecond". */
int64_t mote__os_coarse_ns(void);
int mote__os_ncpus(void);

/* Resident set size from /proc/self/statm: cheap enough to poll. */
uint64_t mote__os_rss_bytes(void);
/* /proc/self/status fields in bytes ("VmRSS", "VmHWM", "VmPTE"); 0 if
 * absent. */
uint64_t mote__os_status_bytes(const char *field);
/* Sum of the kernel's Rss over every mapping inside one of the n ranges
 * [starts[i], ends[i]), read from /proc/self/smaps.  Measured, not
 * estimated. */
uint64_t mote__os_rss_in_ranges(const uintptr_t *starts, const uintptr_t *ends,
                          size_t n);

#endif /* MOTE_OS_H */
