/*
 * test_option.c - every MOTE_* variable goes through one table
 * (src/option.c): strict parsing with exact bounds, one message per invalid
 * variable even when the allocator and mote_run both read it, mote_run
 * refusing to start, and the README's configuration table matching the
 * table word for word.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "mote.h"
#include "option.h"

static char self_path[4096];

static void quick(void *arg) { (void)arg; }

/* Runs this program again with NAME=VALUE in its environment from the very
 * start (the allocator reads its variables before main), capturing stderr;
 * the child exits with mote_run's result negated. */
static int run_with(const char *name, const char *value, char *err, size_t len)
{
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        setenv(name, value, 1);
        execl(self_path, self_path, "--child-run", (char *)NULL);
        _exit(126);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < len && (r = read(p[0], err + n, len - 1 - n)) > 0)
        n += (size_t)r;
    err[n] = 0;
    close(p[0]);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st));
    return -WEXITSTATUS(st);
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static void expect(const char *name, const char *value, int valid)
{
    char err[4096];
    int r = run_with(name, value, err, sizeof err);
    if ((r == 0) != valid || count(err, name) != (valid ? 0 : 1)) {
        fprintf(stderr, "%s=\"%s\": mote_run %d, expected %s; stderr:\n%s\n", name, value,
                r, valid ? "0" : "-EINVAL and one message", err);
        CHECK(0);
    }
    if (!valid) {
        CHECK_EQ(r, -EINVAL);
        CHECK(strstr(err, "is invalid: expected"));
    }
}

TEST(workers_are_strict_whole_numbers)
{
    const char *bad[] = {"",
                         "0",
                         "-1",
                         " 8",
                         "+4",
                         "\t2",
                         "8 ",
                         "abc",
                         "2x",
                         "1025",
                         "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect("MOTE_WORKERS", bad[i], 0);
    expect("MOTE_WORKERS", "1", 1);
    expect("MOTE_WORKERS", "3", 1);
}

TEST(stack_size_is_checked)
{
    const char *bad[] = {"",         "1K",   "4096", "2G",   "abc",
                         "64Q",      "-64K", "64KK", " 64K", "18446744073709551616",
                         "16777216T"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect("MOTE_STACK_SIZE", bad[i], 0);
    const char *good[] = {"64K", "1M", "32KiB", "1G", "8192", "8kb"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        expect("MOTE_STACK_SIZE", good[i], 1);
}

TEST(memlimit_takes_any_size_but_zero)
{
    expect("MOTE_MEMLIMIT", "0", 0);
    expect("MOTE_MEMLIMIT", "lots", 0);
    expect("MOTE_MEMLIMIT", "18446744073709551616", 0);
    /* one digit short of overflow: valid (was refused) */
    expect("MOTE_MEMLIMIT", "18446744073709551615", 1);
    expect("MOTE_MEMLIMIT", "18446744073709551610", 1);
    expect("MOTE_MEMLIMIT", "2G", 1);
    expect("MOTE_MEMLIMIT", "off", 1);
}

TEST(choices_and_allocator_variables)
{
    expect("MOTE_STACK_TRIM", "sometimes", 0);
    expect("MOTE_STACK_TRIM", "", 0);
    expect("MOTE_STACK_TRIM", "off", 1);
    expect("MOTE_STACK_TRIM", "EAGER", 1);
    expect("MOTE_STACK_GUARD", "mprotect", 1);
    expect("MOTE_STACK_GUARD", "none", 0);
    /* read by the allocator at its start and by mote_run: one message */
    expect("MOTE_MALLOC_DECAY_MS", "soon", 0);
    expect("MOTE_MALLOC_DECAY_MS", "3600001", 0);
    expect("MOTE_MALLOC_DECAY_MS", "250", 1);
    expect("MOTE_MALLOC_STATS", "verbose", 0);
}

TEST(parsers_have_exact_bounds)
{
    uint64_t v;
    CHECK_EQ(mote__parse_count("18446744073709551615", &v), 0);
    CHECK(v == UINT64_MAX);
    CHECK_EQ(mote__parse_count("18446744073709551616", &v), -ERANGE);
    CHECK_EQ(mote__parse_count("18446744073709551620", &v), -ERANGE);
    CHECK_EQ(mote__parse_count("0", &v), 0);
    CHECK_EQ(v, 0);
    CHECK_EQ(mote__parse_count("", &v), -EINVAL);
    CHECK_EQ(mote__parse_count("1 ", &v), -EINVAL);
    CHECK_EQ(mote__parse_size("16777215T", &v), 0);
    CHECK(v == 16777215ull << 40);
    CHECK_EQ(mote__parse_size("16777216T", &v), -ERANGE);
    CHECK_EQ(mote__parse_size("4KiB", &v), 0);
    CHECK_EQ(v, 4096);
    CHECK_EQ(mote__parse_size("4B", &v), 0);
    CHECK_EQ(v, 4);
    CHECK_EQ(mote__parse_size("4iB", &v), -EINVAL);
    CHECK_EQ(mote__parse_duration("250ms", &v), 0);
    CHECK_EQ(v, 250000000);
    CHECK_EQ(mote__parse_duration("2s", &v), 0);
    CHECK(v == 2000000000ull);
    CHECK_EQ(mote__parse_duration("2", &v), -EINVAL);
    CHECK_EQ(mote__parse_duration("307445734561m", &v), -ERANGE);
}

/* ---- the README documents exactly the table ----------------------------- */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    static char buf[1 << 18];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

TEST(readme_documents_every_variable_as_the_table_does)
{
    char *readme = slurp(MOTE_SOURCE_DIR "/README.md");
    for (int i = 0; i < OPT_COUNT; i++) {
        const mote__option *o = &mote__options[i];
        char row[1024];
        snprintf(row, sizeof row, "| `%s` | %s | %s |\n", o->name, o->doc, o->def_doc);
        if (!strstr(readme, row)) {
            fprintf(stderr, "README.md lacks the row:\n%s", row);
            CHECK(0);
        }
    }
    /* and no row for a variable the table does not have */
    for (char *p = readme; (p = strstr(p, "\n| `MOTE_")); p++) {
        char name[64];
        CHECK(sscanf(p + 4, "%63[A-Z_]", name) == 1);
        int known = 0;
        for (int i = 0; i < OPT_COUNT; i++)
            known |= !strcmp(name, mote__options[i].name);
        if (!known) {
            fprintf(stderr, "README.md documents %s, which mote does not read\n", name);
            CHECK(0);
        }
    }
}

int main(int argc, char **argv)
{
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    CHECK(n > 0);
    self_path[n] = 0;
    if (argc > 1 && !strcmp(argv[1], "--child-run")) {
        int r = mote_run(quick, NULL);
        _exit(r < 0 ? -r : r);
    }
    return test_harness_main(argc, argv);
}
