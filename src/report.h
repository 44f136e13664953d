/*
 * report.h - a report written whole (report.c): built in memory with
 * stdio, then handed to write(2), so a failed write says why (stdio on the
 * descriptor turned every error into one code) and a non-blocking
 * descriptor is waited on.  Not for signal handlers (it allocates).
 */
#ifndef MOTE_REPORT_H
#define MOTE_REPORT_H

#include <stddef.h>
#include <stdio.h>

typedef struct report {
    FILE *f; /* write the report here */
    char *text;
    size_t len;
} report;

/* Opens r's stream: 0, or -ENOMEM. */
int mote__report_open(report *r);
/* Closes r's stream and writes all it holds to fd: 0, -ENOMEM (the
 * stream ran out of memory), or the -errno of writing. */
int mote__report_write(report *r, int fd);

#endif
