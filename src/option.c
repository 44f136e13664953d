/*
 * option.c - the MOTE_* table and its parsers (see option.h).  State: per
 * option, a hash of the invalid value last reported, so a variable read by
 * both the allocator and mote_run is reported once, and a new invalid
 * value (set between two runs) again.  getenv and
 * snprintf with these formats do not allocate, so the allocator may read
 * its options while it starts.
 */
#include "option.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "atomic.h"
#include "os/os.h"
#include "stack.h"

#define MAX_WORKERS 1024

const mote__option mote__options[OPT_COUNT] = {
    [OPT_WORKERS] = {.name = "MOTE_WORKERS",
                     .kind = OPT_KIND_COUNT,
                     .scope = OPT_RUNTIME,
                     .min = 1,
                     .max = MAX_WORKERS,
                     .def = 0,
                     .def_doc = "online CPUs",
                     .doc = "worker threads (1-1024)",
                     .expect = "a whole number of worker threads from 1 to 1024"},
    [OPT_STACK_SIZE] =
        {.name = "MOTE_STACK_SIZE",
         .kind = OPT_KIND_SIZE,
         .scope = OPT_RUNTIME,
         .min = STACK_MIN,
         .max = STACK_MAX,
         .def = 256 * 1024,
         .def_doc = "256K",
         .doc = "default maximum stack per task, 8K-1G, K/M/G suffixes; rounded "
                "up to a power of two",
         .expect = "a size from 8K to 1G (suffixes K, M, G)"},
    [OPT_STACK_TRIM] = {.name = "MOTE_STACK_TRIM",
                        .kind = OPT_KIND_CHOICE,
                        .scope = OPT_RUNTIME,
                        .choices = "off,lazy,eager",
                        .def = 1,
                        .def_doc = "lazy",
                        .doc =
                            "`off`, `lazy` (parked 20 ms, 160 ms after an I/O wake-up, "
                            "longer for a task that keeps going deep), `eager` (at once)",
                        .expect = "off, lazy or eager"},
    [OPT_STACK_GUARD] =
        {.name = "MOTE_STACK_GUARD",
         .kind = OPT_KIND_CHOICE,
         .scope = OPT_RUNTIME,
         .choices = "auto,mprotect",
         .def = 0,
         .def_doc = "auto",
         .doc = "how guard pages are made: `auto` (MADV_GUARD_INSTALL where the "
                "kernel has it, else mprotect) or `mprotect` (one mapping per "
                "stack: vm.max_map_count then caps live tasks)",
         .expect = "auto or mprotect"},
    [OPT_STACK_FREEZE] = {.name = "MOTE_STACK_FREEZE",
                          .kind = OPT_KIND_DURATION,
                          .scope = OPT_RUNTIME,
                          .off_ok = true,
                          .min = 1000000,
                          .max = 3600000000000ull,
                          .def = 1000000000,
                          .def_doc = "1s",
                          .doc =
                              "how long a task stays parked before its stack is frozen "
                              "(copied out, its pages given back, put back when needed), "
                              "`off` for never; on only where the kernel allows a full "
                              "userfaultfd (see Frozen stacks)",
                          .expect = "a duration from 1ms to 1h (500ms, 2s, 1m), or off"},
    [OPT_MEMLIMIT] =
        {.name = "MOTE_MEMLIMIT",
         .kind = OPT_KIND_SIZE,
         .scope = OPT_HEAP,
         .off_ok = true,
         .min = 1,
         .max = UINT64_MAX,
         .def = OPT_OFF,
         .def_doc = "off",
         .doc =
             "memory limit for the process (stacks, heap and the rest of its RSS): "
             "near it everything free is returned, past it `mote_go` and malloc fail "
             "with ENOMEM (the heap keeps at least 1/16 of it, so the process may pass "
             "it by that much; the RSS is re-read every 10 ms); `off` for none",
         .expect = "a size in bytes above 0 (suffixes K, M, G, T), or off"},
    [OPT_MALLOC_DECAY_MS] =
        {.name = "MOTE_MALLOC_DECAY_MS",
         .kind = OPT_KIND_MS,
         .scope = OPT_HEAP,
         .min = 0,
         .max = 3600000,
         .def = 500,
         .def_doc = "500",
         .doc = "how long freed heap pages stay before the scavenger returns "
                "them (ms)",
         .expect = "milliseconds, a whole number from 0 to 3600000"},
    [OPT_BLOCKING_THREADS] =
        {.name = "MOTE_BLOCKING_THREADS",
         .kind = OPT_KIND_COUNT,
         .scope = OPT_RUNTIME,
         .min = 1,
         .max = 65536,
         .def = 64,
         .def_doc = "64",
         .doc = "most threads of the pool that runs `mote_offload` calls "
                "and file I/O (it grows on demand and shrinks when idle; "
                "at the cap calls queue)",
         .expect = "a whole number of threads from 1 to 65536"},
    [OPT_DEBUG] = {.name = "MOTE_DEBUG",
                   .kind = OPT_KIND_CHOICE,
                   .scope = OPT_RUNTIME,
                   .choices = "off,stalls",
                   .def = 0,
                   .def_doc = "off",
                   .doc = "`stalls`: report each stall on stderr, with the task's name "
                          "and backtrace (a task that runs 10 ms without parking, or a "
                          "worker stuck in a blocking system call)",
                   .expect = "off or stalls"},
    [OPT_SIGQUIT] = {.name = "MOTE_SIGQUIT",
                     .kind = OPT_KIND_CHOICE,
                     .scope = OPT_RUNTIME,
                     .choices = "off,dump",
                     .def = 0,
                     .def_doc = "off",
                     .doc = "`dump`: during a run, SIGQUIT writes every task "
                            "(`mote_tasks_dump`) to stderr and the program goes on "
                            "(between runs SIGQUIT does what it did before)",
                     .expect = "off or dump"},
    [OPT_MALLOC_STATS] =
        {.name = "MOTE_MALLOC_STATS",
         .kind = OPT_KIND_CHOICE,
         .scope = OPT_HEAP,
         .choices = "0,1,json,text",
         .def = 0,
         .def_doc = "0",
         .doc = "`1` (or `text`) or `json`: print allocator statistics at exit",
         .expect = "0, 1, text or json"},
    [OPT_MALLOC_HUGEPAGES] =
        {.name = "MOTE_MALLOC_HUGEPAGES",
         .kind = OPT_KIND_CHOICE,
         .scope = OPT_HEAP,
         .choices = "off,on",
         .def = 0,
         .def_doc = "off",
         .doc = "`on`: blocks over 2 MiB (but calloc's) ask for transparent huge pages "
                "(where the kernel's THP mode is `madvise`): fewer TLB misses and one "
                "fault per 2 MiB, but a first touch that may take milliseconds where "
                "the host reclaims free memory (a VM with free page reporting), and up "
                "to 2 MiB of RSS per region touched; `off` leaves the system default",
         .expect = "off or on"},
    [OPT_HEAPPROFILE] =
        {.name = "MOTE_HEAPPROFILE",
         .kind = OPT_KIND_PATH,
         .scope = OPT_HEAP,
         .max = 3999, /* HEAP_PROF_PATH_MAX - 1: with "%p" expanded, a file name */
         .def = 0,
         .def_doc = "unset (off)",
         .doc =
             "sample allocations and write a heap profile (in-use and allocated bytes by "
             "call stack, for `go tool pprof`) to this file at exit and on "
             "`mote_heap_profile_write`; `%p` in it is replaced by the process id",
         .expect = "a file name of 1 to 3999 bytes"},
    [OPT_HEAPPROFILE_RATE] =
        {.name = "MOTE_HEAPPROFILE_RATE",
         .kind = OPT_KIND_SIZE,
         .scope = OPT_HEAP,
         .min = 1,
         .max = 1ULL << 30,
         .def = 512 * 1024,
         .def_doc = "512K",
         .doc =
             "mean bytes allocated between two sampled allocations of the heap profiler, "
             "1-1G, K/M/G suffixes",
         .expect = "a size from 1 to 1G (suffixes K, M, G)"},
    [OPT_HEAPPROFILE_SIGNAL] =
        {.name = "MOTE_HEAPPROFILE_SIGNAL",
         .kind = OPT_KIND_CHOICE,
         .scope = OPT_HEAP,
         .choices = "off,usr1,usr2,sigusr1,sigusr2",
         .def = 0,
         .def_doc = "off",
         .doc = "`usr1` or `usr2`: with `MOTE_HEAPPROFILE` set, each SIGUSR1 (SIGUSR2) "
                "writes a profile to that file name followed by `.1`, `.2`, ... and "
                "the program goes on, so a running program can be profiled without "
                "a change",
         .expect = "off, usr1 or usr2"},
};

