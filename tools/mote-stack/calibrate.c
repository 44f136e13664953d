/*
 * calibrate.c - `mote-stack calibrate`: measures the stack that library
 * calls, lazy binding and a signal frame really use on this machine.
 *
 * Method: a 2 MiB region is painted with a byte pattern, %rsp is pointed at
 * its top, the function is called directly from inline assembly (so no C
 * frame of ours sits in between), and the lowest byte that no longer holds
 * the pattern gives the depth, counted from %rsp before the call exactly
 * like frames.h.  Each call runs under two patterns (a byte the callee
 * happens to write with the pattern's value would hide a few bytes) at
 * each of the four 16-byte alignments of %rsp in 64 bytes (a function that
 * realigns its frame goes deeper at some); the first run includes one-time initialisation (stdio buffers, malloc's
 * arena, the time zone), which a task can hit too, so the maximum is kept.
 *
 * Library functions are called through the address dlsym gives (the IFUNC
 * variant this CPU selects), never through our PLT, so lazy binding is kept
 * out of them; it is measured on its own through assembly stubs that jump
 * to our own PLT entries for functions nothing else here calls.
 *
 * The signal frame is measured on a painted sigaltstack: the kernel puts
 * the frame (rt_sigframe + the xsave area, whose size depends on the CPU's
 * enabled features: AVX-512 makes it ~3.5 KB) at its top; the ucontext
 * pointer the handler receives sits 8 bytes above the frame's start.
 */
#include "costs.h"
#include "json.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef AT_MINSIGSTKSZ
#define AT_MINSIGSTKSZ 51
#endif

enum { REGION = 2 << 20, RUNS = 8 }; /* runs per call: 2 patterns x 4 alignments */

/* Arguments that only exist at run time: markers no real argument has. */
#define MARK(k)     ((const void *)(uintptr_t)(0x7eed0000u + (k)))
#define A_FILE      MARK(1)  /* a FILE* on /dev/null */
#define A_FD        MARK(2)  /* an fd on /dev/null */
#define A_BUF       MARK(3)  /* 64 KiB scratch buffer */
#define A_BUF2      MARK(4)  /* another one */
#define A_FRESH     MARK(5)  /* malloc(64), just allocated */
#define A_FRESHBIG  MARK(6)  /* malloc(4 MiB), just allocated */
#define A_SLOT      MARK(7)  /* a scratch word */
#define A_TM        MARK(8)  /* a struct tm */
#define A_TIME      MARK(9)  /* a time_t holding now */
#define A_MUTEX     MARK(10) /* a pthread mutex */
#define A_INTS      MARK(11) /* 1000 ints for qsort */
#define A_CMP       MARK(12) /* qsort comparator */
#define A_LONGSTR   MARK(13) /* a 60 KB string */
#define A_ZERO_TS   MARK(14) /* a zero struct timespec */
#define A_LOCKED    MARK(15) /* a locked pthread mutex */
#define A_PAGE      MARK(16) /* a fresh anonymous page */
#define A_COND      MARK(17) /* a pthread condition variable */
#define A_RWLOCK    MARK(18) /* a fresh rwlock */
#define A_RDLOCKED  MARK(19) /* a read-locked rwlock */
#define A_ATTR      MARK(20) /* initialised, detached pthread attributes */
#define A_THREADFN  MARK(21) /* a thread body that returns at once */
#define A_TOKSTR    MARK(22) /* a fresh "a=b&c=d..." string */
#define A_JMPBUF    MARK(23) /* a sigjmp_buf set in the measuring child */
#define A_UFILE     MARK(24) /* an unbuffered FILE* on /dev/null, like stderr */
#define A_LONGNUM   MARK(25) /* a 60000-digit decimal number */
#define A_MIDNUM    MARK(26) /* the same cut to 5000 digits */
#define A_FRESHFILE MARK(27) /* a FILE* just opened on /dev/null, written to */
#define A_STAT      MARK(28) /* room for a struct stat (A_BUF) */
#define A_SELF      MARK(29) /* pthread_self() */
#define A_MAX       29
#define N(x)        ((const void *)(uintptr_t)(x))

typedef struct pcall {
    const char *fn;
    const void *a[6];
    double d[4];
    int nvec;
} pcall;

#define FMT_INT  "%d %s %x %ld\n" /* four: with fmt and two more, six registers */
#define FMT_INT3 "%d %s %x\n"
#define FMT_FLT  "%f %g %e %a\n"
#define FMT_BIG  "%.400f\n"
#define FMT_STR  "%s|%-40s|%10.3s\n"

/* Every call, with the arguments that drive it deep.  v-variants are
 * charged like their plain forms below (they are the plain form's body). */
