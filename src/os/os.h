/*
 * os.h - the operating-system layer: the only code in mote that makes system
 * calls.  Virtual memory (reserve, guard, give back, residency), futexes,
 * clocks, readings from /proc, signals and alternate stacks, helper threads,
 * symbol names from ELF files, and raw output for diagnostics.  Only Linux
 * exists (src/os/linux/, one file per concern).
 *
 * Everything here is thread-safe and lock-free unless stated.  Functions
 * marked "malloc-free" never allocate: the allocator calls them from inside
 * malloc, and the overflow handler from a signal handler.
 */
#ifndef MOTE_OS_H
#define MOTE_OS_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define OS_PAGE 4096u

/* ---- virtual memory (vm.c), all malloc-free ---- */

/* Reserves len bytes of address space: anonymous, private, MAP_NORESERVE,
 * read/write, never transparent-huge; named "[anon:name]" in
 * /proc/self/maps when name is not NULL (which also keeps the kernel from
 * merging it with other memory).  NULL on failure. */
void *mote__os_reserve(size_t len, const char *name);
void mote__os_release(void *p, size_t len);
/* Replaces [p, p+len) with a fresh reservation like mote__os_reserve's:
 * every page, guard and page table in it is gone.  0 or -errno. */
int mote__os_renew(void *p, size_t len, const char *name);
/* size bytes aligned to align (a power of two), read/write, committed on
 * touch; noreserve adds MAP_NORESERVE.  NULL on failure. */
void *mote__os_map_aligned(size_t size, size_t align, bool noreserve);
/* Resizes the mapping [p, p + len) (one VMA) to new_len bytes where it
 * is, its pages kept.  p, or NULL (errno set; the mapping as it was). */
void *mote__os_remap(void *p, size_t len, size_t new_len);
/* Moves the pages of [p, p + len) (one VMA, or several side by side on
 * Linux >= 6.17) to the start of [dst, dst + new_len), a mapping of the
 * caller's, page tables and all: no byte is copied, nothing faults; the
 * rest of dst's range is fresh.  0: moved (p's range is unmapped); 1: not
 * moved, p's range as it was, dst's a fresh anonymous range; -1: not
 * moved and dst's range is unmapped (no memory to map it again). */
int mote__os_move(void *p, size_t len, void *dst, size_t new_len);
/* Transparent huge pages off for [p, p+len): a huge page would turn one
 * touched byte into 2 MiB of RSS. */
void mote__os_no_hugepages(void *p, size_t len);
/* Transparent huge pages asked for on [p, p+len) (MADV_HUGEPAGE): where
 * the kernel has them, a first touch maps 2 MiB at once. */
void mote__os_hugepages(void *p, size_t len);

/* Whether this kernel has MADV_GUARD_INSTALL (Linux >= 6.13): guard pages
 * as page-table markers, no VMA per guard.  Probed once. */
bool mote__os_guard_madvise_works(void);
/* Makes [p, p+len) fault on any access: with MADV_GUARD_INSTALL when
 * madvise, else mprotect(PROT_NONE) (one extra VMA per guard:
 * vm.max_map_count then caps the number of stacks).  0 or -errno. */
int mote__os_guard(void *p, size_t len, bool madvise);
/* Removes the MADV_GUARD_INSTALL markers in [p, p+len) (a page table
 * holding one is never freed).  0 or -errno. */
int mote__os_guard_remove(void *p, size_t len);

/* Gives the pages of each range back (MADV_DONTNEED): the next touch reads
 * zeros.  Batched into as few system calls as the kernel allows
 * (process_madvise takes 1024 ranges a call).  0 or -errno. */
int mote__os_decommit_batch(const struct iovec *ranges, size_t n);
/* /proc/self/pagemap, read-only, mote's own (see mote__os_fd_own); -errno.
 * (A fork child must open its own: the path names the opener.) */
int mote__os_pagemap_open(void);
/* Reads the pagemap entries of the n pages from lo (page aligned) into e:
 * one system call for any n.  0 or -errno. */
int mote__os_pagemap_read(int pagemap_fd, uintptr_t lo, size_t n, uint64_t *e);
/* Which of the n pages whose entries are e (n <= 64) hold nothing: never
 * written since mapped or dropped, neither in memory nor swapped out (bit
 * i: page i).  Touching one where a userfaultfd watches for missing pages
 * would wait for its handler. */
uint64_t mote__os_pagemap_unpopulated(const uint64_t *e, unsigned n);
int mote__os_decommit(void *p, size_t len);
/* One byte per page of [p, p+len) (page aligned): bit 0 set when resident
 * (mincore).  0 or -errno. */
