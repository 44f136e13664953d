/* test_overflow.c - a stack overflow is never silent: the guard hit prints
 * which task overflowed which stack, then aborts; other faults reach the
 * program's own SIGSEGV handler as if mote had none. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
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
