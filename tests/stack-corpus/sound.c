/*
 * sound.c - stack-corpus: entries whose depth is measured on a painted
 * stack and compared with mote-stack's bound (run.py sound): a bound the
 * tool calls complete must be at least the measured depth.  Each case is
 * one the analyser once under-estimated.  Prints "entry depth" a line;
 * depths count from the %rsp before the call, the tool's convention.
 */
#include <alloca.h>
#include <assert.h>
#include <err.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define NI __attribute__((noinline))

void call_on_stack(void (*fn)(void *), void *arg, void *top);
__asm__(".text\n.globl call_on_stack\ncall_on_stack:\n push %rbp\n mov %rsp,%rbp\n"
        " mov %rdx,%rsp\n mov %rdi,%rax\n mov %rsi,%rdi\n call *%rax\n mov %rbp,%rsp\n"
        " pop %rbp\n ret\n");

enum { REGION = 4 << 20 };
static unsigned char *region; /* shared: a child's paint is read here */

/* The entry runs in a child on the painted region, so an entry that ends
 * the process (errx, a failed assert) is measured like one that returns. */
static long measure1(void (*fn)(void *), void *arg, unsigned char pat)
{
    memset(region, pat, REGION);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {0, 0};
        setrlimit(RLIMIT_CORE, &rl);
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 2);
        call_on_stack(fn, arg, region + REGION);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    size_t i = 0;
    while (i < REGION && region[i] == pat)
        i++;
    return (long)(REGION - i);
}

static void run(const char *name, void (*fn)(void *), long arg)
{
    long a = measure1(fn, (void *)arg, 0xa5), b = measure1(fn, (void *)arg, 0x5a);
    printf("%s %ld\n", name, a > b ? a : b);
}
volatile long sink;
NI void fill(volatile char *p, long n)
{
    for (long i = 0; i < n; i++)
        p[i] = (char)i;
}

/* A recursive group entered at two of its functions (sound.hints: mx
 * appears at most twice on a stack).  A memoising search kept mx's value
 * from the first way in and under-charged the second. */
NI long mz(long n)
{
    volatile char b[8000];
    fill(b, sizeof b);
    return b[n & 511];
}
NI long mx(long n);
NI long my(long n)
{
    volatile char b[3000];
    fill(b, sizeof b);
    if (n > 0)
        return mx(n - 1) + b[n & 7];
    return b[1];
}
NI long mx(long n)
{
    volatile char b[100];
    fill(b, sizeof b);
    if (n > 0)
        return my(n - 1) + b[n & 7];
    return mz(n) + b[2];
}
void e_mem(void *a)
{
    long n = (long)a;
    sink += mx(n);
    sink += my(n);
}

/* A cycle rx -> rz -> rw -> rx whose rw was first finished by way of ry:
 * the search never saw the cycle through rz and charged no 4000-byte
 * levels at all. */
NI long rx(long n);
NI long rw(long n)
{
    volatile char b[100];
    fill(b, sizeof b);
    return rx(n - 1) + b[n & 7];
}
NI long ry(long n)
{
    volatile char b[100];
    fill(b, sizeof b);
    return rw(n) + b[n & 7];
}
NI long rz(long n)
{
    volatile char b[4000];
    fill(b, sizeof b);
    return rw(n) + b[n & 7];
}
NI long rx(long n)
{
    volatile char b[100];
    fill(b, sizeof b);
    if (n <= 0)
        return b[0];
    if (n & 1)
        return ry(n) + b[1];
    return rz(n) + b[2];
}
void e_cyc(void *a) { sink += rx((long)a); }

/* An alloca bounded by a `frame` hint, then a call: the callee runs below
 * the alloca, not below the static frame. */
NI long child(long x)
{
    volatile char b[8000];
    fill(b, sizeof b);
    return b[x & 511];
}
void e_allocacall(void *a)
{
    long n = (long)a;
    volatile char *p = alloca(n);
    fill(p, n);
    sink += child(p[3]);
}

/* Functions that end the process still run on the task's stack first:
 * errx formats through unbuffered stderr, __assert_fail too. */
void e_errx(void *a) { errx(3, "bad value %ld", (long)a); }
void e_assert(void *a)
{
    assert((long)a == 0);
    sink++;
}

/* qsort calls the comparator below its own frame: without a hint naming
 * it the bound is incomplete, with one the comparator is charged. */
static int cmp_big(const void *x, const void *y)
{
    volatile char b[6000];
    fill(b, sizeof b);
    return *(const int *)x - *(const int *)y + b[5] - b[5];
}
void e_qsort(void *a)
{
    int v[8] = {5, 3, 1, 7, 2, 8, 4, 6};
    qsort(v, 8, sizeof v[0], cmp_big);
    sink += v[(long)a & 7];
}
void e_qsort_nohint(void *a)
{
    int v[8] = {5, 3, 1, 7, 2, 8, 4, 6};
    qsort(v, 8, sizeof v[0], cmp_big);
    sink += v[(long)a & 7];
}

/* fprintf to an unbuffered stream formats into an 8 KiB buffer on the
 * stack (glibc's buffered_vfprintf); sscanf of a number longer than its
 * scratch buffer goes deeper than of a short one. */
void e_fprintf_stderr(void *a) { fprintf(stderr, "x %d %.400f\n", (int)(long)a, 1e300); }
static char longnum[6000];
volatile double dsink;
void e_sscanf(void *a)
{
    double d = 0;
    sscanf(longnum + (long)a, "%lf", &d);
    dsink += d;
}

/* In a static binary strstr is an IFUNC: its symbol's code is the
 * resolver (8 bytes), not the variant that runs. */
static char hay[65536], needle[1000];
void e_strstr(void *a) { sink += (long)strstr(hay, needle + (long)a); }

int main(void)
{
    region =
        mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED)
        return 1;
    run("e_mem", e_mem, 3);
    run("e_cyc", e_cyc, 16);
    run("e_allocacall", e_allocacall, 30000);
    run("e_errx", e_errx, 7);
    run("e_fprintf_stderr", e_fprintf_stderr, 1);
    strcpy(longnum, "0.");
    for (int i = 2; i < 5000; i++)
        longnum[i] = (char)('0' + (i * 7) % 10);
    strcat(longnum, "e-300");
    run("e_sscanf", e_sscanf, 0);
    memset(hay, 'a', sizeof hay - 1);
    memset(needle, 'a', 600);
    needle[599] = 'b';
    run("e_strstr", e_strstr, 0);
    run("e_qsort", e_qsort, 1);
    run("e_qsort_nohint", e_qsort_nohint, 1);
    run("e_assert", e_assert, 7);
    return 0;
}
