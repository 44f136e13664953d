/* test_overflow.c - a stack overflow is never silent: the guard hit prints
 * which task overflowed which stack, then aborts, and so does a frame that
 * jumped past the guard onto memory no stack owns (code built without
 * -fstack-clash-protection); other faults reach the program's own SIGSEGV
 * handler as if mote had none. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"
#include "mote.h"

static int __attribute__((noinline)) recurse(int n)
{
    volatile char pad[512];
    pad[0] = (char)n;
    if (n == 0)
        return pad[0];
    return recurse(n - 1) + pad[0];
}

static void deep_recursion(void *arg) /* static: named from .symtab */
{
    (void)arg;
    recurse(1 << 20);
}

static void main_named(void *arg)
{
    (void)arg;
    mote_task_opts o = {.name = "handle_conn", .stack_size = 64 * 1024};
    CHECK_EQ(mote_go_ex(deep_recursion, NULL, &o), 0);
    mote_sleep(60LL * 1000000000); /* the overflow ends the process first */
}

static void main_unnamed(void *arg)
{
    (void)arg;
    mote_task_opts o = {.stack_size = 16 * 1024};
    CHECK_EQ(mote_go_ex(deep_recursion, NULL, &o), 0);
    mote_sleep(60LL * 1000000000); /* the overflow ends the process first */
}

static void main_fallback(void *arg)
{
    (void)arg;
    uint64_t madv = 1;
    CHECK_EQ(mote_metric("/stacks/guard-madvise:bool", &madv), 0);
    CHECK_EQ(madv, 0);
    main_named(NULL);
}

static void run_fallback(void *arg)
{
    (void)arg;
    setenv("MOTE_STACK_GUARD", "mprotect", 1);
    mote_run(main_fallback, NULL);
    _exit(3);
}

/* Stacks that went cold and had their chunk renewed (which drops guards
 * with the page tables) are guarded again before reuse. */
#define QUICK_N 300
static mote_wg quick_done = MOTE_WG_INIT;
static uintptr_t quick_frame[QUICK_N];
static void quick(void *arg)
{
    quick_frame[(intptr_t)arg] = (uintptr_t)__builtin_frame_address(0);
    CHECK_EQ(mote_wg_done(&quick_done), 0);
}

/* Whether the guard below the 16 KiB stack whose entry frame is at frame
 * still faults.  Asked of the kernel (a path it reads from there: EFAULT),
 * since a load would end the process.  The frame is within 8 KiB of the
 * stack's page-aligned top, so the probe lands in the 16 KiB guard
 * (STACK_GUARD, src/stack.h) wherever it is. */
static bool guarded(uintptr_t frame)
{
    uintptr_t top = (frame + 4095) & ~(uintptr_t)4095;
    const char *probe = (const char *)(top - 16 * 1024 - 8 * 1024);
    return syscall(SYS_faccessat, AT_FDCWD, probe, F_OK, 0) == -1 && errno == EFAULT;
}

/* Only a renewal of their chunk takes the guards of stacks no task holds
 * (the freezer drops guards under frozen tasks only). */
static bool quick_chunk_renewed(void)
{
    /* again each time: a quick task still exiting held its stack out of
     * the release before, and the chunk is renewed only when its last
     * stack goes cold */
    mote_mem_release();
    for (int i = 0; i < QUICK_N; i++)
        if (guarded(quick_frame[i]))
            return false;
    return true;
}

static void main_renewed(void *arg)
{
    (void)arg;
    mote_task_opts o = {.stack_size = 16 * 1024};
    CHECK_EQ(mote_wg_add(&quick_done, QUICK_N), 0);
    for (int i = 0; i < QUICK_N; i++)
        CHECK_EQ(mote_go_ex(quick, (void *)(intptr_t)i, &o), 0);
    CHECK_EQ(mote_wg_wait(&quick_done), 0);
    for (int i = 0; i < QUICK_N; i++)
        if (!guarded(quick_frame[i])) {
            fprintf(stderr,
                    "no guard found below a 16 KiB stack (frame %#lx): a renewal "
                    "could not be seen\n",
                    (unsigned long)quick_frame[i]);
            _exit(77);
        }
    WAIT_UNTIL(quick_chunk_renewed(), 60);
    main_unnamed(NULL); /* reuses one of them, and must still be caught */
}

/* A frame far bigger than the guard, with no probe of its pages: the stack
 * pointer moves below the stack at once and the first store faults there.
 * The store's target is made a page no one may touch, some MiB below this
 * task's stack, so that it faults wherever the stacks lie. */
