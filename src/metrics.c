/*
 * metrics.c - mote_metric and friends: Go runtime/metrics-style names, read
 * on demand from their owners (scheduler counters, the stack registry, the
 * kernel).  "resident" and "rss" values are measured from /proc, never
 * estimated.  Stateless; safe from any thread at any time.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "freeze.h"
#include "heap/heap.h"
#include "monitor.h"
#include "mote.h"
#include "netpoll.h"
#include "offload.h"
#include "os/os.h"
#include "report.h"
#include "sched_stats.h"
#include "stack.h"

typedef uint64_t (*metrics_get)(void);

static uint64_t m_live(void)
{
    sched_stats s;
    mote__sched_stats_read(&s);
    return s.live;
}
static uint64_t m_runnable(void)
{
    sched_stats s;
    mote__sched_stats_read(&s);
    return s.runnable;
}
static uint64_t m_blocked(void)
{
    sched_stats s;
    mote__sched_stats_read(&s);
    return s.blocked;
}
static uint64_t m_spawned(void)
{
    sched_stats s;
    mote__sched_stats_read(&s);
    return s.spawned;
}
static uint64_t m_workers(void)
{
    sched_stats s;
    mote__sched_stats_read(&s);
    return s.workers;
}
static uint64_t m_in_use(void)
{
    sched_stats s;
    mote__sched_stats_read(&s);
    return s.stacks_in_use;
}
static uint64_t m_pooled(void)
{
    sched_stats s;
    mote__sched_stats_read(&s);
    return s.stacks_pooled;
}
static uint64_t m_trimmed(void)
{
    sched_stats s;
    mote__sched_stats_read(&s);
    return s.stacks_trimmed;
}
static uint64_t m_guard(void) { return mote__stack_guard_is_madvise(); }
static uint64_t m_rss(void) { return mote__os_status_bytes("VmRSS"); }
static uint64_t m_hwm(void) { return mote__os_status_bytes("VmHWM"); }
static uint64_t m_pte(void) { return mote__os_status_bytes("VmPTE"); }

static uint64_t m_polls(void)
{
    uint64_t p, e;
    mote__netpoll_stats(&p, &e);
    return p;
}
static uint64_t m_poll_events(void)
{
    uint64_t p, e;
    mote__netpoll_stats(&p, &e);
    return e;
}
static uint64_t m_wake(int b)
{
    sched_stats s;
    mote__sched_stats_read(&s);
    return s.io_wake[b];
}
static uint64_t m_wake0(void) { return m_wake(0); }
static uint64_t m_wake1(void) { return m_wake(1); }
static uint64_t m_wake2(void) { return m_wake(2); }
static uint64_t m_wake3(void) { return m_wake(3); }
static uint64_t m_wake4(void) { return m_wake(4); }

static uint64_t m_fz(int what)
{
    freeze_stats f;
    mote__freeze_stats(&f);
    switch (what) {
    case 0: return f.frozen;
    case 1: return f.bytes;
    case 2: return f.thaws[FREEZE_RESUME];
    case 3: return f.thaws[FREEZE_FAULT];
    case 4: return f.thaws[FREEZE_RUNTIME];
    case 5: return f.ns;
    case 6: return f.freezes;
    case 7: return f.cancelled;
    case 8: return f.stray;
    case 9: return f.mode;
    case 11:
        return f.thaws[FREEZE_RESUME] + f.thaws[FREEZE_FAULT] + f.thaws[FREEZE_RUNTIME];
    case 12: return f.thaw_ns;
    case 13: return f.windows;
    default: return f.off_reason;
    }
}
static uint64_t m_fz_tasks(void) { return m_fz(0); }
static uint64_t m_fz_bytes(void) { return m_fz(1); }
static uint64_t m_fz_resume(void) { return m_fz(2); }
static uint64_t m_fz_fault(void) { return m_fz(3); }
static uint64_t m_fz_runtime(void) { return m_fz(4); }
static uint64_t m_fz_ns(void) { return m_fz(5); }
static uint64_t m_fz_freezes(void) { return m_fz(6); }
static uint64_t m_fz_cancelled(void) { return m_fz(7); }
static uint64_t m_fz_stray(void) { return m_fz(8); }
static uint64_t m_fz_mode(void) { return m_fz(9); }
static uint64_t m_fz_off(void) { return m_fz(10); }
static uint64_t m_fz_thaws(void) { return m_fz(11); }
static uint64_t m_fz_thaw_ns(void) { return m_fz(12); }
static uint64_t m_fz_windows(void) { return m_fz(13); }

static const struct {
    const char *name;
    metrics_get get;
} metrics_table[] = {
    {"/tasks/live:tasks", m_live},
    {"/tasks/runnable:tasks", m_runnable},
    {"/tasks/blocked:tasks", m_blocked},
    {"/tasks/spawned:tasks", m_spawned},
    {"/sched/workers:threads", m_workers},
    {"/stacks/reserved:bytes", mote__stack_reserved_bytes},
    {"/stacks/resident:bytes", mote__stack_resident_bytes},
    {"/stacks/in-use:stacks", m_in_use},
    {"/stacks/pooled:stacks", m_pooled},
    {"/stacks/trimmed:bytes", m_trimmed},
    {"/stacks/guard-madvise:bool", m_guard},
    {"/stacks/frozen:tasks", m_fz_tasks},
    {"/stacks/frozen:bytes", m_fz_bytes},
    {"/stacks/thaws:events", m_fz_thaws},
    {"/stacks/thaws/resume:events", m_fz_resume},
    {"/stacks/thaws/fault:events", m_fz_fault},
    {"/stacks/thaws/runtime:events", m_fz_runtime},
    {"/stacks/thaws/time:ns", m_fz_thaw_ns},
    {"/stacks/freeze/cpu:ns", m_fz_ns},
    {"/stacks/freeze/windows:events", m_fz_windows},
    {"/stacks/freeze/freezes:events", m_fz_freezes},
    {"/stacks/freeze/cancelled:events", m_fz_cancelled},
    {"/stacks/freeze/stray-faults:events", m_fz_stray},
    {"/stacks/freeze/mode:enum", m_fz_mode},
    {"/stacks/freeze/off-reason:enum", m_fz_off},
    {"/net/fds:fds", mote__netpoll_fds},
    {"/net/waiting:tasks", mote__netpoll_waiting},
    {"/net/polls:events", m_polls},
    {"/net/poll-events:events", m_poll_events},
    {"/net/wake-latency/le-10us:events", m_wake0},
    {"/net/wake-latency/le-100us:events", m_wake1},
    {"/net/wake-latency/le-1ms:events", m_wake2},
    {"/net/wake-latency/le-10ms:events", m_wake3},
    {"/net/wake-latency/gt-10ms:events", m_wake4},
    {"/blocking/threads:threads", mote__offload_threads},
    {"/blocking/queued:calls", mote__offload_queued},
    {"/sched/stalls:events", mote__monitor_stalls},
    {"/process/rss:bytes", m_rss},
    {"/process/rss-peak:bytes", m_hwm},
    {"/process/pagetables:bytes", m_pte},
};

#define METRICS_N (sizeof metrics_table / sizeof metrics_table[0])

/* "/stacks/highwater/le-8KiB:tasks": live tasks whose stack high water, as
 * last measured by a trim, is at most 8 KiB (and above the bucket below). */
