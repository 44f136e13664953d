/*
 * test_unit_backtrace.c - the backtrace a stall report takes from a signal
 * handler's view of the running task (src/backtrace.h): the interrupted pc
 * comes first, then its caller even when the signal came at a function's
 * entry or return, where the frame-pointer chain does not name the caller
 * (a stall report once named only mote_now and task_entry, its caller
 * skipped: the sample had landed on mote_now's first instruction).  The
 * "code" here is bytes in an array: the function reads them, never runs
 * them.  Cases run inside a task, whose stack bounds the reads.  A walk
 * may start on any word of the task's stack: in a program built without
 * frame pointers the register can hold AddressSanitizer's frame base, and
 * reading the redzones there aborted a task dump under ASan.
 */
#include <stdint.h>
#include <string.h>

#include "backtrace.h"
#include "check.h"
#include "task.h"

enum { FAKE_RET = 0x123450 };

/* pcs from a signal at the code in ip, with a stack whose words are w0, w1;
 * the frame pointer is this function's, so the walk after the inserted
 * caller starts with this function's return address. */
static __attribute__((noinline)) int interrupted_at(const uint8_t *ip, uintptr_t w0,
                                                    uintptr_t w1, uintptr_t *pcs, int max,
                                                    uintptr_t *walk_first)
{
    uintptr_t stack[2] __attribute__((aligned(16))) = {w0, w1};
    *walk_first = (uintptr_t)__builtin_return_address(0);
    int n = mote__backtrace_interrupted(mote__self(), (uintptr_t)ip, (uintptr_t)stack,
                                        (uintptr_t)__builtin_frame_address(0), pcs, max);
    __asm__ volatile("" : : "r"(stack) : "memory"); /* the array stays on the stack */
    return n;
}

static void check_caller_inserted(const uint8_t *ip, uintptr_t w0, uintptr_t w1)
{
    uintptr_t pcs[8], first;
    int n = interrupted_at(ip, w0, w1, pcs, 8, &first);
    CHECK(n >= 3);
    CHECK_EQ(pcs[0], (uintptr_t)ip + 1);
    CHECK_EQ(pcs[1], (uintptr_t)FAKE_RET);
    CHECK_EQ(pcs[2], first);
}

TEST_TASK(at_a_functions_entry_the_caller_is_read_from_the_stack)
{
    static const uint8_t push_rbp[] = {0x55, 0x48, 0x89, 0xe5};
    static const uint8_t endbr64[] = {0xf3, 0x0f, 0x1e, 0xfa, 0x55};
    check_caller_inserted(push_rbp, FAKE_RET, 0);
    check_caller_inserted(endbr64, FAKE_RET, 0);
}

TEST_TASK(just_after_the_push_the_caller_is_one_word_up)
{
    static const uint8_t mov_rsp_rbp[] = {0x48, 0x89, 0xe5, 0x90};
    check_caller_inserted(mov_rsp_rbp, 0x777, FAKE_RET);
}

TEST_TASK(at_a_return_the_caller_is_read_from_the_stack)
{
    static const uint8_t ret[] = {0xc3, 0x90, 0x90, 0x90};
    check_caller_inserted(ret, FAKE_RET, 0);
}

TEST_TASK(inside_a_function_the_frame_chain_alone_is_walked)
{
    static const uint8_t body[] = {0x48, 0x83, 0xc0, 0x01}; /* add $1,%rax */
    uintptr_t pcs[8], first;
    int n = interrupted_at(body, FAKE_RET, FAKE_RET, pcs, 8, &first);
    CHECK(n >= 2);
    CHECK_EQ(pcs[0], (uintptr_t)body + 1);
    CHECK_EQ(pcs[1], first);
}

TEST_TASK(a_stack_pointer_outside_the_task_stack_is_not_read)
{
    static const uint8_t push_rbp[] = {0x55, 0x48, 0x89, 0xe5};
    static uintptr_t not_the_stack[2] = {FAKE_RET, 0};
    uintptr_t pcs[8];
    int n = mote__backtrace_interrupted(mote__self(), (uintptr_t)push_rbp,
                                        (uintptr_t)not_the_stack,
                                        (uintptr_t)__builtin_frame_address(0), pcs, 8);
    CHECK(n >= 1);
    CHECK_EQ(pcs[0], (uintptr_t)push_rbp + 1);
    for (int i = 1; i < n; i++)
        CHECK(pcs[i] != (uintptr_t)FAKE_RET);
}

/* A frame pointer into a redzone ASan keeps poisoned (past a local array's
 * end): the walk reads it as words, with no report, and stays in bounds. */
TEST_TASK(a_walk_that_starts_in_a_sanitizer_redzone_reads_it_quietly)
{
    _Alignas(32) volatile char local[40];
    memset((char *)local, 1, sizeof local);
    uintptr_t pcs[8];
    int n = mote__backtrace_from(mote__self(), (uintptr_t)local + sizeof local, pcs, 8);
    CHECK(n >= 0 && n <= 8);
    __asm__ volatile("" : : "r"(local) : "memory");
}

TEST_MAIN()