static uint64_t option_reported[OPT_COUNT]; /* option_hash of the value; atomic */

/* FNV-1a, never 0 (0: nothing reported yet). */
static uint64_t option_hash(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h | 1;
}

static int parse_digits(const char **sp, uint64_t *out)
{
    const char *s = *sp;
    uint64_t v = 0;
    if (*s < '0' || *s > '9')
        return -EINVAL;
    for (; *s >= '0' && *s <= '9'; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
    }
    *sp = s;
    *out = v;
    return 0;
}

int mote__parse_count(const char *s, uint64_t *out)
{
    uint64_t v;
    int r = parse_digits(&s, &v);
    if (r)
        return r;
    if (*s)
        return -EINVAL;
    *out = v;
    return 0;
}

int mote__parse_size(const char *s, uint64_t *out)
{
    uint64_t v;
    int r = parse_digits(&s, &v);
    if (r)
        return r;
    unsigned shift = 0;
    switch (*s) {
    case 'k':
    case 'K':
        shift = 10;
        s++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        s++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        s++;
        break;
    case 't':
    case 'T':
        shift = 40;
        s++;
        break;
    default: break;
    }
    if (shift && (*s == 'i' || *s == 'I'))
        s++;
    if (*s == 'b' || *s == 'B')
        s++;
    if (*s)
        return -EINVAL;
    if (shift && v > (UINT64_MAX >> shift))
        return -ERANGE;
    *out = v << shift;
    return 0;
}

