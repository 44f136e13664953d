/*
 * check.h - `mote-stack check`: the runtime's measured depths (the JSON
 * report mote_stack_report writes) beside the static bounds.
 *
 * Verdicts: a measured depth above a complete static bound is an analysis
 * bug (exit 1); above a bound with unknowns it is explained by them; a
 * reserved stack_size more than 4x both the measured depth and the bound is
 * oversized (a warning with the recommended size); a stack_size below the
 * bound plus reserves may overflow (a warning).
 */
#ifndef MOTE_STACK_CHECK_H
#define MOTE_STACK_CHECK_H

#include "graph.h"

enum { CK_OK, CK_VIOLATION, CK_EXPLAINED, CK_OVERSIZED, CK_UNDERSIZED, CK_SKIPPED };

typedef struct check_row {
    char *name, *object, *why;
    uint64_t offset;
    long long tasks, sampled, max_depth, stack_size;
    int func;   /* in its object, -1 when skipped */
    elfbin *eb; /* that object (the binary, or one the report names) */
    worst w;
    bool analysed;
    uint64_t recommended;
    int verdict, size_verdict;
} check_row;

typedef struct check_result {
    char *exe;
    check_row *rows;
    size_t n;
    int violations, warnings;
    struct check_other **others; /* other objects, open until check_free */
    size_t nothers;
} check_result;

/* Reads the report, analyses each entry in its object (binary, or another
 * ELF the report names); 0, or EXIT_INPUT for an unreadable report. */
int check_run(check_result *r, elfbin *b, analyzer *a, const char *report,
              const graph_opts *o);
void check_free(check_result *r);

#endif
