/*
 * mote.h - the whole public API of mote: Go-style tasks, channels, select and
 * sync for C on fixed-address stacks, task-aware I/O, and mote's
 * thread-caching allocator.
 *
 * Conventions, for every call below:
 *  - Errors are values: a call returns 0 (or a count, an index, a
 *    descriptor) or a negative errno value; MOTE_ECLOSED is mote's own code
 *    for a closed channel.  Each declaration lists every value it returns.
 *  - Misuse that Go panics on is an error here, never undefined behaviour:
 *    a NULL or stray object is -EINVAL; a call that may block (wait on a
 *    channel, mutex, condition, wait group, timer or descriptor) made
 *    outside a task is -EPERM, whether or not it would have blocked.
 *  - Timeouts are nanoseconds on the monotonic clock: < 0 waits forever,
 *    0 never waits.
 *  - fork(): the child has only the thread that called it.  The allocator
 *    works there, but a run in progress does not carry over (its other
 *    workers and their tasks are not in the child): a child forked during
 *    a run should exec or _exit without calling mote's task functions, as
 *    POSIX asks of any multi-threaded process's child.  A child forked
 *    while no run is in progress may start one.
 *  - Objects (channels, wait groups, mutexes, conditions) outlive runs:
 *    when mote_run returns, tasks still blocked on them are discarded and
 *    taken out of their queues; buffered values, counts and the lock state
 *    stay.  A mutex held by a discarded task stays locked.
 *  - Frozen stacks (MOTE_STACK_FREEZE, on by default where the kernel
 *    allows it): a task parked longer than the threshold has its stack's
 *    live bytes moved out and its pages given back.  Pointers into it stay
 *    valid: any access from any thread, and a system call's copy into or
 *    out of it, waits the few microseconds it takes to put the bytes back.
 *    What does not wait: another process's or a debugger's reads
 *    (process_vm_readv, ptrace: EFAULT/EIO; tools/mote-gdb.py reads the
 *    copy), a fork()ed child (its copy of a frozen stack reads as zeros
 *    until it execs), hardware that pins pages (RDMA registrations of a
 *    buffer on a parked task's stack).  Where only a user-mode-only
 *    userfaultfd is allowed, freezing is off unless MOTE_STACK_FREEZE is
 *    set explicitly, and then a system call given a pointer into a frozen
 *    stack fails with EFAULT; /stacks/freeze/mode:enum says which (0 off,
 *    1 full, 2 user-mode-only) and /stacks/freeze/off-reason:enum why off.
 */
#ifndef MOTE_H
#define MOTE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The one export macro: every function of this header is visible from
 * libmote.so; nothing else is. */
#if defined(__GNUC__)
#define MOTE_API __attribute__((visibility("default")))
#else
#define MOTE_API
#endif

/* ---- version ------------------------------------------------------------ */

#define MOTE_VERSION_MAJOR 0
#define MOTE_VERSION_MINOR 2
#define MOTE_VERSION_PATCH 0
/* 0xMMmmpp: compare with MOTE_VERSION >= 0x000200. */
#define MOTE_VERSION \
    ((MOTE_VERSION_MAJOR << 16) | (MOTE_VERSION_MINOR << 8) | MOTE_VERSION_PATCH)
#define MOTE_VERSION_STRING "0.2.0"

/* The version of the library linked in ("0.2.0"), which may differ from
 * the header's MOTE_VERSION_STRING with a shared library. */
MOTE_API const char *mote_version(void);

/* ---- errors ------------------------------------------------------------- */

/* Operation on a closed channel.  Below every errno value. */
#define MOTE_ECLOSED (-10001)

/* A short English description of err (0, a negative errno or MOTE_E*);
 * never NULL. */
MOTE_API const char *mote_strerror(int err);

/* ---- tasks -------------------------------------------------------------- */

typedef void (*mote_fn)(void *arg);

/* Options for one task.  Initialise with MOTE_TASK_OPTS_INIT (or {0}) and
 * set the fields you need: the struct may grow, and `size` tells the
 * library which fields your program knows. */
typedef struct mote_task_opts {
    size_t size;       /* sizeof(mote_task_opts) (MOTE_TASK_OPTS_INIT sets
                          it); 0 means name and stack_size only; a size
                          past this struct's (a newer header's) is taken,
                          and the fields this library does not know are
                          ignored */
    const char *name;  /* for diagnostics; NULL names the task by its entry
                          function.  Not copied: must outlive the task. */
    size_t stack_size; /* this task's maximum stack in bytes, 8 KiB-1 GiB,
                          rounded up to a power of two; 0 = the default
                          (MOTE_STACK_SIZE) */
} mote_task_opts;
#define MOTE_TASK_OPTS_INIT            \
    {                                  \
        .size = sizeof(mote_task_opts) \
    }