static const pcall calls[] = {
    {"printf", {FMT_INT, N(42), "str", N(0xbeef), N(-1L)}, {0}, 0},
    {"printf", {FMT_FLT}, {3.14159, 2.5e-10, 1e300, 0.1}, 4},
    {"printf", {FMT_BIG}, {1e300}, 1},
    {"printf", {FMT_STR, "abc", "def", "ghijkl"}, {0}, 0},
    {"fprintf", {A_FILE, FMT_INT, N(42), "str", N(0xbeef), N(-1L)}, {0}, 0},
    {"fprintf", {A_FILE, FMT_FLT}, {3.14159, 2.5e-10, 1e300, 0.1}, 4},
    {"fprintf", {A_FILE, FMT_BIG}, {1e300}, 1},
    {"sprintf", {A_BUF, FMT_INT, N(42), "str", N(0xbeef), N(-1L)}, {0}, 0},
    {"sprintf", {A_BUF, FMT_FLT}, {3.14159, 2.5e-10, 1e300, 0.1}, 4},
    {"sprintf", {A_BUF, FMT_BIG}, {1e300}, 1},
    {"snprintf", {A_BUF, N(4096), FMT_INT3, N(42), "str", N(0xbeef)}, {0}, 0},
    {"snprintf", {A_BUF, N(4096), FMT_FLT}, {3.14159, 2.5e-10, 1e300, 0.1}, 4},
    {"snprintf", {A_BUF, N(4096), FMT_BIG}, {1e300}, 1},
    {"dprintf", {A_FD, FMT_INT, N(42), "str", N(0xbeef), N(-1L)}, {0}, 0},
    {"dprintf", {A_FD, FMT_BIG}, {1e300}, 1},
    {"__printf_chk", {N(1), FMT_INT, N(42), "str", N(0xbeef), N(-1L)}, {0}, 0},
    {"__printf_chk", {N(1), FMT_BIG}, {1e300}, 1},
    {"__fprintf_chk", {A_FILE, N(1), FMT_BIG}, {1e300}, 1},
    /* An unbuffered stream (stderr) formats into an 8 KiB buffer on the
     * stack first (glibc's buffered_vfprintf): the deeper case. */
    {"fprintf", {A_UFILE, FMT_INT, N(42), "str", N(0xbeef), N(-1L)}, {0}, 0},
    {"fprintf", {A_UFILE, FMT_BIG}, {1e300}, 1},
    {"__fprintf_chk", {A_UFILE, N(1), FMT_BIG}, {1e300}, 1},
    {"fputs", {"a line\n", A_UFILE}, {0}, 0},
    {"fwrite", {A_BUF, N(1), N(8192), A_UFILE}, {0}, 0},
    {"fputc", {N('x'), A_UFILE}, {0}, 0},
    {"__sprintf_chk", {A_BUF, N(1), N(65536), FMT_BIG}, {1e300}, 1},
    {"__snprintf_chk", {A_BUF, N(4096), N(1), N(65536), FMT_BIG}, {1e300}, 1},
    {"puts", {"a line"}, {0}, 0},
    {"fputs", {"a line\n", A_FILE}, {0}, 0},
    {"fwrite", {A_BUF, N(1), N(8192), A_FILE}, {0}, 0},
    {"fputc", {N('x'), A_FILE}, {0}, 0},
    {"putchar", {N('x')}, {0}, 0},
    {"fflush", {A_FILE}, {0}, 0},
    {"malloc", {N(16)}, {0}, 0},
    {"malloc", {N(100000)}, {0}, 0},
    {"malloc", {N(4 << 20)}, {0}, 0},
    {"calloc", {N(100), N(100)}, {0}, 0},
    {"realloc", {A_FRESH, N(200000)}, {0}, 0},
    {"free", {A_FRESH}, {0}, 0},
    {"free", {A_FRESHBIG}, {0}, 0},
    {"posix_memalign", {A_SLOT, N(64), N(1000)}, {0}, 0},
    {"aligned_alloc", {N(64), N(1024)}, {0}, 0},
    {"strdup", {"a string to copy"}, {0}, 0},
    {"memcpy", {A_BUF, A_BUF2, N(65536)}, {0}, 0},
    {"memmove", {A_BUF, A_BUF2, N(60000)}, {0}, 0},
    {"memset", {A_BUF, N(0), N(65536)}, {0}, 0},
    {"memcmp", {A_BUF, A_BUF2, N(65536)}, {0}, 0},
    {"memchr", {A_BUF, N(1), N(65536)}, {0}, 0},
    {"strlen", {A_LONGSTR}, {0}, 0},
    {"strnlen", {A_LONGSTR, N(65536)}, {0}, 0},
    {"strcmp", {A_LONGSTR, A_LONGSTR}, {0}, 0},
    {"strncmp", {A_LONGSTR, A_LONGSTR, N(65536)}, {0}, 0},
    {"strcpy", {A_BUF, A_LONGSTR}, {0}, 0},
    {"strncpy", {A_BUF, A_LONGSTR, N(65536)}, {0}, 0},
    {"strchr", {A_LONGSTR, N('z')}, {0}, 0},
    {"strrchr", {A_LONGSTR, N('z')}, {0}, 0},
    {"strstr", {A_LONGSTR, "needle-not-there"}, {0}, 0},
    {"strtok_r", {A_TOKSTR, "&=", A_SLOT}, {0}, 0},
    {"strspn", {A_LONGSTR, "ab"}, {0}, 0},
    {"strcspn", {A_LONGSTR, "xyz"}, {0}, 0},
    {"strtol", {"-1234567890", NULL, N(10)}, {0}, 0},
    {"strtoul", {"1234567890", NULL, N(0)}, {0}, 0},
    {"strtoll", {"-123456789012345", NULL, N(10)}, {0}, 0},
    {"strtod",
     {"3.14159265358979323846264338327950288419716939937510e-300", NULL},
     {0},
     0},
    {"strtod", {"1234567890123456789012345678901234567890.5e200", NULL}, {0}, 0},
    {"atoi", {"123456"}, {0}, 0},
    {"atof", {"2.718281828459045235360287"}, {0}, 0},
    {"sscanf", {"42 word 3.5", "%d %15s %lf", A_SLOT, A_BUF, A_BUF2}, {0}, 0},
    {"__isoc99_sscanf", {"42 word 3.5", "%d %15s %lf", A_SLOT, A_BUF, A_BUF2}, {0}, 0},
    /* A number longer than scanf's on-stack scratch buffer. */
    {"sscanf", {A_LONGNUM, "%lf", A_SLOT}, {0}, 0},
    {"__isoc99_sscanf", {A_LONGNUM, "%lf", A_SLOT}, {0}, 0},
    {"strtod", {A_LONGNUM, NULL}, {0}, 0},
    {"sscanf", {A_MIDNUM, "%lf", A_SLOT}, {0}, 0},
    {"__isoc99_sscanf", {A_MIDNUM, "%lf", A_SLOT}, {0}, 0},
    {"strtod", {A_MIDNUM, NULL}, {0}, 0},
    {"qsort", {A_INTS, N(1000), N(sizeof(int)), A_CMP}, {0}, 0},
    {"time", {NULL}, {0}, 0},
    {"clock_gettime", {N(CLOCK_MONOTONIC), A_BUF}, {0}, 0},
    {"gettimeofday", {A_BUF, NULL}, {0}, 0},
    {"getpid", {NULL}, {0}, 0},
    {"write", {A_FD, A_BUF, N(100)}, {0}, 0},
    {"read", {A_FD, A_BUF, N(100)}, {0}, 0},
    {"localtime_r", {A_TIME, A_TM}, {0}, 0},
    {"gmtime_r", {A_TIME, A_TM}, {0}, 0},
    {"strftime", {A_BUF, N(200), "%Y-%m-%d %H:%M:%S %Z %a %b", A_TM}, {0}, 0},
    {"getenv", {"HOME"}, {0}, 0},
    {"pthread_mutex_lock", {A_MUTEX}, {0}, 0},
    {"pthread_mutex_unlock", {A_LOCKED}, {0}, 0},
    {"pthread_self", {NULL}, {0}, 0},
    {"nanosleep", {A_ZERO_TS, NULL}, {0}, 0},
    /* System call wrappers the runtime and servers use. */
    {"syscall", {N(39) /* SYS_getpid */}, {0}, 0},
    {"mmap",
     {NULL, N(4096), N(1) /* PROT_READ */, N(0x22) /* PRIVATE|ANON */, N(-1L), N(0)},
     {0},
     0},
    {"munmap", {A_PAGE, N(4096)}, {0}, 0},
    {"madvise", {A_PAGE, N(4096), N(4) /* MADV_DONTNEED */}, {0}, 0},
    {"mprotect", {A_PAGE, N(4096), N(1)}, {0}, 0},
    {"mincore", {A_PAGE, N(4096), A_BUF}, {0}, 0},
    {"__errno_location", {NULL}, {0}, 0},
    {"getauxval", {N(6) /* AT_PAGESZ */}, {0}, 0},
    {"sysconf", {N(84) /* _SC_NPROCESSORS_ONLN */}, {0}, 0},
    {"sysconf", {N(30) /* _SC_PAGESIZE */}, {0}, 0},
    {"pthread_getspecific", {N(0)}, {0}, 0},
    {"pthread_setspecific", {N(0), A_BUF}, {0}, 0},
    {"sched_yield", {NULL}, {0}, 0},
    {"sigaction", {N(12) /* SIGUSR2 */, NULL, A_BUF}, {0}, 0},
    {"sigaltstack", {NULL, A_BUF}, {0}, 0},
    {"pthread_sigmask", {N(0), NULL, A_BUF}, {0}, 0},
    {"close", {N(-1L)}, {0}, 0},
    {"prctl", {N(16) /* PR_GET_NAME */, A_BUF}, {0}, 0},
    {"clock_nanosleep", {N(CLOCK_MONOTONIC), N(0), A_ZERO_TS, NULL}, {0}, 0},
    {"pthread_mutex_trylock", {A_MUTEX}, {0}, 0},
    {"pthread_cond_signal", {A_COND}, {0}, 0},
    {"pthread_cond_broadcast", {A_COND}, {0}, 0},
    {"getrandom", {A_BUF, N(16), N(0)}, {0}, 0},
    {"pthread_key_create", {A_BUF, NULL}, {0}, 0},
    {"pthread_rwlock_rdlock", {A_RWLOCK}, {0}, 0},
    {"pthread_rwlock_wrlock", {A_RWLOCK}, {0}, 0},
    {"pthread_rwlock_unlock", {A_RDLOCKED}, {0}, 0},
    {"pthread_attr_init", {A_BUF}, {0}, 0},
    {"pthread_attr_setstacksize", {A_ATTR, N(1 << 20)}, {0}, 0},
    {"pthread_attr_setdetachstate", {A_ATTR, N(1)}, {0}, 0},
    {"pthread_attr_destroy", {A_ATTR}, {0}, 0},
    {"pthread_create", {A_BUF, A_ATTR, A_THREADFN, NULL}, {0}, 0},
    {"__register_atfork", {NULL, NULL, NULL, NULL}, {0}, 0},
    {"sigfillset", {A_BUF}, {0}, 0},
    {"sigemptyset", {A_BUF}, {0}, 0},
    {"strerror", {N(22)}, {0}, 0},
    {"strerrordesc_np", {N(22)}, {0}, 0},
    {"open", {"/dev/null", N(0)}, {0}, 0}, /* leaks six descriptors: harmless here */
    {"openat", {N(-100) /* AT_FDCWD */, "/dev/null", N(0)}, {0}, 0},
    /* (the runtime's own: signal masks, the task dump's memory stream, the
     * poller and the stack freezer's ioctls) */
    {"sigdelset", {A_BUF, N(10)}, {0}, 0},
    {"sigaddset", {A_BUF, N(10)}, {0}, 0},
    {"open_memstream", {A_SLOT, A_BUF}, {0}, 0}, /* leaks a stream: harmless here */
    {"poll", {A_BUF, N(0), N(0)}, {0}, 0},
    {"ioctl", {A_FD, N(0x541b) /* FIONREAD */, A_BUF}, {0}, 0},
    {"epoll_wait", {N(-1L), A_BUF, N(1), N(0)}, {0}, 0},
    {"epoll_pwait", {N(-1L), A_BUF, N(1), N(0), NULL}, {0}, 0},
    {"epoll_ctl", {N(-1L), N(1), N(0), A_BUF}, {0}, 0},
    {"eventfd", {N(0), N(0)}, {0}, 0},
    {"fcntl", {A_FD, N(3) /* F_GETFL */}, {0}, 0},
    {"fclose", {A_FRESHFILE}, {0}, 0},
    {"fstat", {A_FD, A_STAT}, {0}, 0},
    {"pread", {A_FD, A_BUF, N(100), N(0)}, {0}, 0},
    {"mremap", {A_PAGE, N(4096), N(8192), N(1) /* MREMAP_MAYMOVE */}, {0}, 0},
    {"dladdr1", {A_CMP, A_BUF, A_SLOT, N(1) /* RTLD_DL_SYMENT */}, {0}, 0},
    {"pthread_getattr_np", {A_SELF, A_BUF}, {0}, 0},
    {"pthread_attr_getstack", {A_ATTR, A_SLOT, A_BUF}, {0}, 0},
};