int mote__parse_duration(const char *s, uint64_t *out_ns)
{
    static const struct {
        const char *unit;
        uint64_t ns;
    } units[] = {{"ns", 1},         {"us", 1000},          {"ms", 1000000},
                 {"s", 1000000000}, {"m", 60000000000ull}, {"h", 3600000000000ull}};
    uint64_t v;
    int r = parse_digits(&s, &v);
    if (r)
        return r;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(s, units[i].unit) == 0) {
            if (v > UINT64_MAX / units[i].ns)
                return -ERANGE;
            *out_ns = v * units[i].ns;
            return 0;
        }
    }
    return -EINVAL;
}

/* Index of word in a comma-separated list (case-insensitive), or -1. */
static int choice_index(const char *choices, const char *word)
{
    size_t wl = strlen(word);
    int i = 0;
    for (const char *p = choices; *p; i++) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == wl && strncasecmp(p, word, l) == 0)
            return i;
        if (!e)
            break;
        p = e + 1;
    }
    return -1;
}

static int option_parse(const mote__option *o, const char *s, uint64_t *out)
{
    if (o->off_ok && strcasecmp(s, "off") == 0) {
        *out = OPT_OFF;
        return 0;
    }
    uint64_t v;
    int r;
    switch (o->kind) {
    case OPT_KIND_COUNT:
    case OPT_KIND_MS: r = mote__parse_count(s, &v); break;
    case OPT_KIND_SIZE: r = mote__parse_size(s, &v); break;
    case OPT_KIND_DURATION: r = mote__parse_duration(s, &v); break;
    case OPT_KIND_PATH:
        if (!*s)
            return -EINVAL;
        if (strnlen(s, o->max + 1) > o->max)
            return -ERANGE;
        *out = 1;
        return 0;
    case OPT_KIND_CHOICE: {
        int i = choice_index(o->choices, s);
        if (i < 0)
            return -EINVAL;
        *out = (uint64_t)i;
        return 0;
    }
    default: return -EINVAL;
    }
    if (r)
        return r;
    if (v < o->min || v > o->max)
        return -ERANGE;
    *out = v;
    return 0;
}

static uint64_t option_default(enum mote__opt id)
{
    if (id == OPT_WORKERS) {
        int n = mote__os_ncpus();
        return n > MAX_WORKERS ? MAX_WORKERS : (uint64_t)n;
    }
    return mote__options[id].def;
}

int mote__option_read(enum mote__opt id, uint64_t *out)
{
    const mote__option *o = &mote__options[id];
    const char *s = getenv(o->name);
    *out = option_default(id);
    if (!s)
        return 0;
    uint64_t v;
    if (option_parse(o, s, &v) == 0) {
        *out = v;
        return 0;
    }
    uint64_t h = option_hash(s);
    if (XCHG(&option_reported[id], h, RELAXED) != h) {
        char msg[512];
        snprintf(msg, sizeof msg, "mote: %s=\"%.80s\" is invalid: expected %s%s\n",
                 o->name, s, o->expect,
                 o->scope == OPT_HEAP ? " (the allocator keeps its default; "
                                        "mote_run refuses to start)"
                                      : "");
        mote__os_write_err(msg);
    }
    return -EINVAL;
}

bool mote__option_is_set(enum mote__opt id)
{
    return getenv(mote__options[id].name) != NULL;
}

int mote__option_check_all(void)
{
    int r = 0;
    for (int i = 0; i < OPT_COUNT; i++) {
        uint64_t v;
        if (mote__option_read((enum mote__opt)i, &v))
            r = -EINVAL;
    }
    return r;
}