/* Runs main(arg) as the first task of a fresh runtime and returns when main
 * returns.  0; -EINVAL (main NULL, or an invalid MOTE_* variable, reported
 * on stderr); -EBUSY (a run is already in progress in this process);
 * -EDEADLK (every task blocked forever: each is reported on stderr.  A
 * plain thread counts as a possible waker once it has spawned or woken a
 * task: a run whose only waker is a plain thread that has not done so yet
 * is reported deadlocked; a wait with a timeout is never);
 * -ENOMEM (no memory to start; or new tasks found no memory for their
 * stacks for 1 s while every other task was blocked forever, reported as
 * -EDEADLK is); -EAGAIN (a worker thread could not be started).  Tasks still
 * alive when main returns are discarded without unwinding and their stacks
 * released; mote_run cannot return while a task is inside a blocking system
 * call that mote does not know about (use mote_read & co, or
 * mote_offload).  mote_run may be called again afterwards. */
MOTE_API int mote_run(mote_fn main, void *arg);

/* Spawns fn(arg).  Callable from any task and from any plain thread while a
 * run is in progress.  0; -EINVAL (fn NULL, a bad stack_size or opts->size);
 * -ENOMEM (no memory for the task, or MOTE_MEMLIMIT reached); -EPERM (no
 * run in progress, or it is ending).  The stack is mapped when the task
 * first runs: if it cannot be, the task waits until stacks are freed (said
 * once a run on stderr; see mote_run's -ENOMEM). */
MOTE_API int mote_go(mote_fn fn, void *arg);
MOTE_API int mote_go_ex(mote_fn fn, void *arg, const mote_task_opts *opts);

MOTE_API uint64_t mote_id(void);      /* current task's id (>= 1); 0 outside a task */
MOTE_API const char *mote_name(void); /* current task's name; NULL outside a task */
/* Lets other runnable tasks of this worker run; outside a task, yields the
 * thread (sched_yield). */
MOTE_API void mote_yield(void);
/* Parks the task for at least ns nanoseconds (ns <= 0: a yield).  0; -EPERM
 * outside a task; -ENOMEM when the timer cannot be recorded. */
MOTE_API int mote_sleep(int64_t ns);
MOTE_API int64_t mote_now(void); /* monotonic clock, nanoseconds */

/* ---- metrics ------------------------------------------------------------ */

/* Reads one metric by name ("/tasks/live:tasks", ...): 0; -ENOENT for an
 * unknown name; -EINVAL for NULL arguments.  Safe from any thread at any
 * time, also when no run is in progress. */
MOTE_API int mote_metric(const char *name, uint64_t *value);

/* Calls fn for every metric, in a stable order: 0, or -EINVAL (fn NULL). */
MOTE_API int mote_metric_each(void (*fn)(const char *name, uint64_t value, void *ctx),
                              void *ctx);

enum { MOTE_METRICS_TEXT = 0, MOTE_METRICS_JSON = 1 };
/* Writes every metric to fd as "name value" lines or one JSON object: 0;
 * -EINVAL (bad format); -EBADF or another -errno from writing. */
MOTE_API int mote_metrics_print(int fd, int format);

/* ---- channels and select ------------------------------------------------ */

typedef struct mote_chan mote_chan;

/* A channel of elements of elem_size bytes (0: a signal-only channel, at
 * most 64 KiB) with room for capacity of them (0: unbuffered).  NULL with
 * errno EINVAL (elem_size too big, or the ring would overflow) or ENOMEM. */
MOTE_API mote_chan *mote_chan_make(size_t elem_size, size_t capacity);
/* Send and receive block until they complete.  0; MOTE_ECLOSED (send: the
 * channel is closed; receive: closed and drained, *elem zeroed); -EINVAL (c
 * not a live channel; send: elem NULL with elem_size > 0); -EPERM outside a
 * task.  elem may be NULL for a receive that discards the value. */
MOTE_API int mote_chan_send(mote_chan *c, const void *elem);
MOTE_API int mote_chan_recv(mote_chan *c, void *elem);
/* As above, never blocking, from anywhere: -EAGAIN when they would block. */
MOTE_API int mote_chan_trysend(mote_chan *c, const void *elem);
MOTE_API int mote_chan_tryrecv(mote_chan *c, void *elem);
/* Closes c, waking every blocked sender and receiver: 0; MOTE_ECLOSED if
 * already closed; -EINVAL. */