static void metrics_hw_name(int b, char *buf, size_t len)
{
    uint64_t kib = 4ull << b;
    if (kib >= 1024 * 1024)
        snprintf(buf, len, "/stacks/highwater/le-%lluGiB:tasks",
                 (unsigned long long)(kib >> 20));
    else if (kib >= 1024)
        snprintf(buf, len, "/stacks/highwater/le-%lluMiB:tasks",
                 (unsigned long long)(kib >> 10));
    else
        snprintf(buf, len, "/stacks/highwater/le-%lluKiB:tasks", (unsigned long long)kib);
}

int mote_metric(const char *name, uint64_t *value)
{
    if (!name || !value)
        return -EINVAL;
    for (size_t i = 0; i < METRICS_N; i++)
        if (!strcmp(name, metrics_table[i].name)) {
            *value = metrics_table[i].get();
            return 0;
        }
    if (!strncmp(name, "/stacks/highwater/", 18)) {
        for (int b = 0; b < TRIM_NBUCKET; b++) {
            char n[64];
            metrics_hw_name(b, n, sizeof n);
            if (!strcmp(name, n)) {
                sched_stats s;
                mote__sched_stats_read(&s);
                *value = s.highwater[b];
                return 0;
            }
        }
        return -ENOENT;
    }
    return mote__heap_metric(name, value);
}

int mote_metric_each(void (*fn)(const char *, uint64_t, void *), void *ctx)
{
    if (!fn)
        return -EINVAL;
    for (size_t i = 0; i < METRICS_N; i++)
        fn(metrics_table[i].name, metrics_table[i].get(), ctx);
    sched_stats s;
    mote__sched_stats_read(&s);
    for (int b = 0; b < TRIM_NBUCKET; b++) {
        char n[64];
        metrics_hw_name(b, n, sizeof n);
        fn(n, s.highwater[b], ctx);
    }
    mote__heap_metric_each(fn, ctx);
    return 0;
}

typedef struct metrics_out {
    FILE *f;
    int json;
    int n;
} metrics_out;

static void metrics_emit(const char *name, uint64_t v, void *ctx)
{
    metrics_out *o = ctx;
    if (o->json)
        fprintf(o->f, "%s\n  \"%s\": %llu", o->n ? "," : "", name, (unsigned long long)v);
    else
        fprintf(o->f, "%s %llu\n", name, (unsigned long long)v);
    o->n++;
}

int mote_metrics_print(int fd, int format)
{
    if (format != MOTE_METRICS_TEXT && format != MOTE_METRICS_JSON)
        return -EINVAL;
    report r; /* whole, then write(2): the error of writing comes back */
    if (mote__report_open(&r))
        return -ENOMEM;
    metrics_out o = {r.f, format == MOTE_METRICS_JSON, 0};
    if (o.json)
        fputc('{', r.f);
    mote_metric_each(metrics_emit, &o);
    if (o.json)
        fputs("\n}\n", r.f);
    return mote__report_write(&r, fd);
}
