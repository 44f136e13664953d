/*
 * test_unit_option.c - the option parsers (src/option.h) on their own:
 * mote__parse_count, mote__parse_size and mote__parse_duration at their
 * boundaries (0, 2^64 - 1, one past), with every suffix and unit, and on
 * garbage (signs, spaces, empty strings, stray characters); then
 * mote__option_read: defaults, ranges, "off", and one report per invalid
 * variable per process.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "option.h"

#define U64_MAX_STR "18446744073709551615"
#define U64_OVER    "18446744073709551616"

typedef int (*parser)(const char *, uint64_t *);

static void ok(parser p, const char *s, uint64_t want)
{
    uint64_t v = 12345;
    int r = p(s, &v);
    if (r != 0 || v != want)
        fprintf(stderr, "\"%s\": %d, %llu (want %llu)\n", s, r, (unsigned long long)v,
                (unsigned long long)want);
    CHECK_EQ(r, 0);
    CHECK(v == want);
}

static void bad(parser p, const char *s, int want)
{
    uint64_t v = 12345;
    int r = p(s, &v);
    if (r != want)
        fprintf(stderr, "\"%s\": %d (want %d)\n", s, r, want);
    CHECK_EQ(r, want);
}

/* Garbage every numeric parser refuses. */
static void common_garbage(parser p)
{
    const char *g[] = {"",     " ",   "-1",  "+1",  " 1",    "1 ",    "1\n", "\t1",
                       "0x10", "1.5", "1e3", "one", "1,000", "1_000", "--1", "-0"};
    for (size_t i = 0; i < sizeof g / sizeof *g; i++)
        bad(p, g[i], -EINVAL);
}

TEST(count_takes_plain_decimal_digits)
{
    ok(mote__parse_count, "0", 0);
    ok(mote__parse_count, "7", 7);
    ok(mote__parse_count, "0007", 7);
    ok(mote__parse_count, "1024", 1024);
    ok(mote__parse_count, "4294967296", 4294967296ull);
    common_garbage(mote__parse_count);
    bad(mote__parse_count, "1K", -EINVAL);
    bad(mote__parse_count, "12a", -EINVAL);
}

TEST(count_detects_overflow_exactly)
{
    ok(mote__parse_count, U64_MAX_STR, UINT64_MAX);
    ok(mote__parse_count, "18446744073709551614", UINT64_MAX - 1);
    ok(mote__parse_count, "000" U64_MAX_STR, UINT64_MAX);
    bad(mote__parse_count, U64_OVER, -ERANGE);
    bad(mote__parse_count, "18446744073709551620", -ERANGE);
    bad(mote__parse_count, "99999999999999999999", -ERANGE);
    bad(mote__parse_count, "184467440737095516150", -ERANGE);
}

TEST(size_takes_suffixes_k_m_g_t_with_optional_i_and_b)
{
    ok(mote__parse_size, "0", 0);
    ok(mote__parse_size, "4096", 4096);
    ok(mote__parse_size, "1B", 1);
    ok(mote__parse_size, "1b", 1);
    struct {
        const char *suffix;
        unsigned shift;
    } sfx[] = {{"K", 10}, {"M", 20}, {"G", 30}, {"T", 40}};
    for (size_t i = 0; i < 4; i++) {
        const char *forms[] = {"%s", "%sB", "%siB", "%sib", "%sIB"};
        for (size_t f = 0; f < 5; f++) {
            char fmt[16], s[32];
            snprintf(fmt, sizeof fmt, "3%s", forms[f]);
            snprintf(s, sizeof s, fmt, sfx[i].suffix);
            ok(mote__parse_size, s, 3ull << sfx[i].shift);
            s[1] = (char)(s[1] - 'A' + 'a'); /* lower-case unit */
            ok(mote__parse_size, s, 3ull << sfx[i].shift);
        }
    }
    ok(mote__parse_size, "0K", 0);
    ok(mote__parse_size, "64k", 64 * 1024);
}

TEST(size_rejects_garbage_and_misplaced_suffixes)
{
    common_garbage(mote__parse_size);
    const char *g[] = {"K",  "KB", "iB", "1iB",   "1KK",  "1KBB", "1 K", "1Q",
                       "1P", "1E", "1Z", "1KiBx", "1kb ", "1.5K", "K1",  "1bb"};
    for (size_t i = 0; i < sizeof g / sizeof *g; i++)
        bad(mote__parse_size, g[i], -EINVAL);
    ok(mote__parse_size, "1Ki", 1024); /* "i" alone after a unit: KiB */
}

