/*
 * units.h - parses sizes and counts from configuration strings: a decimal
 * number, optionally with a binary K/M/G/T suffix ("64K", "1MiB", "2GB").
 * No allocation and no locale, so the allocator can use it while it starts.
 * Shared by the runtime's config.c and the allocator's heap/config.c.
 */
#ifndef MOTE_UNITS_H
#define MOTE_UNITS_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

/* 0, -EINVAL (not a number, a suffix where none is allowed, trailing
 * garbage) or -ERANGE (does not fit 64 bits). */
static inline int units_parse(const char *s, bool suffix, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -ERANGE;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (p == s)
        return -EINVAL;
    unsigned shift = 0;
    if (suffix && *p) {
        switch (*p) {
        case 'k': case 'K': shift = 10; p++; break;
        case 'm': case 'M': shift = 20; p++; break;
        case 'g': case 'G': shift = 30; p++; break;
        case 't': case 'T': shift = 40; p++; break;
        case 'b': case 'B': break;
        default: return -EINVAL;
        }
        if (shift && (*p == 'i' || *p == 'I'))
            p++;
        if (*p == 'b' || *p == 'B')
            p++;
    }
    if (*p)
        return -EINVAL;
    if (shift && v > (UINT64_MAX >> shift))
        return -ERANGE;
    *out = v << shift;
    return 0;
}

#endif