int mote__os_residency(const void *p, size_t len, unsigned char *vec);

/* ---- futexes (futex.c), malloc-free ---- */

/* Waits while *word == val: returns on a wake, a signal, a change of *word
 * or after timeout_ns (< 0: none); callers re-check their condition. */
void mote__os_futex_wait(int *word, int val, int64_t timeout_ns);
void mote__os_futex_wake(int *word, int n);

/* ---- process-wide memory barriers (membarrier.c), malloc-free ---- */

/* Registers the process for mote__os_membarrier; false where the kernel or
 * a seccomp filter refuses.  A fork child must register again. */
bool mote__os_membarrier_register(void);
/* Before it returns, every thread of the process that is running executes
 * a full memory barrier (one that is not running passed one when it was
 * switched out); false if it could not (not registered). */
bool mote__os_membarrier(void);

/* ---- clocks (clock.c), malloc-free ---- */

int64_t mote__os_now_ns(void);  /* CLOCK_MONOTONIC */
int64_t mote__os_wall_ns(void); /* CLOCK_REALTIME: ns since the epoch */
/* The kernel's tick-granular monotonic clock (1-4 ms steps): ~3 ns a read
 * instead of ~20, for decisions that only need "about a millisecond". */
int64_t mote__os_coarse_ns(void);
int64_t mote__os_thread_cpu_ns(void); /* CPU time of the calling thread (a system call) */
uint32_t mote__os_coarse_ms(void);    /* the same in ms, wrapping */

/* ---- the process, from /proc (proc.c) ---- */

int mote__os_ncpus(void);
/* Resident set size from /proc/self/statm: cheap enough to poll.
 * Malloc-free. */
uint64_t mote__os_rss_bytes(void);
/* /proc/self/status fields in bytes ("VmRSS", "VmHWM", "VmPTE"); 0 if
 * absent.  Malloc-free. */
uint64_t mote__os_status_bytes(const char *field);
/* Whether every other thread of the process has exited: the main thread
 * (the thread-group leader) too, which stays a zombie until the last one
 * ends.  Malloc-free (/proc/self/stat). */
bool mote__os_last_live_thread(void);
/* Sum of the kernel's Rss over every mapping that overlaps one of the n
 * ranges [starts[i], ends[i]), read from /proc/self/smaps.  Measured, not
 * estimated. */
uint64_t mote__os_rss_in_ranges(const uintptr_t *starts, const uintptr_t *ends, size_t n);

/* ---- output (io.c), malloc-free and async-signal-safe ---- */

/* Writes all of buf (retrying short writes and EINTR): 0 or -errno. */
int mote__os_write_all(int fd, const char *buf, size_t len);
/* Writes a NUL-terminated string to stderr. */
void mote__os_write_err(const char *s);
/* Writes a, b, c and d (NULL: nothing) to stderr, in one write when they
 * fit 512 bytes: for messages on paths that may run on a task's stack,
 * where stdio's formatting takes kilobytes (14 KiB, stderr unbuffered). */
void mote__os_write_err4(const char *a, const char *b, const char *c, const char *d);
/* v in decimal in buf (21 bytes at least); returns buf. */
char *mote__os_u64_str(uint64_t v, char *buf);

/* ---- signals and threads (signal.c) ---- */

/* Installs handler for sig (SA_SIGINFO | SA_ONSTACK | SA_NODEFER |
 * SA_RESTART), saving
 * the previous disposition in *prev.  0 or -errno. */
int mote__os_signal_install(int sig, void (*handler)(int, siginfo_t *, void *),
                            struct sigaction *prev);
/* Installs handler for sig (SA_SIGINFO | SA_RESTART: blocked while it
 * runs, no alternate stack) for good, for a signal the program asked mote
 * to answer.  0 or -errno. */
int mote__os_signal_install_plain(int sig, void (*handler)(int, siginfo_t *, void *));
/* Passes a signal on to the disposition saved in prev, as if mote had no
 * handler: the previous handler runs, or the default action is re-armed so
 * that returning re-executes the fault and takes it. */
void mote__os_signal_forward(int sig, siginfo_t *si, void *uc,
                             const struct sigaction *prev);
/* Puts back the disposition saved by mote__os_signal_install. */
void mote__os_signal_restore(int sig, const struct sigaction *prev);
/* Gives the calling thread an alternate signal stack of size bytes unless
 * it has one: returns the mapping to pass to altstack_fini (NULL when none
 * was made). */
