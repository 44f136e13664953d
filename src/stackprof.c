/*
 * stackprof.c - per-entry stack depths (see stackprof.h) and
 * mote_stack_report.  Each worker counts into its own open-addressing
 * table (no lock, single writer); runs that ended leave their figures in a
 * global table under a mutex; the report merges both.
 */
#include "stackprof.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "atomic.h"
#include "os/os.h"
#include "report.h"
#include "runtime.h"

#define rt mote__rt

static uint64_t stackprof_entry_reserve; /* atomic: top - entry caller rsp */
static pthread_mutex_t stackprof_lock = PTHREAD_MUTEX_INITIALIZER;
static stackprof stackprof_done; /* runs that ended, under the lock */

static uint32_t stackprof_hash(mote_fn fn)
{
    uint64_t x = (uint64_t)(uintptr_t)fn * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(x >> 56); /* STACKPROF_SLOTS == 256 */
}

/* fn's slot in p, created when create; NULL when full or absent. */
static stackprof_entry *stackprof_slot(stackprof *p, mote_fn fn, bool create, bool *fresh)
{
    uint32_t h = stackprof_hash(fn);
    for (uint32_t i = 0; i < STACKPROF_SLOTS; i++) {
        stackprof_entry *e = &p->e[(h + i) % STACKPROF_SLOTS];
        mote_fn f = LOAD(&e->fn, ACQUIRE);
        if (f == fn)
            return e;
        if (!f) {
            if (!create)
                return NULL;
            STORE(&e->fn, fn, RELEASE);
            p->n++;
            *fresh = true;
            return e;
        }
    }
    p->overflow++;
    return NULL;
}

bool mote__stackprof_start(stackprof *p, mote_fn fn, uint64_t stack_size)
{
    bool fresh = false;
    stackprof_entry *e = stackprof_slot(p, fn, true, &fresh);
    if (!e)
        return false;
    COUNT(&e->tasks, 1);
    if (stack_size > LOAD(&e->stack_size, RELAXED))
        STORE(&e->stack_size, stack_size, RELAXED);
    return fresh;
}

void mote__stackprof_depth(stackprof *p, mote_fn fn, uint64_t depth_from_top)
{
    bool fresh = false;
    stackprof_entry *e = stackprof_slot(p, fn, false, &fresh);
    uint64_t reserve = LOAD(&stackprof_entry_reserve, RELAXED);
    if (!e || !reserve || depth_from_top <= reserve)
        return;
    uint64_t d = depth_from_top - reserve;
    COUNT(&e->sampled, 1);
    if (d > LOAD(&e->max_depth, RELAXED))
        STORE(&e->max_depth, d, RELAXED);
}

void mote__stackprof_note_entry(uintptr_t top, uintptr_t rsp)
{
    if (!LOAD(&stackprof_entry_reserve, RELAXED))
        STORE(&stackprof_entry_reserve, (uint64_t)(top - rsp), RELAXED);
}

static void stackprof_merge(stackprof *into, const stackprof *from)
{
    for (uint32_t i = 0; i < STACKPROF_SLOTS; i++) {
        const stackprof_entry *s = &from->e[i];
        mote_fn fn = LOAD(&s->fn, ACQUIRE);
        if (!fn)
            continue;
        bool fresh = false;
        stackprof_entry *d = stackprof_slot(into, fn, true, &fresh);
        if (!d)
            continue;
        d->tasks += LOAD(&s->tasks, RELAXED);
        d->sampled += LOAD(&s->sampled, RELAXED);
        uint64_t md = LOAD(&s->max_depth, RELAXED), ss = LOAD(&s->stack_size, RELAXED);
        if (md > d->max_depth)
            d->max_depth = md;
        if (ss > d->stack_size)
            d->stack_size = ss;
    }
}

void mote__stackprof_fold(stackprof *p)
{
    pthread_mutex_lock(&stackprof_lock);
    stackprof_merge(&stackprof_done, p);
    pthread_mutex_unlock(&stackprof_lock);
}

/* JSON string body: the names here are paths and symbols, but escape what
 * JSON needs anyway. */
static void stackprof_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

int mote_stack_report(int fd)
{
    if (fd < 0)
        return -EBADF;
    static stackprof all; /* under stackprof_lock */
    /* Lock order: ext_lock, then stackprof_lock (teardown folds so). */
    pthread_rwlock_rdlock(&rt.ext_lock);
    pthread_mutex_lock(&stackprof_lock);
    memcpy(&all, &stackprof_done, sizeof all);
    worker *ws = LOAD(&rt.w, ACQUIRE);
    for (int i = 0; ws && i < rt.nworkers; i++)
        stackprof_merge(&all, &ws[i].stackprof);
    pthread_rwlock_unlock(&rt.ext_lock);

    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    report rep;
    if (mote__report_open(&rep)) {
        pthread_mutex_unlock(&stackprof_lock);
        return -ENOMEM;
    }
    FILE *f = rep.f;
    fprintf(f, "{\"mote_stack_report\":1,\"exe\":");
    stackprof_json_str(f, exe);
    fprintf(f, ",\"entries\":[");
    bool first = true;
    for (uint32_t i = 0; i < STACKPROF_SLOTS; i++) {
        const stackprof_entry *e = &all.e[i];
        if (!e->fn)
            continue;
        Dl_info info;
        struct link_map *map = NULL;
        char name[256];
        const char *object = exe;
        uintptr_t addr = (uintptr_t)e->fn, bias = 0;
        if (dladdr1((void *)addr, &info, (void **)&map, RTLD_DL_LINKMAP)) {
            if (map && map->l_name && map->l_name[0])
                object = map->l_name;
            bias = map ? (uintptr_t)map->l_addr : (uintptr_t)info.dli_fbase;
        }
        if (!mote__os_symbol_name((void *)addr, name, sizeof name))
            snprintf(name, sizeof name, "%p", (void *)addr);
        fprintf(f, "%s\n  {\"name\":", first ? "" : ",");
        stackprof_json_str(f, name);
        fprintf(f, ",\"object\":");
        stackprof_json_str(f, object);
        fprintf(f,
                ",\"offset\":\"0x%llx\",\"tasks\":%llu,\"sampled\":%llu,"
                "\"max_depth\":%llu,\"stack_size\":%llu}",
                (unsigned long long)(addr - bias), (unsigned long long)e->tasks,
                (unsigned long long)e->sampled, (unsigned long long)e->max_depth,
                (unsigned long long)e->stack_size);
        first = false;
    }
    fprintf(f, "\n]}\n");
    pthread_mutex_unlock(&stackprof_lock);
    return mote__report_write(&rep, fd);
}
