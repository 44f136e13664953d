/*
 * mote.h - the whole public API of mote: Go-style tasks, channels, select and
 * sync for C, on fixed-address stacks, plus mote's thread-caching allocator.
 *
 * Conventions: functions return 0 or a negative errno value (MOTE_ECLOSED is
 * mote's own negative code, not an errno).  Misuse that Go panics on is an
 * error here, never undefined behaviour.
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

/* ---- errors ---------------------------------------------------------- */

/* Operation on a closed channel.  Below every errno value. */
#define MOTE_ECLOSED (-10001)

/* A short English description of err (a negative errno or MOTE_E* code). */
const char *mote_strerror(int err);

/* ---- tasks ----------------------------------------------------------- */

typedef void (*mote_fn)(void *arg);

typedef struct mote_task_opts {
    const char *name;  /* for diagnostics; NULL names the task by its entry
                          function.  Not copied: must outlive the task. */
    size_t stack_size; /* this task's maximum stack in bytes; 0 = the default
                          (MOTE_STACK_SIZE).  Rounded up to whole pages. */
} mote_task_opts;

/* Runs main as the first task of a fresh runtime and returns when main
 * returns: 0, or a negative errno (-EINVAL bad configuration, -EBUSY a
 * runtime already runs in this process, -EDEADLK every task blocked forever,
 * -ENOMEM).  Tasks still alive when main returns are discarded and their
 * stacks released.  mote_run may be called again afterwards. */
int mote_run(mote_fn main, void *arg);

/* Spawns a task: 0, -ENOMEM, -EINVAL (fn NULL, bad stack size), or -EPERM
 * when no runtime is running.  Callable from any task and from any plain
 * thread while a runtime runs. */
int mote_go(mote_fn fn, void *arg);
int mote_go_ex(mote_fn fn, void *arg, const mote_task_opts *opts);

uint64_t mote_id(void);        /* current task's id (>= 1); 0 outside a task */
const char *mote_name(void);   /* current task's name; NULL outside a task */
void mote_yield(void);         /* let other runnable tasks on this worker run */
int mote_sleep(int64_t ns);    /* park >= ns on the monotonic clock; 0, or
                                  -EPERM outside a task */
int64_t mote_now(void);        /* monotonic clock, nanoseconds */

/* ---- metrics --------------------------------------------------------- */

/* Reads one metric by its name ("/tasks/live:tasks" ...): 0, or -ENOENT for
 * an unknown name, -EINVAL for NULL arguments.  Safe from any thread at any
 * time, also when no runtime runs. */
int mote_metric(const char *name, uint64_t *value);

/* Calls fn for every metric name, in a stable order. */
void mote_metric_each(void (*fn)(const char *name, uint64_t value, void *ctx),
                      void *ctx);

enum { MOTE_METRICS_TEXT = 0, MOTE_METRICS_JSON = 1 };
/* Writes every metric to fd as "name value" lines or one JSON object. */
int mote_metrics_print(int fd, int format);

/* ---- channels and select -------------------------------------------- */

typedef struct mote_chan mote_chan;

/* elem_size 0 makes a signal-only channel.  NULL with errno EINVAL/ENOMEM. */
mote_chan *mote_chan_make(size_t elem_size, size_t capacity);
int mote_chan_send(mote_chan *c, const void *elem);    /* 0 | MOTE_ECLOSED */
int mote_chan_recv(mote_chan *c, void *elem);          /* 0 | MOTE_ECLOSED */
int mote_chan_trysend(mote_chan *c, const void *elem); /* 0|-EAGAIN|CLOSED */
int mote_chan_tryrecv(mote_chan *c, void *elem);       /* 0|-EAGAIN|CLOSED */
int mote_chan_close(mote_chan *c);                     /* 0 | MOTE_ECLOSED */
size_t mote_chan_len(const mote_chan *c);
size_t mote_chan_cap(const mote_chan *c);
void mote_chan_free(mote_chan *c);