/* Functions that never return: each is measured in a child process on
 * the shared painted region (the child ends inside the call; the parent
 * reads the paint).  They format a message on the caller's stack first
 * (errx, __assert_fail: through unbuffered stderr) or run atexit handlers
 * and flush stdio (exit), so 0 would be no bound. */
static const pcall noreturn_calls[] = {
    {"abort", {NULL}, {0}, 0},
    {"exit", {N(0)}, {0}, 0},
    {"_exit", {N(0)}, {0}, 0},
    {"_Exit", {N(0)}, {0}, 0},
    {"quick_exit", {N(0)}, {0}, 0},
    {"__assert_fail",
     {"value == 0", "a-rather-long-file-name.c", N(4242), "function"},
     {0},
     0},
    {"__assert_perror_fail",
     {N(22), "a-rather-long-file-name.c", N(4242), "function"},
     {0},
     0},
    {"__stack_chk_fail", {NULL}, {0}, 0},
    {"__chk_fail", {NULL}, {0}, 0},
    {"err", {N(3), FMT_BIG}, {1e300}, 1},
    {"err", {N(3), FMT_INT, N(42), "str", N(0xbeef), N(-1L)}, {0}, 0},
    {"errx", {N(3), FMT_BIG}, {1e300}, 1},
    {"errx", {N(3), FMT_INT, N(42), "str", N(0xbeef), N(-1L)}, {0}, 0},
    {"longjmp", {A_JMPBUF, N(1)}, {0}, 0},
    {"_longjmp", {A_JMPBUF, N(1)}, {0}, 0},
    {"siglongjmp", {A_JMPBUF, N(1)}, {0}, 0},
    {"__longjmp_chk", {A_JMPBUF, N(1)}, {0}, 0},
};

