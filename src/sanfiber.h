/*
 * sanfiber.h - tells AddressSanitizer, ThreadSanitizer and valgrind about
 * stack switches, so users can debug their own code inside tasks.  Each
 * execution context (a task, or a worker's own thread context) has one
 * sanfiber_ctx.  Compiles to nothing in a plain build.
 *
 * ASan: __sanitizer_start_switch_fiber before each switch (with the target's
 * stack bounds; a NULL save slot when the leaving task is dying), then
 * __sanitizer_finish_switch_fiber once running on the new stack.
 * TSan: one fiber per task, switched to just before the stack switch; the
 * switch synchronises (tasks on one worker never run at once).
 * valgrind: every task stack is registered while it exists.
 */
#ifndef MOTE_SANFIBER_H
#define MOTE_SANFIBER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#if defined(__SANITIZE_ADDRESS__)
#define SANFIBER_ASAN 1
#elif defined(__SANITIZE_THREAD__)
#define SANFIBER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANFIBER_ASAN 1
#elif __has_feature(thread_sanitizer)
#define SANFIBER_TSAN 1
#endif
#endif

#ifdef SANFIBER_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef SANFIBER_TSAN
#include <sanitizer/tsan_interface.h>
#endif
#if defined(MOTE_HAVE_VALGRIND_H) && !defined(SANFIBER_ASAN) && !defined(SANFIBER_TSAN)
#include <valgrind/valgrind.h>
#define SANFIBER_VALGRIND 1
#endif

typedef struct sanfiber_ctx {
#ifdef SANFIBER_ASAN
    void *fake_stack;
    const void *stack_lo;
    size_t stack_size;
#endif
#ifdef SANFIBER_TSAN
    void *fiber;
#endif
#ifdef SANFIBER_VALGRIND
    unsigned vg_id;
#endif
#if !defined(SANFIBER_ASAN) && !defined(SANFIBER_TSAN) && !defined(SANFIBER_VALGRIND)
    char unused_; /* C forbids an empty struct */
#endif
} sanfiber_ctx;

/* Whether the program runs under valgrind (which counts memory below a
 * stack's pointer as dead, so the depth sampling must not read it). */
static inline bool sanfiber_on_valgrind(void)
{
#ifdef SANFIBER_VALGRIND
    return RUNNING_ON_VALGRIND != 0;
#else
    return false;
#endif
}

/* The worker thread's own context: its stack and current fiber. */
static inline void sanfiber_thread_init(sanfiber_ctx *c)
{
    (void)c;
#ifdef SANFIBER_ASAN
    pthread_attr_t a;
    void *lo = NULL;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        pthread_attr_getstack(&a, &lo, &size);
        pthread_attr_destroy(&a);
    }
    c->stack_lo = lo;
    c->stack_size = size;
#endif
#ifdef SANFIBER_TSAN
    c->fiber = __tsan_get_current_fiber();
#endif
}

static inline void sanfiber_thread_fini(sanfiber_ctx *c) { (void)c; }

static inline void sanfiber_create(sanfiber_ctx *c, void *lo, size_t size)
{
    (void)c, (void)lo, (void)size;
#ifdef SANFIBER_ASAN
    c->fake_stack = NULL;
    c->stack_lo = lo;
    c->stack_size = size;
#endif
#ifdef SANFIBER_TSAN
    c->fiber = __tsan_create_fiber(0);
#endif
#ifdef SANFIBER_VALGRIND
    c->vg_id = VALGRIND_STACK_REGISTER(lo, (char *)lo + size);
#endif
}

static inline void sanfiber_destroy(sanfiber_ctx *c)
{
    (void)c;
#ifdef SANFIBER_TSAN
    if (c->fiber)
        __tsan_destroy_fiber(c->fiber);
    c->fiber = NULL;
#endif
#ifdef SANFIBER_VALGRIND
    VALGRIND_STACK_DEREGISTER(c->vg_id);
#endif
}

/* Always inlined: under TSan an out-of-line copy would enter its frame on
 * one fiber and leave it on the other, and each such switch took a word
 * off the shadow stack of the fiber it switched to (clang did not inline
 * the one in sched.c's cold exit path; the worker's shadow stack ran
 * under its start and the next call crashed). */
__attribute__((always_inline)) static inline void
sanfiber_enter(sanfiber_ctx *from, int dying, sanfiber_ctx *to)
{
    (void)from, (void)dying, (void)to;
#ifdef SANFIBER_ASAN
    __sanitizer_start_switch_fiber(dying ? NULL : &from->fake_stack, to->stack_lo,
                                   to->stack_size);
#endif
#ifdef SANFIBER_TSAN
    __tsan_switch_to_fiber(to->fiber, 0);
#endif
}

static inline void sanfiber_landed(sanfiber_ctx *c)
{
    (void)c;
#ifdef SANFIBER_ASAN
    __sanitizer_finish_switch_fiber(c->fake_stack, NULL, NULL);
#endif
}

#endif /* MOTE_SANFIBER_H */
