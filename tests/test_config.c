/* test_config.c - the MOTE_* variables as a program sees them: every
 * invalid value is reported on stderr and makes mote_run return -EINVAL
 * (nothing runs); every valid one is taken.  Numbers are strict: decimal
 * digits only, no sign, no spaces, exact overflow detection.  Each invalid
 * value is reported once per process, even when the allocator and
 * mote_run both read it, and however many runs are tried; a new invalid
 * value of the same variable is reported too.
 *
 * The runtime's variables are checked in a forked child that sets one and
 * calls mote_run; the allocator's are read when the allocator starts, so
 * those children re-execute this program with the variable set from the
 * start (`test_config --child`). */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "mote.h"

static const char *vars[] = {
    "MOTE_WORKERS",  "MOTE_STACK_SIZE",      "MOTE_STACK_TRIM",  "MOTE_STACK_GUARD",
    "MOTE_MEMLIMIT", "MOTE_MALLOC_DECAY_MS", "MOTE_MALLOC_STATS"};

TEST_SETUP
{
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
}

static int ran;
static void note(void *arg)
{
    (void)arg;
    ran = 1;
}

/* Exit status of a child: 10 when mote_run rejected its configuration
 * (and main never ran), 20 when main ran, 30 for anything else. */
static int run_status(void)
{
    ran = 0;
    int r = mote_run(note, NULL);
    return r == -EINVAL && !ran ? 10 : r == 0 && ran ? 20 : 30;
}

static void try_env(void *arg)
{
    const char **kv = arg;
    setenv(kv[0], kv[1], 1);
    _exit(run_status());
}

/* Occurrences of needle in hay. */
static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* The report names the variable and quotes the value, once. */
static void check_report(const char *buf, const char *var, const char *val)
{
    char want[256];
    snprintf(want, sizeof want, "mote: %s=\"%s\" is invalid", var, val);
    if (count(buf, want) != 1)
        fprintf(stderr, "expected one \"%s\" in:\n%s\n", want, buf);
    CHECK_EQ(count(buf, want), 1);
}

static void expect(const char *var, const char *val, int valid)
{
    const char *kv[2] = {var, val};
    char buf[4096];
    int st = test_fork_capture(try_env, kv, buf, sizeof buf);
    CHECK(WIFEXITED(st));
    if (valid) {
        if (WEXITSTATUS(st) != 20)
            fprintf(stderr, "%s=\"%s\" should be valid: %s\n", var, val, buf);
        CHECK_EQ(WEXITSTATUS(st), 20);
        CHECK(strstr(buf, "mote: ") == NULL);
    } else {
        if (WEXITSTATUS(st) != 10)
            fprintf(stderr, "%s=\"%s\" should be rejected\n", var, val);
        CHECK_EQ(WEXITSTATUS(st), 10);
        check_report(buf, var, val);
    }
}

#define EXPECT_ALL(var, list, valid)                               \
    do {                                                           \
        for (size_t i_ = 0; i_ < sizeof list / sizeof *list; i_++) \
            expect(var, list[i_], valid);                          \
    } while (0)

TEST(workers_takes_whole_numbers_from_1_to_1024)
{
    const char *bad[] = {"",
                         "0",
                         "-1",
                         "+2",
                         " 2",
                         "2 ",
                         "abc",
                         "2x",
                         "0x4",
                         "1e1",
                         "1025",
                         "99999999999",
                         "18446744073709551616",
                         "2.0"};
    EXPECT_ALL("MOTE_WORKERS", bad, 0);
    const char *good[] = {"1", "3", "02"};
    EXPECT_ALL("MOTE_WORKERS", good, 1);
}

TEST(stack_size_takes_sizes_from_8k_to_1g)
{
    const char *bad[] = {"",
                         "1K",
                         "4096",
                         "8191",
                         "2G",
                         "1025M",
                         "abc",
                         "64Q",
                         "-64K",
                         "+64K",
                         " 64K",
                         "64K ",
                         "64 K",
                         "64KK",
                         "64iB",
                         "K",
                         "64Kx",
                         "1T",
                         "99999999999999999999999",
                         "18446744073709551615",
                         "18446744073709551616"};
    EXPECT_ALL("MOTE_STACK_SIZE", bad, 0);
    const char *good[] = {"8K",    "8192",  "12K", "64K", "64k",       "64KB",
                          "32KiB", "32kib", "1M",  "1G",  "1073741824"};
    EXPECT_ALL("MOTE_STACK_SIZE", good, 1);
}

TEST(stack_trim_takes_off_lazy_or_eager)
{
    const char *bad[] = {"sometimes", "", "of", "off ", "0", "1", "lazyy"};
    EXPECT_ALL("MOTE_STACK_TRIM", bad, 0);
    const char *good[] = {"off", "lazy", "eager", "EAGER", "Off"};
    EXPECT_ALL("MOTE_STACK_TRIM", good, 1);
}

TEST(stack_guard_takes_auto_or_mprotect)
{
    const char *bad[] = {"", "madvise", "yes", "1", "auto,mprotect"};
    EXPECT_ALL("MOTE_STACK_GUARD", bad, 0);
    const char *good[] = {"auto", "mprotect", "MPROTECT"};
    EXPECT_ALL("MOTE_STACK_GUARD", good, 1);
}

