/*
 * stats.c - the heap's numbers: the /heap/... metrics read by mote_metric,
 * and the table MOTE_MALLOC_STATS prints at exit.  Reads only atomics and
 * immortal caches, so it is safe from any thread without a lock; figures
 * are a consistent-enough snapshot, not an atomic one.
 *   inuse    bytes in blocks handed out (small: blocks out of their pages
 *            x class size, from a walk of the segments under the arena
 *            lock, where a block freed by another thread counts until its
 *            owner collects it, unless it waits in a foreign list; large
 *            and huge: their usable size)
 *   mapped   address space mapped for the heap (segments + huge blocks)
 *   released free slices returned to the OS or never touched
 *   free     mapped - inuse - released: held by mote, possibly resident
 * The heap profiler is profile.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "heap/heap.h"
#include "heap/internal.h"
#include "os/os.h"

typedef struct stats_snap {
    heap_small_usage u;
    uint64_t inuse, mapped, released, free, caches, kept, kept_huge;
    heap_arena_stats a;
} stats_snap;

static void stats_take(stats_snap *s)
{
    memset(s, 0, sizeof *s);
    mote__arena_small_usage(&s->u);
    /* A block in a foreign or recent list or a stash is free, though its
     * page counts it. */
    for (heap_tcache *h = mote__tcache_all(); h; h = h->all_next) {
        s->caches++;
        for (unsigned c = 1; c < HEAP_NCLS; c++) {
            uint64_t n = mote__tcache_listed_count(h, c);
            n = n < s->u.blocks[c] ? n : s->u.blocks[c];
            s->u.blocks[c] -= n;
            s->u.bytes[c] -= n * mote__sizeclass_size[c];
        }
    }
    uint64_t small = 0;
    for (unsigned c = 1; c < HEAP_NCLS; c++)
        small += s->u.bytes[c];
    mote__arena_stats(&s->a);
    /* A big block a thread keeps freed (runcache.c) is free, though the
     * arena counts it. */
    heap_runcache_totals rt;
    mote__runcache_totals(&rt);
    s->a.large_inuse += rt.grew_large; /* (mod 2^64: what the arena's counts lack) */
    s->a.huge_inuse += rt.grew_huge;
    s->kept = rt.kept_large;
    s->kept_huge = rt.kept_huge;
    s->a.large_inuse -=
        rt.kept_large < s->a.large_inuse ? rt.kept_large : s->a.large_inuse;
    s->a.huge_inuse -= rt.kept_huge < s->a.huge_inuse ? rt.kept_huge : s->a.huge_inuse;
    s->a.huge_count -=
        rt.kept_huge_n < s->a.huge_count ? rt.kept_huge_n : s->a.huge_count;
    s->inuse = small + s->a.large_inuse + s->a.huge_inuse;
    s->mapped = s->a.mapped;
    s->released = s->a.released < s->mapped ? s->a.released : s->mapped;
    uint64_t held = s->mapped - s->released;
    if (s->inuse > held)
        s->inuse = held; /* counters raced: never report more than held */
    s->free = held - s->inuse;
}

static const char *const stats_names[] = {"/heap/inuse:bytes", "/heap/free:bytes",
                                          "/heap/released:bytes", "/heap/mapped:bytes"};

static uint64_t stats_value(const stats_snap *s, unsigned i)
{
    switch (i) {
    case 0: return s->inuse;
    case 1: return s->free;
    case 2: return s->released;
    default: return s->mapped;
    }
}

int mote__heap_metric(const char *name, uint64_t *value)
{
    if (!name || !value)
        return -EINVAL;
    for (unsigned i = 0; i < 4; i++) {
        if (!strcmp(name, stats_names[i])) {
            stats_snap s;
            stats_take(&s);
            *value = stats_value(&s, i);
            return 0;
        }
    }
    return -ENOENT;
}

void mote__heap_metric_each(void (*fn)(const char *name, uint64_t value, void *ctx),
                            void *ctx)
{
    stats_snap s;
    stats_take(&s);
    for (unsigned i = 0; i < 4; i++)
        fn(stats_names[i], stats_value(&s, i), ctx);
}

void mote__stats_summary(heap_summary *out)
{
    stats_snap s;
    stats_take(&s);
    *out = (heap_summary){.inuse = s.inuse,
                          .free = s.free,
                          .released = s.released,
                          .mapped = s.mapped,
                          .huge_inuse = s.a.huge_inuse,
                          .huge_count = s.a.huge_count};
}

/* stdio may allocate; the table is built with snprintf into a static
 * buffer (under stats_lock: malloc_stats may be called from any thread)
 * and written with write(2). */
static char stats_buf[16384];
static heap_lock stats_lock = HEAP_LOCK_INIT;

/* Not taken across fork: a printer may block in write(2) for as long as
 * its reader likes (stderr a full pipe: a fork waited for it); the child,
 * which has no printer, starts with it free (its malloc_stats hung when it
 * inherited it held). */
void mote__stats_fork_child(void) { STORE(&stats_lock.v, 0, RELEASE); }

