/*
 * test_unit_stack.c - stack classes and slots (src/stack.h) on their own:
 * mote__stack_class_of at every class boundary, the class sizes, the slot
 * word's encoding, and a worker cache's slots: distinct, disjoint, writable
 * end to end, reused most recently freed first, and their guards found by
 * mote__stack_guard_hit with the owner recorded at the slot top.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "stack.h"

TEST(class_of_rejects_sizes_out_of_range)
{
    CHECK_EQ(mote__stack_class_of(0), -EINVAL);
    CHECK_EQ(mote__stack_class_of(1), -EINVAL);
    CHECK_EQ(mote__stack_class_of(STACK_MIN - 1), -EINVAL);
    CHECK_EQ(mote__stack_class_of(STACK_MAX + 1), -EINVAL);
    CHECK_EQ(mote__stack_class_of((size_t)4 << 30), -EINVAL);
    CHECK_EQ(mote__stack_class_of(SIZE_MAX), -EINVAL);
}

TEST(class_of_rounds_up_to_a_power_of_two)
{
    CHECK_EQ(STACK_MIN, 8192);
    CHECK_EQ(STACK_MAX, (size_t)1 << 30);
    CHECK_EQ(stack_class_size(STACK_NCLASS - 1), STACK_MAX);
    for (int c = 0; c < STACK_NCLASS; c++) {
        size_t size = stack_class_size(c);
        CHECK_EQ(size, (size_t)8192 << c);
        CHECK_EQ(mote__stack_class_of(size), c); /* exact */
        CHECK_EQ(
            mote__stack_class_of(size / 2 + 1 < STACK_MIN ? STACK_MIN : size / 2 + 1),
            c); /* just above the class below */
        if (c + 1 < STACK_NCLASS)
            CHECK_EQ(mote__stack_class_of(size + 1), c + 1);
    }
    CHECK_EQ(mote__stack_class_of(12 * 1024), 1);
    CHECK_EQ(mote__stack_class_of(256 * 1024), 5);
    CHECK_EQ(mote__stack_class_of(256 * 1024 + 1), 6);
}

TEST(slot_word_encodes_top_and_class)
{
    for (int c = 0; c < STACK_NCLASS; c++) {
        stack_slot u = stack_unplaced(c);
        CHECK_EQ(stack_cls(&u), c);
        CHECK_EQ(stack_top(&u), 0);
        uintptr_t top = (uintptr_t)0x7f0000000000 + ((uintptr_t)1 << 31);
        stack_slot s = {top | (uintptr_t)c};
        CHECK_EQ(stack_top(&s), top);
        CHECK_EQ(stack_cls(&s), c);
        CHECK_EQ(stack_lo(&s), top - stack_class_size(c));
    }
}

/* A worker's cache, outside any run: slots of two classes. */
TEST(cache_slots_are_disjoint_writable_and_reused_lifo)
{
    enum { N = 40 };
    static stack_cache cache;
    memset(&cache, 0, sizeof cache);
    mote__stack_configure(false);
    int cls[2] = {0, 3}; /* 8 KiB and 64 KiB */
    stack_slot s[2][N];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < N; i++) {
            CHECK_EQ(mote__stack_acquire(cls[k], &cache, &s[k][i]), 0);
            CHECK_EQ(stack_cls(&s[k][i]), cls[k]);
            uintptr_t top = stack_top(&s[k][i]);
            CHECK(top != 0 && top % 4096 == 0);
            /* the whole usable range is ours: write it end to end, below
             * the reserved words at the top */
            memset((void *)stack_lo(&s[k][i]), 0x5a,
                   stack_class_size(cls[k]) - STACK_TOP_RESERVED);
        }
    }
    CHECK_EQ(cache.in_use, 2 * N);
    /* disjoint, guards included */
    for (int a = 0; a < 2 * N; a++)
        for (int b = a + 1; b < 2 * N; b++) {
            stack_slot *x = &s[a / N][a % N], *y = &s[b / N][b % N];
            uintptr_t xlo = stack_lo(x) - STACK_GUARD, ylo = stack_lo(y) - STACK_GUARD;
            CHECK(stack_top(x) <= ylo || stack_top(y) <= xlo);
        }
    /* contents survive other slots' use */
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++) {
            const unsigned char *p = (const unsigned char *)stack_lo(&s[k][i]);
            CHECK(p[0] == 0x5a &&
                  p[stack_class_size(cls[k]) - STACK_TOP_RESERVED - 1] == 0x5a);
        }
    /* released slots come back most recently released first */
    mote__stack_release(&s[0][7], &cache);
    mote__stack_release(&s[0][3], &cache);
    CHECK_EQ(mote__stack_cache_count(&cache), 2);
    stack_slot again;
    CHECK_EQ(mote__stack_acquire(cls[0], &cache, &again), 0);
    CHECK_EQ(stack_top(&again), stack_top(&s[0][3]));
    CHECK_EQ(mote__stack_acquire(cls[0], &cache, &again), 0);
    CHECK_EQ(stack_top(&again), stack_top(&s[0][7]));
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < N; i++)
            mote__stack_release(&s[k][i], &cache);
    CHECK_EQ(cache.in_use, 0);
    CHECK_EQ(mote__stack_cache_count(&cache), 2 * N);
    mote__stack_cache_drain(&cache);
    CHECK_EQ(mote__stack_cache_count(&cache), 0);
    CHECK(mote__stack_pooled_global() >= 2 * N);
    CHECK(mote__stack_reserved_bytes() > 0);
    mote__stack_reset();
    CHECK_EQ(mote__stack_reserved_bytes(), 0);
    CHECK_EQ(mote__stack_pooled_global(), 0);
}