MOTE_API int mote_chan_close(mote_chan *c);
MOTE_API size_t mote_chan_len(const mote_chan *c); /* 0 for an invalid c */
MOTE_API size_t mote_chan_cap(const mote_chan *c); /* 0 for an invalid c */
/* Frees c: 0 (also for NULL); -EBUSY (a task is blocked on it: nothing is
 * freed); -EINVAL (not a live channel, e.g. freed twice).  A select that
 * completed on another channel may still hold c for a moment; c's memory is
 * then released by the last such select. */
MOTE_API int mote_chan_free(mote_chan *c);

enum { MOTE_SEND = 1, MOTE_RECV = 2 };
typedef struct mote_case {
    mote_chan *chan; /* NULL: the case never fires (op is still checked) */
    int op;          /* MOTE_SEND or MOTE_RECV */
    void *elem;      /* value to send, or where to receive (may be NULL) */
    int result;      /* set for the chosen case: 0 or MOTE_ECLOSED */
} mote_case;
/* Completes exactly one ready case, chosen uniformly at random among the
 * ready ones, waiting up to timeout_ns for one (< 0: forever; with no
 * non-NULL case that blocks forever).  The case's index; -EAGAIN (timeout 0,
 * none ready); -ETIMEDOUT; -EINVAL (cases NULL with n > 0, n > 65536, a bad
 * op, an invalid channel, a send with elem NULL on a channel whose
 * elements have a size: a signal-only one needs none); -EPERM (timeout != 0
 * outside a task); -ENOMEM (no memory for the records of > 8 cases or for
 * the timer). */
MOTE_API int mote_select(mote_case *cases, size_t n, int64_t timeout_ns);

/* ---- wait groups, mutexes, condition variables -------------------------- */

/* The internals are complete types so these can live in static storage or
 * on a stack; treat the fields as private. */
struct mote_list_node;
typedef struct mote_list {
    struct mote_list_node *head, *tail;
} mote_waitq;

typedef struct mote_wg {
    int lock;
    int64_t count;
    mote_waitq waiters;
} mote_wg;
#define MOTE_WG_INIT   \
    {                  \
        0, 0, { 0, 0 } \
    }
/* Adds delta to the counter, waking every waiter when it reaches 0: 0;
 * -EINVAL (wg NULL, or the counter would go below 0 or overflow: it is left
 * unchanged). */
MOTE_API int mote_wg_add(mote_wg *wg, int64_t delta);
MOTE_API int mote_wg_done(mote_wg *wg); /* mote_wg_add(wg, -1) */
/* Waits until the counter is 0: 0; -EINVAL; -EPERM outside a task. */
MOTE_API int mote_wg_wait(mote_wg *wg);

typedef struct mote_mutex {
    int lock;       /* guards waiters */
    int state;      /* locked / a waiter woken / waiters queued (bits) */
    uint64_t owner; /* the holder (its task), for diagnostics */
    mote_waitq waiters;
} mote_mutex;
#define MOTE_MUTEX_INIT   \
    {                     \
        0, 0, 0, { 0, 0 } \
    }
/* 0; -EINVAL (m NULL); -EPERM outside a task.  Not recursive: a task that
 * locks a mutex it holds waits forever (the deadlock report shows it). */
MOTE_API int mote_mutex_lock(mote_mutex *m);
MOTE_API int mote_mutex_trylock(mote_mutex *m); /* 0; -EBUSY; -EINVAL.  Anywhere. */
/* 0; -EPERM (not locked); -EINVAL.  Any task or thread may unlock, as in
 * Go. */
MOTE_API int mote_mutex_unlock(mote_mutex *m);

typedef struct mote_cond {
    int lock;
    mote_waitq waiters;
} mote_cond;
#define MOTE_COND_INIT \
    {                  \
        0, { 0, 0 }    \
    }
/* Unlocks m, waits for a signal and locks m again.  0; -EINVAL (NULL);
 * -EPERM (outside a task, or m not locked); timedwait also -ETIMEDOUT
 * (ns <= 0 times out at once) and -ENOMEM (no memory for the timer).  m is
 * locked again whenever the wait started (every result but -EINVAL and
 * -EPERM). */
MOTE_API int mote_cond_wait(mote_cond *c, mote_mutex *m);
MOTE_API int mote_cond_timedwait(mote_cond *c, mote_mutex *m, int64_t ns);
/* Wakes one / every waiter: 0; -EINVAL (c NULL).  Anywhere. */
MOTE_API int mote_cond_signal(mote_cond *c);
MOTE_API int mote_cond_broadcast(mote_cond *c);