TEST(size_detects_overflow_exactly)
{
    ok(mote__parse_size, U64_MAX_STR, UINT64_MAX);
    ok(mote__parse_size, U64_MAX_STR "B", UINT64_MAX);
    bad(mote__parse_size, U64_OVER, -ERANGE);
    /* the largest multiple of each unit that fits, and one more */
    ok(mote__parse_size, "18014398509481983K", 18014398509481983ull << 10);
    bad(mote__parse_size, "18014398509481984K", -ERANGE);
    ok(mote__parse_size, "17592186044415M", 17592186044415ull << 20);
    bad(mote__parse_size, "17592186044416M", -ERANGE);
    ok(mote__parse_size, "17179869183G", 17179869183ull << 30);
    bad(mote__parse_size, "17179869184G", -ERANGE);
    ok(mote__parse_size, "16777215T", 16777215ull << 40);
    bad(mote__parse_size, "16777216T", -ERANGE);
    bad(mote__parse_size, U64_MAX_STR "K", -ERANGE);
}

TEST(duration_needs_one_of_its_units)
{
    ok(mote__parse_duration, "0ns", 0);
    ok(mote__parse_duration, "10ns", 10);
    ok(mote__parse_duration, "10us", 10000);
    ok(mote__parse_duration, "10ms", 10000000);
    ok(mote__parse_duration, "10s", 10000000000ull);
    ok(mote__parse_duration, "10m", 600000000000ull);
    ok(mote__parse_duration, "1h", 3600000000000ull); /* MOTE_STACK_FREEZE's ceiling */
    ok(mote__parse_duration, "007ms", 7000000);
    common_garbage(mote__parse_duration);
    const char *g[] = {"10",  "10H",  "10MS", "10 ms", "10ms ", "ms",  "10mss",
                       "10S", "10µs", "1.5s", "10nsx", "s",     "10sm"};
    for (size_t i = 0; i < sizeof g / sizeof *g; i++)
        bad(mote__parse_duration, g[i], -EINVAL);
}

TEST(duration_detects_overflow_exactly)
{
    ok(mote__parse_duration, U64_MAX_STR "ns", UINT64_MAX);
    bad(mote__parse_duration, U64_OVER "ns", -ERANGE);
    ok(mote__parse_duration, "18446744073709551us", 18446744073709551000ull);
    bad(mote__parse_duration, "18446744073709552us", -ERANGE);
    ok(mote__parse_duration, "18446744073709ms", 18446744073709000000ull);
    bad(mote__parse_duration, "18446744073710ms", -ERANGE);
    ok(mote__parse_duration, "18446744073s", 18446744073000000000ull);
    bad(mote__parse_duration, "18446744074s", -ERANGE);
    ok(mote__parse_duration, "307445734m", 307445734ull * 60000000000ull);
    bad(mote__parse_duration, "307445735m", -ERANGE);
}

/* ---- mote__option_read ---- */

TEST_SETUP
{
    for (int i = 0; i < OPT_COUNT; i++)
        unsetenv(mote__options[i].name);
}

TEST(unset_variables_read_as_their_defaults)
{
    uint64_t v;
    CHECK_EQ(mote__option_read(OPT_STACK_SIZE, &v), 0);
    CHECK_EQ(v, 256 * 1024);
    CHECK_EQ(mote__option_read(OPT_STACK_TRIM, &v), 0);
    CHECK_EQ(v, 1); /* lazy */
    CHECK_EQ(mote__option_read(OPT_MEMLIMIT, &v), 0);
    CHECK(v == OPT_OFF);
    CHECK_EQ(mote__option_read(OPT_MALLOC_DECAY_MS, &v), 0);
    CHECK_EQ(v, 500);
    CHECK_EQ(mote__option_read(OPT_WORKERS, &v), 0);
    CHECK(v >= 1 && v <= 1024); /* the online CPUs */
    CHECK_EQ(mote__option_check_all(), 0);
}

