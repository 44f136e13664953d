/*
 * offload.c - mote_offload and its thread pool (see offload.h).
 *
 * A call is a request on the heap (not on the caller's stack: it may
 * outlive the caller's run); the task parks until a pool thread has run it
 * and readied the task with fn's result and errno.  The pool grows on
 * demand, one thread per call that finds none idle, up to
 * MOTE_BLOCKING_THREADS; at the cap calls queue (FIFO).  A thread idle for
 * OFFLOAD_IDLE_NS exits, so an idle pool costs nothing.
 *
 * A run may end while a call runs: teardown's discard hook marks the
 * request abandoned (or frees it if it is still queued or already done),
 * and the pool thread frees an abandoned request when fn returns.  Both
 * decide under pool_lock, so exactly one of them frees it.
 *
 * Locking: pool_lock (a pthread mutex, with a condition for idle threads)
 * guards the queue, the counters and each request's `t` and `done`.
 */
#include "offload.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "atomic.h"
#include "os/os.h"
#include "park.h"
#include "task.h"
#include "waitq.h"

#define OFFLOAD_IDLE_NS (2000 * 1000000LL)

typedef struct offload_req {
    intptr_t (*fn)(void *);
    void *arg;
    intptr_t result;
    int err;
    task *t;   /* NULL once abandoned by a run's teardown */
    bool done; /* ran, but its task could not be readied */
    bool running;
    struct offload_req *next;
} offload_req;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t work;
    offload_req *head, *tail;
    uint32_t nthreads, nidle; /* nthreads atomic for metrics */
    uint64_t queued, pending; /* atomic */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER};

uint64_t mote__offload_pending(void) { return LOAD(&pool.pending, RELAXED); }
uint64_t mote__offload_threads(void) { return LOAD(&pool.nthreads, RELAXED); }
uint64_t mote__offload_queued(void) { return LOAD(&pool.queued, RELAXED); }

static void offload_finish(offload_req *r)
{
    FETCH_SUB(&pool.pending, 1, RELAXED);
    mote_free(r);
}

static void *offload_thread(void *arg)
{
    (void)arg;
    mote__os_thread_name("mote-blocking");
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        offload_req *r = pool.head;
        if (!r) {
            pool.nidle++;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += OFFLOAD_IDLE_NS / 1000000000;
            int e = pthread_cond_timedwait(&pool.work, &pool.lock, &ts);
            pool.nidle--;
            if (e == ETIMEDOUT && !pool.head)
                break; /* idle long enough: shrink */
            continue;
        }
        pool.head = r->next;
        if (!pool.head)
            pool.tail = NULL;
        FETCH_SUB(&pool.queued, 1, RELAXED);
        r->running = true;
        pthread_mutex_unlock(&pool.lock);

        errno = 0;
        intptr_t result = r->fn(r->arg);
        int err = errno;

        pthread_mutex_lock(&pool.lock);
        r->running = false;
        task *t = r->t;
        if (!t) { /* its task was discarded at the end of a run */
            offload_finish(r);
            continue;
        }
        if (!mote__park_claim(t)) { /* a teardown is under way: it frees r */
            r->done = true;
            continue;
        }
        r->result = result;
        r->err = err;
        pthread_mutex_unlock(&pool.lock);
        mote__park_ready(t, 0);
        pthread_mutex_lock(&pool.lock);
    }
    STORE(&pool.nthreads, pool.nthreads - 1, RELAXED);
    pthread_mutex_unlock(&pool.lock);
    return NULL;
}

/* Teardown's hook for a task discarded while its call was queued or ran. */
static void offload_discard(waiter *w)
{
    offload_req *r = w->obj;
    pthread_mutex_lock(&pool.lock);
    if (r->done) {
        offload_finish(r);
    } else if (r->running) {
        r->t = NULL; /* the pool thread frees it when fn returns */
    } else {
        for (offload_req **p = &pool.head; *p; p = &(*p)->next) {
            if (*p == r) {
                *p = r->next;
                if (pool.tail == r) {
                    pool.tail = NULL;
                    for (offload_req *q = pool.head; q; q = q->next)
                        pool.tail = q;
                }
                FETCH_SUB(&pool.queued, 1, RELAXED);
                break;
            }
        }
        offload_finish(r);
    }
    pthread_mutex_unlock(&pool.lock);
}