/* The child's way back from a longjmp: set before the call. */
static sigjmp_buf child_jb;

/* Charged like the plain form they share their body with. */
static const char *const alias[][2] = {
    {"vprintf", "printf"},
    {"vfprintf", "fprintf"},
    {"vsprintf", "sprintf"},
    {"vsnprintf", "snprintf"},
    {"vdprintf", "dprintf"},
    {"__vfprintf_chk", "__fprintf_chk"},
    {"__vsnprintf_chk", "__snprintf_chk"},
    {"__vsprintf_chk", "__sprintf_chk"},
    {"__vprintf_chk", "__printf_chk"},
    {"vsscanf", "sscanf"},
    {"__isoc99_vsscanf", "sscanf"},
    {"verr", "err"},
    {"verrx", "errx"},
    {"localtime", "localtime_r"},
    {"gmtime", "gmtime_r"},
    {"__memcpy_chk", "memcpy"},
    {"__memmove_chk", "memmove"},
    {"__memset_chk", "memset"},
    {"__strcpy_chk", "strcpy"},
    {"__strncpy_chk", "strncpy"},
    {"mempcpy", "memcpy"},
    {"stpcpy", "strcpy"},
    {"strcat", "strcpy"},
    {"strncat", "strncpy"},
    {"strcasecmp", "strcmp"},
    {"strncasecmp", "strncmp"},
    {"atol", "strtol"},
    {"mmap64", "mmap"},
    {"strtok", "strtok_r"},
    {"open64", "open"},
    {"pthread_atfork", "__register_atfork"},
    {"__strerror_r", "strerror"},
    {"atoll", "strtoll"},
    {"strtoull", "strtoul"},
    {"strtof", "strtod"},
    {"strndup", "strdup"},
    {"putc", "fputc"},
    {"_IO_putc", "fputc"},
    {"fputs_unlocked", "fputs"},
    {"fwrite_unlocked", "fwrite"},
    {"usleep", "nanosleep"},
};