void mote__stats_print(bool json)
{
    stats_snap s;
    stats_take(&s);
    heap_lock_acquire(&stats_lock);
    size_t n = 0, cap = sizeof stats_buf;
#define OUT(...)                                                        \
    do {                                                                \
        if (n < cap)                                                    \
            n += (size_t)snprintf(stats_buf + n, cap - n, __VA_ARGS__); \
    } while (0)
    if (json) {
        OUT("{\"inuse\":%llu,\"free\":%llu,\"released\":%llu,\"mapped\":%llu,"
            "\"segments\":%llu,\"huge\":%llu,\"large_inuse\":%llu,\"huge_inuse\":%llu,"
            "\"decommits\":%llu,\"released_total\":%llu,\"thread_caches\":%llu,"
            "\"kept_large_bytes\":%llu,\"kept_huge_bytes\":%llu,"
            "\"cached_blocks\":%llu,\"cached_bytes\":%llu,\"cache_hits\":%llu,"
            "\"cache_misses\":%llu,\"released_inside_pages_total\":%llu,"
            "\"decay_ms\":%u,\"limit\":%llu,\"classes\":[",
            (unsigned long long)s.inuse, (unsigned long long)s.free,
            (unsigned long long)s.released, (unsigned long long)s.mapped,
            (unsigned long long)s.a.segments, (unsigned long long)s.a.huge_count,
            (unsigned long long)s.a.large_inuse, (unsigned long long)s.a.huge_inuse,
            (unsigned long long)s.a.decommits, (unsigned long long)s.a.released_total,
            (unsigned long long)s.caches, (unsigned long long)s.kept,
            (unsigned long long)s.kept_huge, (unsigned long long)s.a.cache_count,
            (unsigned long long)s.a.cache_bytes, (unsigned long long)s.a.cache_hits,
            (unsigned long long)s.a.cache_misses, (unsigned long long)s.a.purged_total,
            mote__heap_cfg.decay_ms, (unsigned long long)mote__heap_cfg.limit);
        bool first = true;
        for (unsigned c = 1; c < HEAP_NCLS; c++) {
            if (!s.u.pages[c])
                continue;
            OUT("%s{\"size\":%u,\"pages\":%llu,\"live\":%llu,\"live_bytes\":%llu}",
                first ? "" : ",", mote__sizeclass_size[c],
                (unsigned long long)s.u.pages[c], (unsigned long long)s.u.blocks[c],
                (unsigned long long)s.u.bytes[c]);
            first = false;
        }
        OUT("]}\n");
    } else {
        OUT("mote malloc stats (pid %d)\n", (int)getpid());
        OUT("%10s %10s %14s %14s %8s\n", "class", "pages", "live blocks", "live bytes",
            "used%");
        for (unsigned c = 1; c < HEAP_NCLS; c++) {
            if (!s.u.pages[c])
                continue;
            uint64_t cap = s.u.pages[c] * mote__sizeclass_slices[c] * HEAP_SLICE_SIZE;
            OUT("%10u %10llu %14llu %14llu %7.1f%%\n", mote__sizeclass_size[c],
                (unsigned long long)s.u.pages[c], (unsigned long long)s.u.blocks[c],
                (unsigned long long)s.u.bytes[c],
                cap ? 100.0 * (double)s.u.bytes[c] / (double)cap : 0.0);
        }
        OUT("%-22s %14llu\n", "large+huge inuse bytes",
            (unsigned long long)(s.a.large_inuse + s.a.huge_inuse));
        OUT("%-22s %14llu\n", "inuse bytes", (unsigned long long)s.inuse);
        OUT("%-22s %14llu\n", "free bytes", (unsigned long long)s.free);
        OUT("%-22s %14llu\n", "released bytes", (unsigned long long)s.released);
        OUT("%-22s %14llu\n", "mapped bytes", (unsigned long long)s.mapped);
        OUT("%-22s %14llu\n", "segments", (unsigned long long)s.a.segments);
        OUT("%-22s %14llu\n", "huge blocks", (unsigned long long)s.a.huge_count);
        OUT("%-22s %14llu\n", "decommit calls", (unsigned long long)s.a.decommits);
        OUT("%-22s %14llu\n", "released total bytes",
            (unsigned long long)s.a.released_total);
        OUT("%-22s %14llu\n", "thread caches", (unsigned long long)s.caches);
        OUT("%-22s %14llu\n", "kept large bytes", (unsigned long long)s.kept);
        OUT("%-22s %14llu\n", "kept huge bytes", (unsigned long long)s.kept_huge);
        OUT("%-22s %14llu\n", "cached big blocks", (unsigned long long)s.a.cache_count);
        OUT("%-22s %14llu\n", "cached big bytes", (unsigned long long)s.a.cache_bytes);
        OUT("%-22s %14llu\n", "big cache hits", (unsigned long long)s.a.cache_hits);
        OUT("%-22s %14llu\n", "big cache misses", (unsigned long long)s.a.cache_misses);
        OUT("%-22s %14llu\n", "released inside pages",
            (unsigned long long)s.a.purged_total);
    }
#undef OUT
    if (n > cap - 1)
        n = cap - 1;
    stats_buf[n] = 0;
    mote__os_write_err(stats_buf);
    heap_lock_release(&stats_lock);
}
