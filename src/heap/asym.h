/*
 * asym.h - an asymmetric try-lock: its owner thread takes it on a hot path
 * with no locked instruction; the scavenger takes it rarely and pays for
 * both sides with a process-wide barrier (asym.c).  Neither side waits:
 * whoever finds the other inside does without.  Owns nothing else.
 *
 * Why: a locked instruction waits until every earlier store has left the
 * store buffer, so a program that writes a big block and frees it waited
 * in free's try-lock for its own writes (docs/heap.md, "What the big-block
 * loops wait for"), and one that writes its blocks of 5-32 KiB waited in
 * the CAS that takes the next one from a bitmap page.  Each thread cache
 * has one (heap_tcache.asym): it guards the cache's run cache and the
 * words of its bitmap pages.
 *
 * Dekker's protocol, its two fences made unequal:
 *   owner      busy = 1; light fence; gate set? -> busy = 0, fail
 *              ...; busy = 0 (release)
 *   scavenger  gate += 1; heavy fence; busy set? -> gate -= 1, fail
 *              ...; gate -= 1 (release)
 * The gate counts the scavenging sides in or going in, so two of them (the
 * run-cache pass and the arena's bitmap claims, which run under different
 * locks) may close it at once.  It keeps the owner out, not another
 * scavenging side: each kind has its own lock for that.
 * The heavy fence (membarrier) has every running thread of the process
 * execute a full barrier before it returns, which orders the owner's store
 * of busy before its load of gate as an mfence would: one of the two sees
 * the other's flag, never neither.  The light fence is then a compiler
 * barrier.  Until the process is registered for membarrier (at the heap's
 * init; never where the kernel or a seccomp filter refuses) the light fence
 * is a full one: registering only ever makes it lighter, and the heavy
 * fence is a full one as well as a membarrier.  Under a sanitizer, which
 * models neither, the flags are seq_cst accesses: Dekker in C11's own
 * terms.
 */
#ifndef MOTE_HEAP_ASYM_H
#define MOTE_HEAP_ASYM_H

#include <stdbool.h>
#include <stdint.h>

#include "atomic.h"
#include "debug.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define HEAP_ASYM_STRICT 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define HEAP_ASYM_STRICT 1
#endif
#endif

typedef struct heap_asym {
    uint8_t busy;  /* the owner is inside (written by the owner only) */
    uint16_t gate; /* scavenging sides inside or about to be */
} heap_asym;

/* The process is registered for membarrier: the light fence may be a
 * compiler barrier (asym.c). */
extern bool mote__heap_asym_light;

#ifndef HEAP_ASYM_STRICT
/* The light fence, for the owner's side: between a store the scavenger
 * looks for after its heavy fence and a load of what it stored before.
 * (None under a sanitizer: gcc's TSan refuses fences.) */
static inline void heap_asym_light_fence(void)
{
    if (LOAD(&mote__heap_asym_light, RELAXED))
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
    else
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
#endif

/* Owner: false if the scavenger is in (or going in): do without. */
static inline bool heap_asym_enter(heap_asym *a)
{
#ifdef HEAP_ASYM_STRICT
    STORE(&a->busy, 1, SEQ_CST);
    bool in = !LOAD(&a->gate, SEQ_CST);
#else
    STORE(&a->busy, 1, RELAXED);
    heap_asym_light_fence();
    bool in = !LOAD(&a->gate, ACQUIRE);
#endif
    if (!in)
        STORE(&a->busy, 0, RELEASE);
    return in;
}

static inline void heap_asym_leave(heap_asym *a) { STORE(&a->busy, 0, RELEASE); }

/* Scavenger, for any number of locks at once: close each gate, then one
 * heavy fence, then each lock is its if its owner is not inside; every
 * gate closed is opened again, won or not. */
static inline void heap_asym_close(heap_asym *a) { FETCH_ADD(&a->gate, 1, SEQ_CST); }
void mote__heap_asym_heavy_fence(void);
static inline bool heap_asym_won(heap_asym *a) { return LOAD(&a->busy, SEQ_CST) == 0; }
static inline void heap_asym_open(heap_asym *a) { FETCH_SUB(&a->gate, 1, RELEASE); }

/* A fork child: the threads that were inside their locks are gone.  No
 * gate is closed then (every closer holds the arena lock or the run
 * caches' scav_lock, which the fork holds). */
static inline void heap_asym_fork_child(heap_asym *a)
{
    mote__assert(LOAD(&a->gate, RELAXED) == 0);
    STORE(&a->busy, 0, RELAXED);
}

/* Registers the process for membarrier (the heap's init, and a fork child,
 * which is not sure to inherit its parent's registration). */
void mote__heap_asym_init(void);

#endif
