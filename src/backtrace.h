/*
 * backtrace.h - backtraces of parked tasks from their saved context, for
 * the deadlock report, the task dump and stall reports.
 */
#ifndef MOTE_BACKTRACE_H
#define MOTE_BACKTRACE_H

#include <stdint.h>
#include <stdio.h>

#include "task.h"

/* Walks a parked task's frame-pointer chain from its saved context,
 * staying inside its stack: up to max return addresses into pcs; returns
 * how many.  Frames of code built without frame pointers end it early. */
int mote__backtrace(const task *t, uintptr_t *pcs, int max);

/* The same from a frame pointer inside t's stack (a running task: its own
 * frame, or one a signal handler found). */
int mote__backtrace_from(const task *t, uintptr_t fp, uintptr_t *pcs, int max);

/* The running task t's backtrace from a signal handler's view of it (pc,
 * stack pointer, frame pointer): the pc first, then its caller even when
 * the signal came at a function's entry or return, where the frame chain
 * does not name it yet (or any more), then the walk. */
int mote__backtrace_interrupted(const task *t, uintptr_t ip, uintptr_t sp, uintptr_t fp,
                                uintptr_t *pcs, int max);

/* Prints the symbol of each pc, one "indent function" line each, leaving
 * out mote's own frames at the top. */
void mote__backtrace_print_pcs(FILE *f, const uintptr_t *pcs, int n, const char *indent);

/* Prints t's backtrace to f, one "      function" line per frame, leaving
 * out mote's own frames at the top (they say nothing its state does not). */
void mote__backtrace_print(FILE *f, const task *t, const char *indent);

#endif /* MOTE_BACKTRACE_H */