static const char *const lazy_names[] = {"getppid", "getpgrp", "getuid", "getgid"};

/* Stubs that jump through our own PLT: their first call binds lazily.
 * Nothing else in mote-stack calls these four functions. */
__asm__(".text\n"
        ".p2align 4\n"
        "mote_stack_lazy0: jmp getppid@PLT\n"
        ".p2align 4\n"
        "mote_stack_lazy1: jmp getpgrp@PLT\n"
        ".p2align 4\n"
        "mote_stack_lazy2: jmp getuid@PLT\n"
        ".p2align 4\n"
        "mote_stack_lazy3: jmp getgid@PLT\n");
void mote_stack_lazy0(void);
void mote_stack_lazy1(void);
void mote_stack_lazy2(void);
void mote_stack_lazy3(void);

/* Calls fn with the stack pointer at top, with the SysV argument
 * registers (and %al, the vector count of variadic calls) loaded. */
static void call_on(void *top, const void *fn, const uintptr_t a[6], const double d[4],
                    int nvec)
{
    register uintptr_t rdi __asm__("rdi") = a[0];
    register uintptr_t rsi __asm__("rsi") = a[1];
    register uintptr_t rdx __asm__("rdx") = a[2];
    register uintptr_t rcx __asm__("rcx") = a[3];
    register uintptr_t r8 __asm__("r8") = a[4];
    register uintptr_t r9 __asm__("r9") = a[5];
    register uintptr_t rax __asm__("rax") = (uintptr_t)nvec;
    register double x0 __asm__("xmm0") = d[0];
    register double x1 __asm__("xmm1") = d[1];
    register double x2 __asm__("xmm2") = d[2];
    register double x3 __asm__("xmm3") = d[3];
    __asm__ volatile("mov %%rsp, %%rbx\n\t"
                     "mov %[top], %%rsp\n\t"
                     "call *%[fn]\n\t"
                     "mov %%rbx, %%rsp\n\t"
                     : "+r"(rdi), "+r"(rsi), "+r"(rdx), "+r"(rcx), "+r"(r8), "+r"(r9),
                       "+r"(rax), "+x"(x0), "+x"(x1), "+x"(x2), "+x"(x3)
                     : [top] "r"(top), [fn] "r"(fn)
                     : "rbx", "r10", "r11", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                       "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15",
                       "memory", "cc");
}

typedef struct ctx {
    uint8_t *lo, *top;
    FILE *devnull, *unbuffered;
    char *longnum, *midnum;
    int fd;
    char *buf, *buf2, *longstr;
    void *slot[4];
    struct tm tm;
    struct timespec ts;
    time_t now;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    pthread_rwlock_t rw;
    char tok[128];
    pthread_attr_t attr;
    int ints[1000];
} ctx;

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static void *thread_body(void *arg) { return arg; }

static uintptr_t resolve(ctx *c, const void *arg)
{
    uintptr_t k = (uintptr_t)arg - 0x7eed0000u;
    if ((uintptr_t)arg < 0x7eed0000u || k > A_MAX)
        return (uintptr_t)arg;
    switch (k) {
    case 1: return (uintptr_t)c->devnull;
    case 2: return (uintptr_t)c->fd;
    case 3: return (uintptr_t)c->buf;
    case 4: return (uintptr_t)c->buf2;
    case 5: return (uintptr_t)malloc(64);
    case 6: return (uintptr_t)malloc(4 << 20);
    case 7: return (uintptr_t)c->slot;
    case 8: return (uintptr_t)&c->tm;
    case 9: return (uintptr_t)&c->now;
    case 10:
    case 15:
        pthread_mutex_init(&c->mutex, NULL);
        if (k == 15)
            pthread_mutex_lock(&c->mutex);
        return (uintptr_t)&c->mutex;
    case 11:
        for (int i = 0; i < 1000; i++)
            c->ints[i] = (i * 7919) % 1000;
        return (uintptr_t)c->ints;
    case 12: return (uintptr_t)cmp_int;
    case 13: return (uintptr_t)c->longstr;
    case 16: {
        void *p =
            mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? 0 : (uintptr_t)p;
    }
    case 17: pthread_cond_init(&c->cond, NULL); return (uintptr_t)&c->cond;
    case 18:
    case 19:
        pthread_rwlock_init(&c->rw, NULL);
        if (k == 19)
            pthread_rwlock_rdlock(&c->rw);
        return (uintptr_t)&c->rw;
    case 20:
        pthread_attr_init(&c->attr);
        pthread_attr_setdetachstate(&c->attr, PTHREAD_CREATE_DETACHED);
        return (uintptr_t)&c->attr;
    case 21: return (uintptr_t)thread_body;
    case 23: return (uintptr_t)child_jb;
    case 24: return (uintptr_t)c->unbuffered;
    case 25: return (uintptr_t)c->longnum;
    case 26: return (uintptr_t)c->midnum;
    case 22:
        snprintf(c->tok, sizeof c->tok, "name=widget&color=blue&size=3&note=a<b&x=y");
        return (uintptr_t)c->tok;
    case 14: memset(&c->ts, 0, sizeof c->ts); return (uintptr_t)&c->ts;
    case 27: {
        FILE *f = fopen("/dev/null", "w");
        if (f)
            fputs("some bytes for the close to flush\n", f);
        return (uintptr_t)f;
    }
    case 28: return (uintptr_t)c->buf;
    case 29: return (uintptr_t)pthread_self();
    default: return (uintptr_t)arg;
    }
}