/* ---- I/O: the netpoller and the blocking-call pool ----------------------
 * Every call parks the calling task, never its worker: a descriptor is
 * registered (edge-triggered) with the runtime's epoll instance on first
 * use and made non-blocking, for the run: when the run ends, every
 * registration is dropped and a descriptor made non-blocking this way is
 * blocking again (while the run lasts, a descriptor shared with other
 * processes, stdout say, is non-blocking for them too); descriptors mote
 * creates are O_NONBLOCK|O_CLOEXEC for good.  Tasks writing to one stream
 * at once may interleave their bytes: serialize them (a mote_mutex) to
 * keep each write whole.  Regular files, which epoll refuses, are read and
 * written on the blocking pool, so no worker waits for a disk either.
 * timeout_ns < 0 waits forever, 0 never waits (-ETIMEDOUT at once when the
 * call would wait).  Common results: -ETIMEDOUT; -ECANCELED (another task
 * called mote_close on the descriptor meanwhile); -EBADF (fd < 0, not
 * open); -EPERM outside a task (except mote_listen_tcp and mote_close,
 * which work anywhere); any -errno of the underlying system call.
 * A descriptor used with these calls must be closed with mote_close (its
 * number may then be reused safely: a waiter or event of the old one never
 * reaches the new one).  One closed with close(2) leaves its registration
 * behind: a descriptor mote makes later under that number (mote_accept,
 * mote_dial_tcp, mote_listen_tcp) drops it, but one the program makes
 * itself would be taken as registered, and a call that waits on it would
 * never be woken. */

enum { MOTE_READABLE = 1, MOTE_WRITABLE = 2 };
/* Waits until fd is readable and/or writable (events: MOTE_READABLE |
 * MOTE_WRITABLE, also true at end of file, hang-up or error): which of them,
 * as a mask; -EINVAL for another events value.  Any descriptor epoll
 * accepts (sockets, pipes, eventfds, ttys...); a regular file is always
 * ready.  As with poll(2), a wake-up may rarely be spurious (data that
 * arrived was taken by someone else): the read that follows then finds
 * nothing. */
MOTE_API int mote_wait_fd(int fd, int events, int64_t timeout_ns);
/* Reads up to n bytes: the count (> 0), 0 at end of file, or -errno
 * (-ECONNRESET, -EFAULT for buf NULL with n > 0, ...).  n == 0 never
 * waits: 0, or an error the descriptor has. */
MOTE_API ssize_t mote_read(int fd, void *buf, size_t n, int64_t timeout_ns);
/* Writes all n bytes unless an error or the timeout stops it: n, or the
 * count written before that if any, else -errno.  A write to a closed peer
 * is -EPIPE and never raises SIGPIPE (sockets and pipes alike).  n == 0
 * never waits, except to send an empty datagram.  It waits for room only
 * after the kernel said there is none, and asks once more at the deadline
 * (a TCP socket's room comes back without a wake-up until a third of its
 * buffer is free). */
MOTE_API ssize_t mote_write(int fd, const void *buf, size_t n, int64_t timeout_ns);
/* Accepts a connection on listening socket lfd: the new descriptor
 * (O_NONBLOCK|O_CLOEXEC), or -errno (-EMFILE when out of descriptors: the
 * connection stays queued, try again later; -EFAULT for addr without
 * addrlen). */
MOTE_API int mote_accept(int lfd, struct sockaddr *addr, socklen_t *addrlen,
                         int64_t timeout_ns);
/* Connects socket fd (made non-blocking) to addr: 0 or -errno
 * (-ECONNREFUSED, -ETIMEDOUT ...). */
MOTE_API int mote_connect(int fd, const struct sockaddr *addr, socklen_t len,
                          int64_t timeout_ns);
/* A TCP listener on addr: "127.0.0.1:8080", "[::1]:0", "localhost:8080", or
 * ":80" (every address, IPv4 and IPv6); port 0 picks a free one.  backlog
 * <= 0 means SOMAXCONN.  SO_REUSEADDR and TCP_NODELAY (which accepted
 * connections inherit) are set.  The descriptor, or -EINVAL (a malformed
 * address), -ENOENT (no such host), -EADDRINUSE and other -errno.  Host
 * names are resolved on the blocking pool when called from a task. */