/* Each slot's guard is found, with the owner its top records and the
 * slot's size; the usable range is not a guard. */
TEST(guard_hits_name_the_owner_and_size)
{
    static stack_cache cache;
    memset(&cache, 0, sizeof cache);
    mote__stack_configure(false);
    int owners[3];
    stack_slot s[3];
    int cls[3] = {0, 1, 5};
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(mote__stack_acquire(cls[i], &cache, &s[i]), 0);
        mote__stack_set_owner(&s[i], &owners[i]);
    }
    for (int i = 0; i < 3; i++) {
        uintptr_t lo = stack_lo(&s[i]);
        void *owner = NULL;
        size_t size = 0;
        CHECK(mote__stack_guard_hit(lo - 1, &owner, &size));
        CHECK(owner == &owners[i]);
        CHECK_EQ(size, stack_class_size(cls[i]));
        owner = NULL;
        CHECK(mote__stack_guard_hit(lo - STACK_GUARD, &owner, &size));
        CHECK(owner == &owners[i]);
        CHECK(!mote__stack_guard_hit(lo, &owner, &size));
        CHECK(!mote__stack_guard_hit(stack_top(&s[i]) - 1, &owner, &size));
    }
    int local;
    void *owner;
    size_t size;
    CHECK(!mote__stack_guard_hit((uintptr_t)&local, &owner, &size)); /* not a slot */
    CHECK(!mote__stack_guard_hit(0, &owner, &size));
    for (int i = 0; i < 3; i++)
        mote__stack_release(&s[i], &cache);
    mote__stack_cache_drain(&cache);
    mote__stack_reset();
    CHECK(!mote__stack_guard_hit(stack_lo(&s[0]) - 1, &owner, &size));
}

/* The guard below a slot really faults (both guard kinds), while the
 * lowest usable byte does not. */
static void write_at(void *addr)
{
    *(volatile char *)addr = 1;
    _exit(0);
}

static void guard_faults(bool force_mprotect)
{
    static stack_cache cache;
    memset(&cache, 0, sizeof cache);
    mote__stack_configure(force_mprotect);
    if (force_mprotect)
        CHECK(!mote__stack_guard_is_madvise());
    stack_slot s;
    CHECK_EQ(mote__stack_acquire(2, &cache, &s), 0);
    char buf[4096];
    int st = test_fork_capture(write_at, (void *)stack_lo(&s), buf, sizeof buf);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    uintptr_t guard[] = {stack_lo(&s) - 1, stack_lo(&s) - STACK_GUARD};
    for (int i = 0; i < 2; i++) {
        st = test_fork_capture(write_at, (void *)guard[i], buf, sizeof buf);
        /* the default action, or a sanitizer's report of the SEGV */
        CHECK((WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV) ||
              (TEST_SANITIZED && WIFEXITED(st) && WEXITSTATUS(st) != 0));
    }
    mote__stack_release(&s, &cache);
    mote__stack_cache_drain(&cache);
    mote__stack_reset();
}

TEST(guard_pages_fault_on_write) { guard_faults(false); }

TEST(mprotect_guard_pages_fault_on_write) { guard_faults(true); }

TEST_MAIN()