enum { MOTE_SEND = 1, MOTE_RECV = 2 };
typedef struct mote_case {
    mote_chan *chan; /* NULL: never fires */
    int op;          /* MOTE_SEND or MOTE_RECV */
    void *elem;      /* value to send, or where to receive (may be NULL) */
    int result;      /* set for the chosen case: 0 or MOTE_ECLOSED */
} mote_case;
/* Index of the case that completed; -EAGAIN (timeout 0, none ready),
 * -ETIMEDOUT, -EINVAL, -EPERM (blocking outside a task). */
int mote_select(mote_case *cases, size_t n, int64_t timeout_ns);

/* ---- wait groups, mutexes, condition variables ------------------------ */

/* The internals are complete types so these can live in static storage or
 * on a stack; treat the fields as private. */
typedef struct mote_waitq {
    void *head, *tail;
} mote_waitq;

typedef struct mote_wg {
    int lock;
    int64_t count;
    mote_waitq waiters;
} mote_wg;
#define MOTE_WG_INIT {0, 0, {0, 0}}
int mote_wg_add(mote_wg *wg, int64_t delta); /* -EINVAL if it would go < 0 */
int mote_wg_done(mote_wg *wg);
void mote_wg_wait(mote_wg *wg);

typedef struct mote_mutex {
    int lock;       /* guards waiters */
    int state;      /* locked / a waiter woken / waiters queued (bits) */
    uint64_t owner; /* the holder (its task), for diagnostics */
    mote_waitq waiters;
} mote_mutex;
#define MOTE_MUTEX_INIT {0, 0, 0, {0, 0}}
void mote_mutex_lock(mote_mutex *m);
int mote_mutex_trylock(mote_mutex *m); /* 0 | -EBUSY */
int mote_mutex_unlock(mote_mutex *m);  /* 0 | -EPERM when not locked */

typedef struct mote_cond {
    int lock;
    mote_waitq waiters;
} mote_cond;
#define MOTE_COND_INIT {0, {0, 0}}
void mote_cond_wait(mote_cond *c, mote_mutex *m);
int mote_cond_timedwait(mote_cond *c, mote_mutex *m, int64_t ns);
void mote_cond_signal(mote_cond *c);
void mote_cond_broadcast(mote_cond *c);

/* ---- I/O: the netpoller and the blocking-call pool ---------------------
 * Every call parks the calling task, never its worker.  timeout_ns < 0 waits
 * forever, 0 never waits.  Failures are a negative errno; -ETIMEDOUT when the
 * timeout passes; -EPERM outside a task (except mote_listen_tcp and
 * mote_close, which work anywhere). */

enum { MOTE_READABLE = 1, MOTE_WRITABLE = 2 };
int mote_wait_fd(int fd, int events, int64_t timeout_ns);
ssize_t mote_read(int fd, void *buf, size_t n, int64_t timeout_ns);
ssize_t mote_write(int fd, const void *buf, size_t n, int64_t timeout_ns);
int mote_accept(int lfd, struct sockaddr *addr, socklen_t *addrlen,
                int64_t timeout_ns);
int mote_connect(int fd, const struct sockaddr *addr, socklen_t len,
                 int64_t timeout_ns);
int mote_listen_tcp(const char *addr, int backlog);
int mote_dial_tcp(const char *addr, int64_t timeout_ns);
int mote_close(int fd);
intptr_t mote_offload(intptr_t (*fn)(void *arg), void *arg);

/* ---- memory ------------------------------------------------------------ */

void *mote_malloc(size_t size);
void *mote_calloc(size_t n, size_t size);
void *mote_realloc(void *p, size_t size);
void mote_free(void *p);
void *mote_aligned_alloc(size_t alignment, size_t size);
size_t mote_usable_size(const void *p);
/* Gives every free page back to the OS now: the heap's, and (while a
 * runtime runs) those of pooled stacks and below parked tasks' stacks. */
void mote_mem_release(void);

#ifdef __cplusplus
}
#endif
#endif /* MOTE_H */
