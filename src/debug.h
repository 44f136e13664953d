/*
 * debug.h - internal invariant checks, in levels (the model is mimalloc's
 * mi_assert_internal):
 *   MOTE_DEBUG 0  none: release builds pay nothing;
 *   MOTE_DEBUG 1  cheap checks on every state change (Debug builds);
 *   MOTE_DEBUG 2  also whole-structure walks (a timer heap, a wait queue, a
 *                 stack pool) after changes, and pauses inside race windows
 *                 (mote__debug_widen): slow, for one CI suite.
 * A failed check prints the expression and where, with write(2) only (it may
 * fire inside malloc or a signal handler), and aborts.
 */
#ifndef MOTE_DEBUG_H
#define MOTE_DEBUG_H

#ifndef MOTE_DEBUG
#define MOTE_DEBUG 0
#endif

_Noreturn void mote__assert_fail(const char *expr, const char *file, int line,
                                 const char *func);

#if MOTE_DEBUG >= 1
#define mote__assert(expr) \
    ((expr) ? (void)0 : mote__assert_fail(#expr, __FILE__, __LINE__, __func__))
#else
#define mote__assert(expr) ((void)sizeof(!(expr))) /* typed, not evaluated */
#endif

#if MOTE_DEBUG >= 2
#define mote__assert_expensive(expr) mote__assert(expr)
#else
#define mote__assert_expensive(expr) ((void)sizeof(!(expr)))
#endif

/* MOTE_DEBUG 2: a pause inside a race window (between a plain load and the
 * store it decides), so that stress tests meet the interleavings a lock
 * must exclude, which otherwise come once in millions of runs. */
#if MOTE_DEBUG >= 2
#define mote__debug_widen()                                      \
    do {                                                         \
        for (volatile int mote_w_ = 0; mote_w_ < 256; mote_w_++) \
            ;                                                    \
    } while (0)
#else
#define mote__debug_widen() ((void)0)
#endif

#endif /* MOTE_DEBUG_H */
