/*
 * config.c - reads and validates MOTE_* environment variables (config.h).
 * No state: each mote_run reads the environment afresh.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "os/os.h"
#include "stack.h"
#include "units.h"

int mote__config_parse_bytes(const char *s, uint64_t *out)
{
    return units_parse(s, true, out) ? -EINVAL : 0;
}

static int config_bad(const char *var, const char *val, const char *want)
{
    fprintf(stderr, "mote: %s=\"%s\" is invalid: %s\n", var, val, want);
    return -EINVAL;
}

int mote__config_load(config *c)
{
    c->workers = mote__os_ncpus();
    if (c->workers > CONFIG_MAX_WORKERS)
        c->workers = CONFIG_MAX_WORKERS;
    c->stack_size = CONFIG_DEFAULT_STACK;
    c->trim = CONFIG_TRIM_LAZY;
    c->memlimit = 0;

    const char *v = getenv("MOTE_WORKERS");
    if (v) {
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (!*v || *end || errno || n < 1 || n > CONFIG_MAX_WORKERS)
            return config_bad("MOTE_WORKERS", v,
                              "expected a whole number of worker threads from 1 to 1024");
        c->workers = (int)n;
    }
    v = getenv("MOTE_STACK_SIZE");
    if (v) {
        uint64_t b;
        if (mote__config_parse_bytes(v, &b) || b < STACK_MIN || b > STACK_MAX)
            return config_bad("MOTE_STACK_SIZE", v,
                              "expected a size from 8K to 1G (suffixes K, M, G)");
        c->stack_size = (size_t)b;
    }
    v = getenv("MOTE_STACK_TRIM");
    if (v) {
        if (!strcasecmp(v, "off"))
            c->trim = CONFIG_TRIM_OFF;
        else if (!strcasecmp(v, "lazy"))
            c->trim = CONFIG_TRIM_LAZY;
        else if (!strcasecmp(v, "eager"))
            c->trim = CONFIG_TRIM_EAGER;
        else
            return config_bad("MOTE_STACK_TRIM", v, "expected off, lazy or eager");
    }
    v = getenv("MOTE_MEMLIMIT");
    if (v) {
        uint64_t b;
        if (mote__config_parse_bytes(v, &b) || b == 0)
            return config_bad("MOTE_MEMLIMIT", v,
                              "expected a size in bytes (suffixes K, M, G), not 0");
        c->memlimit = b;
    }
    return 0;
}