static uint32_t offload_cap = 64; /* MOTE_BLOCKING_THREADS, set per run */

/* fork: the child has none of the pool's threads, whose counts it
 * inherited (an idle one would have been counted on, and every call then
 * waited for good); the requests in flight are the parent's.  The lock is
 * held across the fork, so the counts are not caught mid-change. */
static void offload_fork_prepare(void) { pthread_mutex_lock(&pool.lock); }
static void offload_fork_parent(void) { pthread_mutex_unlock(&pool.lock); }
static void offload_fork_child(void)
{
    pthread_mutex_unlock(&pool.lock); /* this thread took it in prepare */
    pthread_cond_init(&pool.work, NULL);
    pool.head = pool.tail = NULL;
    STORE(&pool.nthreads, 0, RELAXED);
    pool.nidle = 0;
    STORE(&pool.queued, 0, RELAXED);
    STORE(&pool.pending, 0, RELAXED);
}

static void offload_atfork(void)
{
    pthread_atfork(offload_fork_prepare, offload_fork_parent, offload_fork_child);
}

void mote__offload_configure(uint32_t max_threads)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, offload_atfork);
    pthread_mutex_lock(&pool.lock);
    offload_cap = max_threads;
    pthread_mutex_unlock(&pool.lock);
}

intptr_t mote_offload(intptr_t (*fn)(void *arg), void *arg)
{
    task *self = mote__self();
    if (!self)
        return -EPERM;
    if (!fn)
        return -EINVAL;
    offload_req *r = mote_malloc(sizeof *r);
    if (!r) { /* no memory for the request: run it here rather than fail */
        errno = 0;
        return fn(arg);
    }
    *r = (offload_req){.fn = fn, .arg = arg, .t = self};
    waiter w;
    mote__waiter_init(&w, self);
    w.discard = offload_discard;
    w.obj = r;

    pthread_mutex_lock(&pool.lock);
    if (pool.tail)
        pool.tail->next = r;
    else
        pool.head = r;
    pool.tail = r;
    FETCH_ADD(&pool.queued, 1, RELAXED);
    FETCH_ADD(&pool.pending, 1, RELAXED);
    bool start = pool.nidle == 0 && pool.nthreads < offload_cap;
    if (start)
        STORE(&pool.nthreads, pool.nthreads + 1, RELAXED);
    else if (pool.nidle)
        pthread_cond_signal(&pool.work);
    mote__park_prepare("offload", (const void *)(uintptr_t)fn);
    mote__waitq_attach(&w);
    pthread_mutex_unlock(&pool.lock);
    if (start && mote__os_thread_start(offload_thread, NULL, 256 * 1024) != 0) {
        pthread_mutex_lock(&pool.lock);
        STORE(&pool.nthreads, pool.nthreads - 1, RELAXED);
        pthread_mutex_unlock(&pool.lock);
        /* No thread could start; one already running takes the call, or,
         * with none at all, the call runs here (it may block this worker,
         * but nothing is lost). */
    }
    if (LOAD(&pool.nthreads, RELAXED) == 0) {
        pthread_mutex_lock(&pool.lock);
        bool mine = pool.head == r && !r->running;
        if (mine) {
            pool.head = r->next;
            if (!pool.head)
                pool.tail = NULL;
            FETCH_SUB(&pool.queued, 1, RELAXED);
        }
        pthread_mutex_unlock(&pool.lock);
        if (mine && mote__park_claim(self)) {
            STORE(&self->wait_state, TASK_RUNNING, RELAXED);
            mote__waitq_end(self);
            errno = 0;
            intptr_t v = fn(arg);
            int e = errno;
            offload_finish(r);
            errno = e;
            return v;
        }
    }
    mote__park();
    mote__waitq_end(self);
    intptr_t result = r->result;
    int err = r->err;
    offload_finish(r);
    errno = err;
    return result;
}