MOTE_API int mote_listen_tcp(const char *addr, int backlog);
/* Connects to addr ("host:port", "[v6]:port"), trying each address the
 * name resolves to until one answers, within timeout_ns in all: the
 * descriptor (TCP_NODELAY set), or -EINVAL, -ENOENT, -ECONNREFUSED,
 * -ETIMEDOUT and other -errno.  A name is resolved on the blocking pool,
 * and that lookup is not cut short by the timeout (the call then fails
 * with -ETIMEDOUT once it returns); an address needs no lookup. */
MOTE_API int mote_dial_tcp(const char *addr, int64_t timeout_ns);
/* Wakes every task waiting on fd with -ECANCELED, forgets fd, then closes
 * it: 0 or -errno of close(2) (-EBADF; also for a second close of fd while
 * the first is under way).  A call of the ones above that is inside its
 * system call on fd (a socket call, or a file read or write on the
 * blocking pool) finishes first: the number is then closed, and freed for
 * another descriptor, when it does, and mote_close returns 0 at once
 * without waiting for it.  A call that would start one meanwhile gets
 * -ECANCELED.  So no call reaches the number once another descriptor may
 * have it.  A task's close of a TCP socket with SO_LINGER set, whose
 * close(2) may wait for the peer, frees the number at once: a copy of the
 * socket is closed behind, on a thread of its own, where the wait happens
 * (even past the run's end). */
MOTE_API int mote_close(int fd);
/* Runs fn(arg) on a thread of the blocking pool while the task parks (the
 * pool grows on demand up to MOTE_BLOCKING_THREADS, shrinks when idle; at
 * the cap calls queue).  Returns fn's result with fn's errno carried back;
 * -EPERM outside a task and -EINVAL for fn NULL (fn is then not called).
 * With no memory for the request, fn runs on the calling worker.  A call
 * still running when its run ends finishes on its own; its task is gone. */
MOTE_API intptr_t mote_offload(intptr_t (*fn)(void *arg), void *arg);

/* ---- diagnostics --------------------------------------------------------- */

/* Writes every task of the run to fd: id, name, state (running, runnable,
 * waiting on a channel, on fd N for reading, sleeping, in mote_offload...)
 * and for how long, and its backtrace.  Each worker answers at its next
 * scheduling point; one busy for 200 ms is reported as such with the task it
 * runs.  0; -EBADF (fd not open), or the first -errno of writing (the rest
 * is still tried; a non-blocking fd is waited for).  One dump at a time:
 * a second caller waits.  Any thread; with MOTE_SIGQUIT=dump, SIGQUIT
 * writes it to stderr. */
MOTE_API int mote_tasks_dump(int fd);

/* Writes, as one JSON object, how deep the tasks of each entry function
 * really went (bytes below the entry's caller's stack pointer, measured on
 * sampled tasks: the first of each entry function on each worker, then one
 * start in 256), how many started, and their reserved stack_size: the
 * runtime's half of `mote-stack check BINARY REPORT`.  Covers this run and
 * the runs before it.  0; -EBADF or another -errno from writing; -ENOMEM. */
MOTE_API int mote_stack_report(int fd);

/* ---- memory ------------------------------------------------------------- */

/* mote's allocator, with malloc's contracts (NULL and errno ENOMEM on
 * failure; mote_free(NULL) does nothing).  A pointer not from this
 * allocator, or freed twice, aborts with "mote: free(): invalid pointer". */
MOTE_API void *mote_malloc(size_t size);
MOTE_API void *mote_calloc(size_t n, size_t size);
MOTE_API void *mote_realloc(void *p, size_t size);
MOTE_API void mote_free(void *p);
/* alignment a power of two (else NULL, errno EINVAL). */
MOTE_API void *mote_aligned_alloc(size_t alignment, size_t size);
MOTE_API size_t mote_usable_size(const void *p);
/* Gives every free page back to the OS now: the heap's, and (while a run is
 * in progress) those of pooled stacks and below parked tasks' stacks. */
MOTE_API void mote_mem_release(void);
/* Writes the sampling heap profiler's current profile to fd, in the text
 * heap format `go tool pprof` reads (in-use and allocated objects and bytes
 * by call stack, then the process's memory map).  The profiler runs when
 * MOTE_HEAPPROFILE names a file (also written at exit); rate:
 * MOTE_HEAPPROFILE_RATE.  0, -ENODATA when the profiler is off, or the
 * -errno of a failed write (-EPIPE, not SIGPIPE, for a reader that went
 * away; -EDEADLK in a signal handler that interrupted its thread's own
 * write).  Any thread, any time (writers take turns); libmote-malloc.so
 * exports it too. */
MOTE_API int mote_heap_profile_write(int fd);

#ifdef __cplusplus
}
#endif
#endif /* MOTE_H */
