/*
 * option.h - every MOTE_* environment variable in one table: its name, kind,
 * range, default and documentation.  The runtime (mote_run) and the
 * allocator (at its start, also inside libmote-malloc.so) read their values
 * through it, so every variable has exactly one parser and one error
 * message, and the README's configuration table is checked against it
 * (tests/test_option.c).
 *
 * Rules: an invalid value is never silently replaced.  It is reported on
 * stderr once per process; mote_run then returns -EINVAL.  The allocator,
 * which cannot fail a malloc for a bad variable, keeps its default and says
 * so in the same message.  Reading is malloc-free and thread-safe.
 */
#ifndef MOTE_OPTION_H
#define MOTE_OPTION_H

#include <stdbool.h>
#include <stdint.h>

enum mote__opt {
    OPT_WORKERS,
    OPT_STACK_SIZE,
    OPT_STACK_TRIM,
    OPT_STACK_GUARD,
    OPT_STACK_FREEZE,
    OPT_MEMLIMIT,
    OPT_MALLOC_DECAY_MS,
    OPT_MALLOC_STATS,
    OPT_MALLOC_HUGEPAGES,
    OPT_BLOCKING_THREADS,
    OPT_DEBUG,
    OPT_SIGQUIT,
    OPT_HEAPPROFILE,
    OPT_HEAPPROFILE_RATE,
    OPT_HEAPPROFILE_SIGNAL,
    OPT_COUNT
};

enum mote__opt_kind {
    OPT_KIND_COUNT,    /* a whole number, decimal digits only */
    OPT_KIND_SIZE,     /* bytes, with an optional K/M/G/T suffix */
    OPT_KIND_MS,       /* milliseconds, digits only */
    OPT_KIND_DURATION, /* a number with a unit: ns, us, ms, s, m, h */
    OPT_KIND_CHOICE,   /* one word of a list: the value is its index */
    OPT_KIND_PATH,     /* a file name, a non-empty string of at most max
                          bytes: the value is 1 when set (read the string
                          with getenv) */
};

/* Value of an option set to "off" where that is allowed: no limit, never. */
#define OPT_OFF UINT64_MAX

/* Who reads the variable: mote_run, or the allocator at its start. */
enum mote__opt_scope { OPT_RUNTIME, OPT_HEAP };

typedef struct mote__option {
    const char *name;    /* "MOTE_WORKERS" */
    uint8_t kind;        /* enum mote__opt_kind */
    uint8_t scope;       /* enum mote__opt_scope */
    bool off_ok;         /* "off" is accepted, as OPT_OFF */
    uint64_t min, max;   /* inclusive range of numeric kinds; a path's
                            longest length */
    const char *choices; /* OPT_KIND_CHOICE: "off,lazy,eager" */
    uint64_t def;        /* default value; see mote__option_read */
    const char *def_doc; /* the default as the README states it */
    const char *doc;     /* what it sets, as the README states it */
    const char *expect;  /* what a valid value looks like, for errors */
} mote__option;

extern const mote__option mote__options[OPT_COUNT];

/* Reads option id from the environment into *out (its default when unset).
 * 0, or -EINVAL when the value is invalid (reported once per process, *out
 * then holds the default). */
int mote__option_read(enum mote__opt id, uint64_t *out);

/* Whether the variable is set at all (a default was not asked for). */
bool mote__option_is_set(enum mote__opt id);

/* Reads every option: 0, or -EINVAL if any is invalid (each reported once).
 * mote_run calls it so that the allocator's variables fail a run too. */
int mote__option_check_all(void);

/* The parsers, exposed for tests: 0, -EINVAL or -ERANGE. */
int mote__parse_count(const char *s, uint64_t *out);
int mote__parse_size(const char *s, uint64_t *out);
int mote__parse_duration(const char *s, uint64_t *out_ns);

#endif /* MOTE_OPTION_H */