/* Depth of one call made off bytes (a multiple of 16) below the top: the
 * lowest byte that lost the paint. */
static long measure(ctx *c, const void *fn, const uintptr_t a[6], const double d[4],
                    int nvec, uint8_t paint, size_t off)
{
    uint8_t *top = c->top - off;
    memset(c->lo, paint, (size_t)(c->top - c->lo));
    call_on(top, fn, a, d, nvec);
    uint8_t *p = c->lo;
    while (p < top && *p == paint)
        p++;
    if (p == c->lo)
        return -1; /* used all 2 MiB: not measurable here */
    return top - p;
}

/* Depth of a call made in a child process, off bytes below the top of the
 * region (shared with the child), with stdout and stderr on /dev/null and
 * no core dump.  The parent never makes the call itself, so every child
 * meets the function's first-call work (a scratch buffer's first malloc,
 * stdio's buffer) at every alignment.  noret: the call must end the
 * process; -1 when it returned, or did not end inside the call. */
static long measure_child(ctx *c, const void *fn, const uintptr_t a[6], const double d[4],
                          int nvec, uint8_t paint, size_t off, bool noret)
{
    uint8_t *top = c->top - off;
    memset(c->lo, paint, (size_t)(c->top - c->lo));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        struct rlimit rl = {0, 0};
        setrlimit(RLIMIT_CORE, &rl);
        dup2(c->fd, 1);
        dup2(c->fd, 2);
        signal(SIGABRT, SIG_DFL);
        if (sigsetjmp(child_jb, 1))
            _exit(0); /* a longjmp came back */
        call_on(top, fn, a, d, nvec);
        _exit(noret ? 99 : 0);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!noret && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        return -1;
    if (noret && WIFEXITED(st) && WEXITSTATUS(st) == 99)
        return -1;
    uint8_t *p = c->lo;
    while (p < top && *p == paint)
        p++;
    if (p == c->lo)
        return -1;
    return top - p;
}

static long measure_call(ctx *c, const pcall *pc, const void *fn, bool noret)
{
    long worst = 0;
    /* Functions that realign their frame (and rsp,-64) go deeper or not
     * by where the caller's %rsp sits in 64 bytes: every 16-byte step. */
    for (int run = 0; run < RUNS; run++) {
        uintptr_t a[6];
        for (int i = 0; i < 6; i++)
            a[i] = resolve(c, pc->a[i]);
        long d = measure_child(c, fn, a, pc->d, pc->nvec, run & 1 ? 0x5a : 0xa5,
                               (size_t)(run / 2 % 4) * 16, noret);
        if (strcmp(pc->fn, "posix_memalign") == 0)
            free(c->slot[0]);
        c->slot[0] = NULL;
        if (d < 0)
            return -1;
        if (d > worst)
            worst = d;
    }
    return worst;
}

static volatile uintptr_t sig_uc;

static void on_signal(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)si;
    sig_uc = (uintptr_t)uc;
}

/* The kernel's signal frame on a painted alternate stack. */
static long measure_sigframe(ctx *c)
{
    stack_t ss = {.ss_sp = c->lo, .ss_size = (size_t)(c->top - c->lo), .ss_flags = 0},
            old;
    struct sigaction sa, oldsa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaltstack(&ss, &old) != 0 || sigaction(SIGUSR2, &sa, &oldsa) != 0)
        return -1;
    sig_uc = 0;
    raise(SIGUSR2);
    sigaction(SIGUSR2, &oldsa, NULL);
    sigaltstack(&old, NULL);
    if (!sig_uc)
        return -1;
    return (long)((uintptr_t)c->top - (sig_uc - 8));
}

typedef struct row {
    const char *name;
    long bytes;
} row;

static int cmp_row(const void *a, const void *b)
{
    return strcmp(((const row *)a)->name, ((const row *)b)->name);
}

static void machine_line(char *buf, size_t n)
{
    char cpu[128] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *v = strchr(line, ':');
            if (v) {
                v += 1 + strspn(v + 1, " \t");
                v[strcspn(v, "\n")] = 0;
                snprintf(cpu, sizeof cpu, "%s", v);
            }
            break;
        }
    }
    if (f)
        fclose(f);
    struct utsname u;
    if (uname(&u) != 0)
        strcpy(u.release, "?");
    snprintf(buf, n, "%s, Linux %s, glibc %s, AT_MINSIGSTKSZ %lu", cpu, u.release,
             gnu_get_libc_version(), getauxval(AT_MINSIGSTKSZ));
}

