/*
 * config.h - runtime configuration from the environment, validated: an
 * invalid value is reported on stderr and rejected, never replaced by a
 * default.  Read once per mote_run.
 */
#ifndef MOTE_CONFIG_H
#define MOTE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

enum config_trim { CONFIG_TRIM_OFF = 0, CONFIG_TRIM_LAZY = 1, CONFIG_TRIM_EAGER = 2 };

typedef struct config {
    int workers;           /* MOTE_WORKERS: 1..1024, default online CPUs */
    size_t stack_size;     /* MOTE_STACK_SIZE: default 256 KiB */
    int trim;              /* MOTE_STACK_TRIM: off|lazy|eager, default lazy */
    uint64_t memlimit;     /* MOTE_MEMLIMIT: bytes, 0 = none */
} config;

#define CONFIG_MAX_WORKERS 1024
#define CONFIG_DEFAULT_STACK (256u * 1024)

/* Fills c from the environment: 0, or -EINVAL after printing why. */
int mote__config_load(config *c);

/* Parses "123", "64K", "1M", "2G" (also "KiB"/"MB" spellings): 0 or
 * -EINVAL.  Overflow is an error. */
int mote__config_parse_bytes(const char *s, uint64_t *out);

#endif /* MOTE_CONFIG_H */