static void big_unprobed_frame(void *arg)
{
    (void)arg;
    char here;
    uintptr_t sp = (uintptr_t)&here & ~(uintptr_t)4095;
    void *page = MAP_FAILED;
    for (uintptr_t mib = 8; mib <= 200 && page == MAP_FAILED; mib += 8)
        page = mmap((void *)(sp - (mib << 20)), 4096, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (page == MAP_FAILED) {
        fprintf(stderr, "no free page below the stack to fault on\n");
        _exit(77);
    }
    uintptr_t frame = (uintptr_t)page + 64;
    __asm__ volatile("mov %%rsp, %%rbx\n\t"
                     "mov %0, %%rsp\n\t"
                     "movb $1, (%%rsp)\n\t" /* faults */
                     "mov %%rbx, %%rsp\n\t"
                     :
                     : "r"(frame)
                     : "rbx", "memory");
}

static void main_big_frame(void *arg)
{
    (void)arg;
    mote_task_opts o = {.name = "big_frame", .stack_size = 16 * 1024};
    CHECK_EQ(mote_go_ex(big_unprobed_frame, NULL, &o), 0);
    mote_sleep(60LL * 1000000000); /* the fault ends the process first */
}

static void run_main(void *fn)
{
    mote_run((mote_fn)fn, NULL);
    _exit(3); /* not reached: the overflow aborts */
}

/* A program's own handler keeps working for faults that aren't overflows. */
static void on_segv(int sig)
{
    (void)sig;
    _exit(42);
}

static volatile uintptr_t wild_addr = 16;
static void wild_write(void *arg)
{
    (void)arg;
    *(volatile int *)wild_addr = 1;
}

static void main_wild(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_go(wild_write, NULL), 0);
    mote_sleep(60LL * 1000000000); /* the fault ends the process first */
}

static void run_with_handler(void *arg)
{
    (void)arg;
    signal(SIGSEGV, on_segv);
    mote_run(main_wild, NULL);
    _exit(3);
}

static void run_default(void *arg)
{
    (void)arg;
    mote_run(main_wild, NULL);
    _exit(3);
}

/* Runs fn in a child; it must die of SIGABRT after printing that
 * `expect` overflowed. */
static void expect_overflow(void (*fn)(void *), void *arg, const char *expect)
{
    static char buf[4096]; /* (a skip's reason outlives the call) */
    int st = test_fork_capture(fn, arg, buf, sizeof buf);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
        TEST_SKIP(buf); /* the child's precondition is missing */
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) || !strstr(buf, expect))
        fprintf(stderr, "child status %#x, said:\n%s\n", st, buf);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    CHECK(strncmp(buf, "mote: task ", 11) == 0 || strstr(buf, "\nmote: task "));
    CHECK(strstr(buf, expect) != NULL);
}

TEST(overflow_names_a_named_task_and_its_stack_size)
{
    expect_overflow(run_main, (void *)main_named,
                    " (handle_conn) overflowed its 64 KiB stack");
}

TEST(overflow_names_an_unnamed_task_by_its_entry_function)
{
    expect_overflow(run_main, (void *)main_unnamed,
                    "(deep_recursion) overflowed its 16 KiB stack");
}

TEST(stack_from_a_renewed_chunk_is_guarded_again)
{
    expect_overflow(run_main, (void *)main_renewed,
                    "(deep_recursion) overflowed its 16 KiB stack");
}

TEST(a_frame_that_jumps_past_the_guard_onto_no_stack_is_named)
{
    expect_overflow(run_main, (void *)main_big_frame,
                    " (big_frame) overflowed its 16 KiB stack: a frame bigger than the "
                    "guard jumped past it (build with -fstack-clash-protection)");
}

/* the mprotect fallback of kernels without MADV_GUARD_INSTALL */
TEST(mprotect_guards_catch_overflow_too)
{
    expect_overflow(run_fallback, NULL, " (handle_conn) overflowed its 64 KiB stack");
}

TEST(other_faults_reach_the_programs_own_handler)
{
    char buf[4096];
    int st = test_fork_capture(run_with_handler, NULL, buf, sizeof buf);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 42);
    CHECK(strstr(buf, "overflowed") == NULL);
}

TEST(other_faults_keep_the_default_action)
{
    if (TEST_SANITIZED) /* sanitizers report wild writes their own way */
        TEST_SKIP("sanitizer build");
    char buf[4096];
    int st = test_fork_capture(run_default, NULL, buf, sizeof buf);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    CHECK(strstr(buf, "overflowed") == NULL);
}

TEST_MAIN()