int cmd_calibrate(const char *out, bool json)
{
    /* Before seconds of measuring: a path that cannot be written fails
     * now (the file is written, from the start, at the end). */
    if (out && strcmp(out, "-") != 0) {
        FILE *probe = fopen(out, "a");
        if (!probe) {
            msg_error("cannot write %s: %s", out, strerror(errno));
            return EXIT_INPUT;
        }
        fclose(probe);
    }
    ctx c;
    memset(&c, 0, sizeof c);
    uint8_t *region = mmap(NULL, REGION, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (region == MAP_FAILED) {
        msg_error("calibrate: cannot map a %d MiB test stack: %s", REGION >> 20,
                  strerror(errno));
        return EXIT_INPUT;
    }
    c.lo = region;
    /* Shared, so that a child measuring a noreturn function leaves its
     * paint for us to read.  A page above the top: variadic and 7-argument functions (syscall)
     * read the caller's stack arguments there. */
    c.top = region + REGION - 4096;
    c.devnull = fopen("/dev/null", "w");
    c.fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    c.buf = xcalloc(1, 65536 + 64);
    c.buf2 = xcalloc(1, 65536 + 64);
    c.longstr = xmalloc(60001);
    memset(c.longstr, 'a', 60000);
    c.longstr[60000] = 0;
    c.longnum = xmalloc(60016);
    strcpy(c.longnum, "0.");
    for (int i = 2; i < 60000; i++)
        c.longnum[i] = (char)('0' + (i * 7) % 10);
    strcpy(c.longnum + 60000, "e-300");
    c.midnum = xmalloc(5016);
    memcpy(c.midnum, c.longnum, 5000);
    strcpy(c.midnum + 5000, "e-300");
    c.unbuffered = fopen("/dev/null", "w");
    if (c.unbuffered)
        setvbuf(c.unbuffered, NULL, _IONBF, 0);
    c.now = time(NULL);
    pthread_mutex_init(&c.mutex, NULL);
    if (!c.devnull || !c.unbuffered || c.fd < 0) {
        msg_error("calibrate: cannot open /dev/null");
        return EXIT_INPUT;
    }
    /* printf and puts write to stdout: send it to /dev/null meanwhile. */
    fflush(stdout);
    int saved = dup(1);
    dup2(c.fd, 1);

    size_t ncalls = sizeof calls / sizeof *calls, nrows = 0;
    size_t nnoret = sizeof noreturn_calls / sizeof *noreturn_calls;
    row *rows = xcalloc(ncalls + nnoret + sizeof alias / sizeof *alias, sizeof *rows);
    int missing = 0;
    /* Two passes: stdout buffered, then unbuffered (as a program may set
     * it), where printf and puts take buffered_vfprintf's 8 KiB. */
    for (size_t pass = 0; pass < 2 * ncalls; pass++) {
        size_t i = pass % ncalls;
        if (pass == ncalls) {
            fflush(stdout);
            setvbuf(stdout, NULL, _IONBF, 0);
        }
        const void *fn = dlsym(RTLD_DEFAULT, calls[i].fn);
        if (!fn) {
            missing += pass < ncalls;
            continue;
        }
        long d = measure_call(&c, &calls[i], fn, false);
        size_t k;
        for (k = 0; k < nrows && strcmp(rows[k].name, calls[i].fn) != 0; k++)
            ;
        if (k == nrows) {
            rows[nrows].name = calls[i].fn;
            rows[nrows++].bytes = d;
        } else if (d < 0 || (rows[k].bytes >= 0 && d > rows[k].bytes)) {
            rows[k].bytes = d;
        }
    }
    for (size_t i = 0; i < nnoret; i++) {
        const pcall *pc = &noreturn_calls[i];
        const void *fn = dlsym(RTLD_DEFAULT, pc->fn);
        if (!fn) {
            missing++;
            continue;
        }
        long d = measure_call(&c, pc, fn, true);
        size_t k;
        for (k = 0; k < nrows && strcmp(rows[k].name, pc->fn) != 0; k++)
            ;
        if (k == nrows) {
            rows[nrows].name = pc->fn;
            rows[nrows++].bytes = d;
        } else if (d < 0 || (rows[k].bytes >= 0 && d > rows[k].bytes)) {
            rows[k].bytes = d;
        }
    }
    /* The C99 and the old scanf share the work, yet measure apart (the
     * long-number path shows in one only): charge both the larger. */
    static const char *const same[][2] = {{"__isoc99_sscanf", "sscanf"}};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
        row *x = NULL, *y = NULL;
        for (size_t k = 0; k < nrows; k++) {
            if (strcmp(rows[k].name, same[i][0]) == 0)
                x = &rows[k];
            if (strcmp(rows[k].name, same[i][1]) == 0)
                y = &rows[k];
        }
        if (x && y && x->bytes >= 0 && y->bytes >= 0)
            x->bytes = y->bytes = x->bytes > y->bytes ? x->bytes : y->bytes;
    }
    size_t measured = nrows;
    for (size_t i = 0; i < sizeof alias / sizeof *alias; i++)
        for (size_t k = 0; k < measured; k++)
            if (strcmp(rows[k].name, alias[i][1]) == 0) {
                rows[nrows].name = alias[i][0];
                rows[nrows++].bytes = rows[k].bytes;
            }

    /* Lazy binding: first and second call through each stub. */
    void (*const stubs[])(void) = {mote_stack_lazy0, mote_stack_lazy1, mote_stack_lazy2,
                                   mote_stack_lazy3};
    long lazy = -1;
    const char *lazy_note = "";
    const char *bindnow = getenv("LD_BIND_NOW");
    uintptr_t noargs[6] = {0};
    double nod[4] = {0};
    for (size_t i = 0; i < 4; i++) {
        /* Each stub binds once: the four at four alignments (the
         * resolver's xsave area is 64-byte aligned). */
        long first = measure(&c, (const void *)stubs[i], noargs, nod, 0, 0xa5, i * 16);
        long second = measure(&c, (const void *)stubs[i], noargs, nod, 0, 0xa5, i * 16);
        if (first > second + 256 && first > lazy)
            lazy = first;
    }
    if (lazy < 0) {
        costs def;
        costs_load(&def, NULL);
        lazy = def.lazybind;
        costs_free(&def);
        lazy_note = bindnow && *bindnow
                        ? "  # not measured (LD_BIND_NOW is set): built-in value"
                        : "  # not measured (bound at load time): built-in value";
    }
    (void)lazy_names;
    /* The frame's start is aligned down from the interrupted %rsp, so its
     * size varies by up to 64 bytes; the kernel's own figure for the
     * largest frame (AT_MINSIGSTKSZ) covers that, take the larger. */
    long sigmeasured = measure_sigframe(&c);
    long sigframe = sigmeasured;
    if ((long)getauxval(AT_MINSIGSTKSZ) > sigframe)
        sigframe = (long)getauxval(AT_MINSIGSTKSZ);

    fflush(stdout);
    dup2(saved, 1);
    close(saved);

    qsort(rows, nrows, sizeof *rows, cmp_row);
    char machine[512];
    machine_line(machine, sizeof machine);
    FILE *f = stdout;
    if (out && strcmp(out, "-") != 0) {
        f = fopen(out, "w");
        if (!f) {
            msg_error("cannot write %s: %s", out, strerror(errno));
            return EXIT_INPUT;
        }
    }
    costs def;
    costs_load(&def, NULL);
    int runtime = def.runtime;
    costs_free(&def);
    if (json) {
        jw w;
        jw_init(&w, f);
        jw_obj(&w, NULL);
        jw_str(&w, "machine", machine);
        jw_obj(&w, "reserves");
        jw_int(&w, "sigframe", sigframe);
        jw_int(&w, "sigframe_measured", sigmeasured);
        jw_int(&w, "redzone", 128);
        jw_int(&w, "lazybind", lazy);
        jw_int(&w, "runtime", runtime);
        jw_end_obj(&w);
        jw_obj(&w, "functions");
        for (size_t i = 0; i < nrows; i++)
            if (rows[i].bytes >= 0)
                jw_int(&w, rows[i].name, rows[i].bytes);
        jw_end_obj(&w);
        jw_end_obj(&w);
        jw_done(&w);
    } else {
        fprintf(f, "# mote-stack cost table: stack bytes a call uses, counted from the\n"
                   "# caller's %%rsp before the call (return address included).\n"
                   "# Written by `mote-stack calibrate`; read with --costs FILE.\n");
        fprintf(f, "# machine: %s\n", machine);
        fprintf(f,
                "@sigframe %ld  # kernel signal frame (rt_sigframe + xsave area): "
                "measured %ld, AT_MINSIGSTKSZ %lu\n",
                sigframe, sigmeasured, getauxval(AT_MINSIGSTKSZ));
        fprintf(f, "@redzone 128  # skipped by the kernel below the interrupted %%rsp\n");
        fprintf(f, "@lazybind %ld%s\n", lazy,
                *lazy_note
                    ? lazy_note
                    : "  # first call through a lazy PLT slot (_dl_runtime_resolve)");
        fprintf(f,
                "@runtime %d  # mote above the entry's caller: slot top + task_entry\n",
                runtime);
        for (size_t i = 0; i < nrows; i++) {
            if (rows[i].bytes < 0)
                fprintf(f, "# %s: used more than %d MiB, not measured\n", rows[i].name,
                        REGION >> 20);
            else
                fprintf(f, "%s %ld%s\n", rows[i].name, rows[i].bytes,
                        strcmp(rows[i].name, "qsort") == 0
                            ? "  # plus the comparator's own frames"
                            : "");
        }
    }
    /* (a full disk would leave a table cut short, whose missing reserves
     * read as 0) */
    bool failed = fflush(f) != 0 || ferror(f);
    if (f != stdout && fclose(f) != 0)
        failed = true;
    if (failed)
        msg_error("calibrate: cannot write %s: %s", f == stdout ? "the output" : out,
                  strerror(errno ? errno : EIO));
    if (missing)
        msg_warn("calibrate: %d calls skipped (not found by dlsym)", missing);
    munmap(region, REGION);
    fclose(c.devnull);
    fclose(c.unbuffered);
    close(c.fd);
    free(c.longnum);
    free(c.midnum);
    free(c.buf);
    free(c.buf2);
    free(c.longstr);
    free(rows);
    return failed ? EXIT_INPUT : 0;
}
