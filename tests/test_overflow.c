/* test_overflow.c - a stack overflow is never silent: the guard hit prints
 * which task overflowed which stack, then aborts; other faults reach the
 * program's own SIGSEGV handler as if mote had none. */
#include <signal.h>
#include <string.h>

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
static mote_wg quick_done = MOTE_WG_INIT;
static void quick(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_wg_done(&quick_done), 0);
}

static void main_renewed(void *arg)
{
    (void)arg;
    mote_task_opts o = {.stack_size = 16 * 1024};
    CHECK_EQ(mote_wg_add(&quick_done, 300), 0);
    for (int i = 0; i < 300; i++)
        CHECK_EQ(mote_go_ex(quick, NULL, &o), 0);
    CHECK_EQ(mote_wg_wait(&quick_done), 0);
    uint64_t pte0 = 0, pte1 = 0;
    CHECK_EQ(mote_metric("/process/pagetables:bytes", &pte0), 0);
    uint64_t res0 = test_metric("/stacks/resident:bytes");
    mote_mem_release(); /* every pooled 16 KiB stack goes cold: renewal */
    WAIT_UNTIL(test_metric("/stacks/resident:bytes") < res0, 60);
    CHECK_EQ(mote_metric("/process/pagetables:bytes", &pte1), 0);
    fprintf(stderr, "page tables %llu -> %llu KiB\n", (unsigned long long)pte0 >> 10,
            (unsigned long long)pte1 >> 10);
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
    char buf[4096];
    int st = test_fork_capture(fn, arg, buf, sizeof buf);
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
