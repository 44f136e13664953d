/*
 * config.c - the allocator's environment variables, read once at init:
 *   MOTE_MALLOC_DECAY_MS  ms a free page stays resident before the
 *                         scavenger returns it (default 500, max 3600000)
 *   MOTE_MEMLIMIT         hard limit on the heap's committed bytes, with an
 *                         optional K/M/G suffix (0 or unset: none)
 *   MOTE_MALLOC_STATS     1 (text table) or json, printed at exit
 * malloc cannot return a configuration error, so an invalid value is
 * reported on stderr and ignored (the built-in default stays in force);
 * mote__heap_check_env() lets the runtime turn the same error into -EINVAL.
 * getenv() is safe here: it does not allocate.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heap/heap.h"
#include "heap/internal.h"
#include "units.h"

heap_config mote__heap_cfg = {.decay_ms = 500};

static void config_bad(const char *name, const char *val, const char *why)
{
    char buf[256];
    snprintf(buf, sizeof buf, "mote: %s=\"%.64s\": %s; ignored\n", name, val, why);
    mote__heap_write_err(buf);
    mote__heap_cfg.env_error = 1;
}

void mote__heap_config_load(void)
{
    const char *s = getenv("MOTE_MALLOC_DECAY_MS");
    uint64_t v;
    if (s) {
        int r = units_parse(s, false, &v);
        if (r < 0 || v > 3600000)
            config_bad("MOTE_MALLOC_DECAY_MS", s,
                       "want milliseconds, an integer from 0 to 3600000");
        else
            mote__heap_cfg.decay_ms = (uint32_t)v;
    }
    s = getenv("MOTE_MEMLIMIT");
    if (s) {
        if (units_parse(s, true, &v) < 0)
            config_bad("MOTE_MEMLIMIT", s, "want bytes with an optional K, M or G suffix");
        else
            mote__heap_cfg.limit = v;
    }
    s = getenv("MOTE_MALLOC_STATS");
    if (s && *s) {
        if (!strcmp(s, "1") || !strcmp(s, "text"))
            mote__heap_cfg.stats = 1;
        else if (!strcmp(s, "json"))
            mote__heap_cfg.stats = 2;
        else if (strcmp(s, "0") != 0)
            config_bad("MOTE_MALLOC_STATS", s, "want 1, json or 0");
    }
}

int mote__heap_check_env(void)
{
    heap_ensure_init();
    return mote__heap_cfg.env_error ? -EINVAL : 0;
}
