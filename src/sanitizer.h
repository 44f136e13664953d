/*
 * sanitizer.h - keeps the few functions that read stack words the
 * sanitizers watch out of their instrumentation: ASan keeps the redzones
 * between a frame's locals poisoned, and TSan cannot see what orders a read
 * of another context's stack.  Frame walks and stack copies carry
 * SANITIZER_UNCHECKED; they only read, within a stack's bounds.  A leaf:
 * the heap's profiler uses it as the task runtime does.
 */
#ifndef MOTE_SANITIZER_H
#define MOTE_SANITIZER_H

#if defined(__clang__)
#define SANITIZER_UNCHECKED __attribute__((no_sanitize("address", "thread")))
#else
#define SANITIZER_UNCHECKED __attribute__((no_sanitize_address, no_sanitize_thread))
#endif

#endif /* MOTE_SANITIZER_H */
