/*
 * overflow.h - stack overflow detection: a SIGSEGV handler on an alternate
 * signal stack that recognises a hit in a task's guard and names the task.
 */
#ifndef MOTE_OVERFLOW_H
#define MOTE_OVERFLOW_H

/* Installs the handler once per process, keeping the previous one, to which
 * every fault that is not a guard hit is passed unchanged. */
void mote__overflow_install(void);
/* Gives the calling worker thread an alternate signal stack if it has none;
 * fini removes the one it gave. */
void mote__overflow_thread_init(void);
void mote__overflow_thread_fini(void);

#endif