/* Any size above 0 up to 2^64 - 1 bytes, or off. */
TEST(memlimit_takes_any_size_but_zero_or_off)
{
    const char *bad[] = {"0",         "0K",          "lots",
                         "",          "-1",          "+1G",
                         "12Q",       "1 G",         "18446744073709551616",
                         "16777216T", "17179869184G"};
    EXPECT_ALL("MOTE_MEMLIMIT", bad, 0);
    const char *good[] = {"2G",        "off",         "OFF", "18446744073709551615",
                          "16777215T", "17179869183G"};
    EXPECT_ALL("MOTE_MEMLIMIT", good, 1);
}

/* Several invalid variables: each is reported. */
static void two_bad(void *arg)
{
    (void)arg;
    setenv("MOTE_WORKERS", "many", 1);
    setenv("MOTE_STACK_TRIM", "never", 1);
    _exit(run_status());
}

TEST(every_invalid_variable_is_reported)
{
    char buf[4096];
    int st = test_fork_capture(two_bad, NULL, buf, sizeof buf);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 10);
    check_report(buf, "MOTE_WORKERS", "many");
    check_report(buf, "MOTE_STACK_TRIM", "never");
}

/* Two runs in one process with the same invalid variable: both refused,
 * one report. */
static void twice(void *arg)
{
    (void)arg;
    setenv("MOTE_STACK_SIZE", "huge", 1);
    int a = run_status(), b = run_status();
    setenv("MOTE_STACK_SIZE", "4K", 1); /* another invalid value */
    int c = run_status(), d = run_status();
    _exit(a == 10 && b == 10 && c == 10 && d == 10 ? 10 : 30);
}

TEST(invalid_variable_is_reported_once_per_process)
{
    char buf[4096];
    int st = test_fork_capture(twice, NULL, buf, sizeof buf);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 10);
    check_report(buf, "MOTE_STACK_SIZE", "huge");
    check_report(buf, "MOTE_STACK_SIZE", "4K"); /* (it was not reported at all) */
}

/* ---- the allocator's variables: read when it starts ---- */

static char self_path[4096];

/* Runs this program again with var=val in its environment from the start. */
static void exec_child(void *arg)
{
    const char **kv = arg;
    setenv(kv[0], kv[1], 1);
    execl(self_path, self_path, "--child", (char *)NULL);
    _exit(40);
}

/* The child: the allocator starts (and reads its variables) before
 * mote_run reads them all again; then a second run. */
static int child_main(void)
{
    mote_free(mote_malloc(16));
    int a = run_status();
    int b = run_status();
    return a == b ? a : 30;
}

static void expect_exec(const char *var, const char *val, int valid)
{
    const char *kv[2] = {var, val};
    char buf[4096];
    int st = test_fork_capture(exec_child, kv, buf, sizeof buf);
    CHECK(WIFEXITED(st));
    if (WEXITSTATUS(st) != (valid ? 20 : 10))
        fprintf(stderr, "%s=\"%s\": child exited %d:\n%s\n", var, val, WEXITSTATUS(st),
                buf);
    CHECK_EQ(WEXITSTATUS(st), valid ? 20 : 10);
    if (valid)
        CHECK(strstr(buf, "is invalid") == NULL);
    else
        check_report(buf, var, val); /* the allocator's read and two runs: once */
}

TEST(malloc_decay_takes_milliseconds_up_to_an_hour)
{
    const char *bad[] = {"soon", "", "-1", "+5", "5ms", "3600001", " 250"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_exec("MOTE_MALLOC_DECAY_MS", bad[i], 0);
    const char *good[] = {"250", "0", "3600000"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        expect_exec("MOTE_MALLOC_DECAY_MS", good[i], 1);
}

TEST(malloc_stats_takes_0_1_text_or_json)
{
    expect_exec("MOTE_MALLOC_STATS", "yes", 0);
    expect_exec("MOTE_MALLOC_STATS", "2", 0);
    expect_exec("MOTE_MALLOC_STATS", "0", 1);
    expect_exec("MOTE_MALLOC_STATS", "1", 1); /* stats at exit, on stderr */
    expect_exec("MOTE_MALLOC_STATS", "json", 1);
}

/* MOTE_MEMLIMIT is the allocator's and mote_run's: one report in all. */
TEST(memlimit_read_by_allocator_and_runs_is_reported_once)
{
    expect_exec("MOTE_MEMLIMIT", "lots", 0);
    expect_exec("MOTE_MEMLIMIT", "0", 0);
    expect_exec("MOTE_MEMLIMIT", "1G", 1);
}

/* A limit below what the process holds already is no invalid value, but
 * nothing can start under it: mote_run says so, not only -ENOMEM. */
TEST(a_memlimit_below_the_process_fails_runs_and_says_why)
{
    const char *kv[2] = {"MOTE_MEMLIMIT", "1K"};
    char buf[4096];
    int st = test_fork_capture(exec_child, kv, buf, sizeof buf);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 30); /* both runs failed alike, not with -EINVAL */
    if (!strstr(buf, "mote: no memory for the workers: MOTE_MEMLIMIT is 1024 bytes"))
        fprintf(stderr, "got: %s\n", buf);
    CHECK(strstr(buf, "mote: no memory for the workers: MOTE_MEMLIMIT is 1024 bytes") !=
          NULL);
}

int main(int argc, char **argv)
{
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    CHECK(n > 0);
    self_path[n] = 0;
    if (argc > 1 && !strcmp(argv[1], "--child"))
        return child_main();
    return test_harness_main(argc, argv);
}