void *mote__os_altstack_init(size_t size);
void mote__os_altstack_fini(void *mem, size_t size);
/* Blocks SIGPIPE on the calling thread (a write to a broken pipe then
 * fails with EPIPE instead of killing the process), saving the old mask. */
void mote__os_sigpipe_block(sigset_t *old);
/* Takes any SIGPIPE left pending on this thread, then restores old. */
void mote__os_sigpipe_restore(const sigset_t *old);
/* Blocks every signal a program may send or raise (all but the
 * synchronous faults: SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, which a
 * blocked mask would turn into a kill), saving the old mask; restore it
 * with pthread_sigmask(SIG_SETMASK, old, NULL). */
void mote__os_async_signals_block(sigset_t *old);
/* Starts a detached helper thread with every signal blocked (it must never
 * run a program's signal handler); stack_size 0 is the default.  0 or
 * -errno. */
int mote__os_thread_start(void *(*fn)(void *), void *arg, size_t stack_size);
/* Names the calling thread (shown by ps, top and debuggers). */
void mote__os_thread_name(const char *name);
/* The calling thread's kernel id. */
int mote__os_gettid(void);
/* A thread's state from /proc ('R' running or runnable, 'S'/'D' waiting in
 * the kernel, '?' unknown) and, when it waits in a system call, that
 * call's number (else -1). */
char mote__os_thread_state(int tid, long *syscall_nr);

/* ---- readiness polling (poll.c): epoll and eventfd ---- */

/* A new epoll instance (close-on-exec): fd or -errno. */
int mote__os_poll_create(void);
/* Registers fd edge-triggered for input, output, peer hang-up and errors,
 * with data as its tag (replacing an earlier registration of fd).  0,
 * -EPERM (a regular file or directory: epoll refuses it), or another
 * -errno. */
int mote__os_poll_add(int epfd, int fd, uint64_t data);
/* Registers fd level-triggered for input only: it stays reported to every
 * wait until it is drained (the poller's wake-up eventfd). */
int mote__os_poll_add_level(int epfd, int fd, uint64_t data);
int mote__os_poll_del(int epfd, int fd);

/* One ready descriptor: its tag and what happened.  stops_reads: there is
 * something a read of a stream stops short at, with more queued behind
 * it or none to come: the peer closed or shut down its side, an error is
 * pending, or urgent (out-of-band) data arrived. */
typedef struct os_poll_event {
    uint64_t data;
    uint32_t readable : 1, writable : 1, error : 1, stops_reads : 1;
} os_poll_event;
/* Waits up to timeout_ns (< 0 forever, 0 not at all) for events; returns
 * how many were stored (0 on timeout or a signal) or -errno. */
int mote__os_poll_wait(int epfd, os_poll_event *ev, int max, int64_t timeout_ns);

/* An eventfd (non-blocking, close-on-exec) to interrupt a poll: fd or -errno. */
int mote__os_event_create(void);
void mote__os_event_signal(int efd);
void mote__os_event_drain(int efd);

/* ---- userfaultfd (uffd.c): frozen stacks ---- */

enum { OS_UFFD_FULL = 1, OS_UFFD_USER_ONLY = 2 };
/* A non-blocking userfaultfd that can write-protect anonymous memory,
 * self-tested: full mode (faults from kernel mode reach it too) when the
 * system allows it, else user-mode-only if allow_user_only.  The fd and
 * *mode, or -errno (-EPERM when denied, -ENOSYS without the system call,
 * -EOPNOTSUPP without write-protection). */
int mote__os_uffd_open(bool allow_user_only, int *mode);
/* Registers [p, p+len) for missing-page and write-protect faults. */
int mote__os_uffd_register(int fd, void *p, size_t len);
/* Write-protects (on) or releases [p, p+len); releasing wakes writers. */
int mote__os_uffd_wp(int fd, void *p, size_t len, bool on);
/* Maps a copy of src at the absent pages dst (atomically) and wakes every
 * thread waiting on them.  -EEXIST when a page is there already. */
int mote__os_uffd_copy(int fd, void *dst, const void *src, size_t len);
int mote__os_uffd_zeropage(int fd, void *dst, size_t len);
int mote__os_uffd_wake(int fd, void *p, size_t len);
/* Waits up to timeout_ns (< 0 forever) for a fault message on fd or a
 * byte on stop_fd (< 0: none): bit 0 fault, bit 1 stop, 0 timeout. */
