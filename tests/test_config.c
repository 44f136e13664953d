/* test_config.c - every invalid configuration is reported on stderr and
 * makes mote_run return -EINVAL; valid ones are taken. */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "mote.h"

static int ran;
static void note(void *arg) { (void)arg; ran = 1; }

static const char *vars[] = {"MOTE_WORKERS", "MOTE_STACK_SIZE",
                             "MOTE_STACK_TRIM", "MOTE_MEMLIMIT",
                             "MOTE_MALLOC_DECAY_MS"};

/* Exits 10 when mote_run rejected its configuration, 20 when main ran. */
static void run_and_exit(void)
{
    ran = 0;
    int r = mote_run(note, NULL);
    _exit(r == -EINVAL && !ran ? 10 : r == 0 && ran ? 20 : 30);
}

static void try_env(void *arg)
{
    const char **kv = arg;
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
    setenv(kv[0], kv[1], 1);
    run_and_exit();
}

static void expect(const char *var, const char *val, int valid)
{
    const char *kv[2] = {var, val};
    char buf[1024];
    int st = test_fork_capture(try_env, kv, buf, sizeof buf);
    CHECK(WIFEXITED(st));
    if (valid) {
        if (WEXITSTATUS(st) != 20)
            fprintf(stderr, "%s=%s should be valid: %s\n", var, val, buf);
        CHECK_EQ(WEXITSTATUS(st), 20);
    } else {
        if (WEXITSTATUS(st) != 10)
            fprintf(stderr, "%s=%s should be rejected\n", var, val);
        CHECK_EQ(WEXITSTATUS(st), 10);
        CHECK(strstr(buf, "mote: ") && strstr(buf, var) && strstr(buf, val));
    }
}

/* Runs this program again with var=val in its environment from the start
 * (the allocator reads its variables once, at its first use). */
static char self_path[4096];
static void exec_child(void *arg)
{
    const char **kv = arg;
    setenv(kv[0], kv[1], 1);
    execl(self_path, self_path, "--child", (char *)NULL);
    _exit(40);
}

static void expect_exec(const char *var, const char *val, int valid)
{
    const char *kv[2] = {var, val};
    char buf[1024];
    int st = test_fork_capture(exec_child, kv, buf, sizeof buf);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), valid ? 20 : 10);
    if (!valid)
        CHECK(strstr(buf, "mote") && strstr(buf, var) && strstr(buf, val));
}

int main(int argc, char **argv)
{
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    CHECK(n > 0);
    self_path[n] = 0;
    if (argc > 1 && !strcmp(argv[1], "--child"))
        run_and_exit();
    const char *bad_workers[] = {"", "0", "-1", "abc", "2x", "1025", "99999999999"};
    for (size_t i = 0; i < sizeof bad_workers / sizeof *bad_workers; i++)
        expect("MOTE_WORKERS", bad_workers[i], 0);
    expect("MOTE_WORKERS", "1", 1);
    expect("MOTE_WORKERS", "3", 1);

    const char *bad_stack[] = {"", "1K", "4096", "2G", "abc", "64Q", "-64K",
                               "64KK", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad_stack / sizeof *bad_stack; i++)
        expect("MOTE_STACK_SIZE", bad_stack[i], 0);
    expect("MOTE_STACK_SIZE", "64K", 1);
    expect("MOTE_STACK_SIZE", "1M", 1);
    expect("MOTE_STACK_SIZE", "32KiB", 1);
    expect("MOTE_STACK_SIZE", "1G", 1);

    expect("MOTE_STACK_TRIM", "sometimes", 0);
    expect("MOTE_STACK_TRIM", "", 0);
    expect("MOTE_STACK_TRIM", "off", 1);
    expect("MOTE_STACK_TRIM", "eager", 1);
    expect("MOTE_MEMLIMIT", "0", 0);
    expect("MOTE_MEMLIMIT", "lots", 0);
    expect("MOTE_MEMLIMIT", "2G", 1);
    /* the allocator's variables are read when it starts: before main */
    expect_exec("MOTE_MALLOC_DECAY_MS", "soon", 0);
    expect_exec("MOTE_MALLOC_DECAY_MS", "250", 1);
    TEST_PASS("test_config");
    return 0;
}