/* The table: names, ranges and defaults that agree with each other. */
TEST(option_table_is_consistent)
{
    for (int i = 0; i < OPT_COUNT; i++) {
        const mote__option *o = &mote__options[i];
        CHECK(o->name && !strncmp(o->name, "MOTE_", 5));
        CHECK(o->doc && o->expect && o->def_doc);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(o->name, mote__options[j].name) != 0);
        if (o->kind == OPT_KIND_CHOICE) {
            CHECK(o->choices != NULL);
            int n = 1;
            for (const char *p = o->choices; *p; p++)
                n += *p == ',';
            CHECK(o->def < (uint64_t)n);
        } else {
            CHECK(o->min <= o->max);
            /* a default is in range, or "off", or computed (WORKERS: 0) */
            CHECK((o->def >= o->min && o->def <= o->max) ||
                  (o->off_ok && o->def == OPT_OFF) || i == OPT_WORKERS);
        }
    }
}

static void read_value(enum mote__opt id, const char *val, int want_r, uint64_t want)
{
    setenv(mote__options[id].name, val, 1);
    uint64_t v = 0;
    int r = mote__option_read(id, &v);
    if (r != want_r || (r == 0 && v != want))
        fprintf(stderr, "%s=\"%s\": %d, %llu\n", mote__options[id].name, val, r,
                (unsigned long long)v);
    CHECK_EQ(r, want_r);
    if (r == 0)
        CHECK(v == want);
    unsetenv(mote__options[id].name);
}

static void read_ranges(void *arg)
{
    (void)arg;
    read_value(OPT_WORKERS, "1", 0, 1);
    read_value(OPT_WORKERS, "1024", 0, 1024);
    read_value(OPT_WORKERS, "0", -EINVAL, 0);
    read_value(OPT_STACK_SIZE, "8K", 0, 8192);
    read_value(OPT_STACK_SIZE, "1G", 0, 1u << 30);
    read_value(OPT_STACK_TRIM, "EAGER", 0, 2);
    read_value(OPT_STACK_GUARD, "mprotect", 0, 1);
    read_value(OPT_MEMLIMIT, "off", 0, OPT_OFF);
    read_value(OPT_MEMLIMIT, "Off", 0, OPT_OFF);
    read_value(OPT_MEMLIMIT, "1", 0, 1);
    read_value(OPT_MEMLIMIT, U64_MAX_STR, 0, UINT64_MAX);
    read_value(OPT_MALLOC_DECAY_MS, "0", 0, 0);
    read_value(OPT_MALLOC_DECAY_MS, "3600000", 0, 3600000);
    read_value(OPT_MALLOC_STATS, "json", 0, 2);
    /* out of range, or "off" where it is not allowed: refused, and the
     * default is what the caller gets */
    setenv("MOTE_STACK_SIZE", "2G", 1);
    uint64_t v = 0;
    CHECK_EQ(mote__option_read(OPT_STACK_SIZE, &v), -EINVAL);
    CHECK_EQ(v, 256 * 1024);
    setenv("MOTE_MALLOC_DECAY_MS", "off", 1);
    CHECK_EQ(mote__option_read(OPT_MALLOC_DECAY_MS, &v), -EINVAL);
    CHECK_EQ(v, 500);
    CHECK_EQ(mote__option_check_all(), -EINVAL);
    _exit(0);
}

/* In a child: the reports go to its stderr, and each variable is reported
 * once per process. */
TEST(read_takes_values_in_range_and_refuses_others)
{
    char buf[4096];
    int st = test_fork_capture(read_ranges, NULL, buf, sizeof buf);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fprintf(stderr, "%s", buf);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(strstr(buf, "mote: MOTE_WORKERS=\"0\" is invalid") != NULL);
    CHECK(strstr(buf, "mote: MOTE_STACK_SIZE=\"2G\" is invalid") != NULL);
    CHECK(strstr(buf, "mote: MOTE_MALLOC_DECAY_MS=\"off\" is invalid") != NULL);
}

static void read_twice(void *arg)
{
    (void)arg;
    uint64_t v;
    setenv("MOTE_STACK_TRIM", "sometimes", 1);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(mote__option_read(OPT_STACK_TRIM, &v), -EINVAL);
    CHECK_EQ(mote__option_check_all(), -EINVAL);
    _exit(0);
}

TEST(invalid_variable_is_reported_once_per_process)
{
    char buf[4096];
    int st = test_fork_capture(read_twice, NULL, buf, sizeof buf);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int n = 0;
    for (const char *p = buf; (p = strstr(p, "MOTE_STACK_TRIM")) != NULL; p++)
        n++;
    if (n != 1)
        fprintf(stderr, "%s", buf);
    CHECK_EQ(n, 1);
}

TEST_MAIN()