int mote__os_uffd_wait(int fd, int stop_fd, int64_t timeout_ns);
typedef struct os_uffd_fault {
    uintptr_t addr;
    bool write, wp; /* a write; a write into a write-protected page */
} os_uffd_fault;
/* Reads pending fault messages (non-blocking): how many, or -errno. */
int mote__os_uffd_read(int fd, os_uffd_fault *f, int max);

/* ---- descriptors (fd.c) ---- */

/* OS_FD_STREAM: a TCP socket, whose read returns all that is queued up to
 * the buffer's size (or stops at the peer's FIN or an error);
 * OS_FD_USTREAM: another byte-stream socket (a Unix stream stops at a
 * message that carried descriptors or, with SO_PASSCRED, at another
 * writer's bytes); OS_FD_SOCKET: a message socket (datagrams, seqpacket). */
enum os_fd_kind {
    OS_FD_STREAM = 1,
    OS_FD_USTREAM,
    OS_FD_SOCKET,
    OS_FD_PIPE,
    OS_FD_FILE,
    OS_FD_OTHER
};
/* What fd is: a TCP or another socket, a pipe/FIFO, a regular file
 * (or block device or directory), or something else (tty, eventfd ...).
 * -errno (e.g. -EBADF) when it is not an open descriptor. */
int mote__os_fd_kind(int fd);
/* Makes fd non-blocking (one fcntl when it already is): 1 if it was
 * blocking, 0 if it was not, or -errno. */
int mote__os_fd_nonblock(int fd);
/* Makes fd blocking again (best effort: a descriptor shared with other
 * processes, a terminal or a pipe, is theirs too). */
void mote__os_fd_block(int fd);
/* What fd refers to (device and inode), to tell it from a descriptor made
 * later under its number: 0 or -errno. */
int mote__os_fd_identity(int fd, uint64_t id[2]);

/* mote's own descriptors: the epoll instance, eventfds, the userfaultfd and
 * the pidfd that this layer makes (some lazily, mid-run).  A number the
 * program closed may be one of them now: mote's I/O calls and mote_close
 * refuse them (-EBADF), so a stale number in the program reaches none of
 * mote's.  mote__os_fd_close_own closes one and forgets it. */
bool mote__os_fd_is_own(int fd);
void mote__os_fd_close_own(int fd);
/* (for this layer's creators) fd is mote's own from now on */
bool mote__os_fd_own(int fd); /* false: no room (fd not recorded) */

/* ---- symbols (symbol.c) ---- */

/* Writes the name of the function containing addr into buf: dladdr first
 * (exported names), then the object's full symbol table (static functions
 * too, unless stripped).  false when none is found.  Uses only
 * open/read/mmap, so it also works in the overflow handler. */
bool mote__os_symbol_name(const void *addr, char *buf, size_t len);

/* The functions of one ELF file, sorted, for naming many of its addresses
 * (the heap profile's).  Held in mappings of their own: no heap.  NULL
 * when the file cannot be read, is no 64-bit little-endian ELF, or has no
 * function symbols. */
typedef struct mote__os_symtab mote__os_symtab;
mote__os_symtab *mote__os_symtab_open(const char *path);
void mote__os_symtab_close(mote__os_symtab *t);
/* The function holding the byte at offset file_off of the file (as a
 * /proc/self/maps line places addresses: its offset plus the distance
 * from its start): an index for the two below, or -1 when none does. */
int64_t mote__os_symtab_find(const mote__os_symtab *t, uint64_t file_off);
/* Its name, as the file has it (mangled, NUL-terminated; valid until the
 * close). */
const char *mote__os_symtab_name(const mote__os_symtab *t, int64_t fn);
/* A number the caller keeps with the function (0 at open). */
uint32_t *mote__os_symtab_id(mote__os_symtab *t, int64_t fn);

/* The loadable segment of a loaded object (program or library) that holds
 * a: its bounds [*lo, *hi) and whether it is executable.  false when no
 * object holds a, or where the C library cannot say (before glibc 2.35).
 * Lock-free, no allocation, safe in a signal handler: for checking that
 * an address is code before reading it, from inside malloc. */
bool mote__os_segment_of(uintptr_t a, uintptr_t *lo, uintptr_t *hi, bool *exec);
/* The first address of the function holding code address pc, from its
 * object's unwind table (.eh_frame_hdr), or 0 when that does not say.
 * Lock-free and without allocation, as above. */
uintptr_t mote__os_function_start(uintptr_t pc);

#endif /* MOTE_OS_H */
