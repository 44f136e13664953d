/*
 * proc.c - readings from /proc: the process's memory as the kernel counts
 * it (see os.h).  Stateless.  All but mote__os_rss_in_ranges read into a
 * stack buffer and are malloc-free.
 */
#include "os/os.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mote__os_ncpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Reads a small /proc file into buf as a string; false when unreadable. */
static bool os_read_proc(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    return true;
}

uint64_t mote__os_rss_bytes(void)
{
    char buf[128];
    if (!os_read_proc("/proc/self/statm", buf, sizeof buf))
        return 0;
    char *p = strchr(buf, ' ');
    return p ? strtoull(p + 1, NULL, 10) * OS_PAGE : 0;
}

bool mote__os_last_live_thread(void)
{
    char buf[1024];
    if (!os_read_proc("/proc/self/stat", buf, sizeof buf))
        return false;
    /* pid (comm) state ... : comm may hold spaces and parentheses */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return false;
    char state = p[2]; /* field 3: the leader's */
    char *sp = p + 1;  /* the space before field 3, then before each next */
    for (int field = 3; field < 20 && sp; field++)
        sp = strchr(sp + 1, ' ');
    if (!sp)
        return false;
    long threads = strtol(sp + 1, NULL, 10); /* field 20: num_threads */
    if (threads == 1)
        return true;
    return threads == 2 && (state == 'Z' || state == 'X') &&
           mote__os_gettid() != getpid();
}

uint64_t mote__os_status_bytes(const char *field)
{
    char buf[4096];
    if (!os_read_proc("/proc/self/status", buf, sizeof buf))
        return 0;
    size_t fl = strlen(field);
    for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, field, fl) == 0 && l[fl] == ':')
            return strtoull(l + fl + 1, NULL, 10) * 1024;
    }
    return 0;
}

uint64_t mote__os_rss_in_ranges(const uintptr_t *starts, const uintptr_t *ends, size_t n)
{
    FILE *f = fopen("/proc/self/smaps", "re");
    if (!f)
        return 0;
    char line[512];
    uint64_t total = 0;
    bool inside = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (line[0] >= 'A' && line[0] <= 'Z') {
            if (inside && strncmp(line, "Rss:", 4) == 0)
                total += strtoull(line + 4, NULL, 10) * 1024;
            continue;
        }
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            inside = false;
            /* Adjacent reservations may merge into one mapping: count any
             * mapping that overlaps a range (named mappings merge only with
             * their own kind). */
            for (size_t i = 0; i < n; i++)
                if (lo < ends[i] && hi > starts[i]) {
                    inside = true;
                    break;
                }
        }
    }
    fclose(f);
    return total;
}

char mote__os_thread_state(int tid, long *syscall_nr)
{
    char path[64], buf[512];
    *syscall_nr = -1;
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    if (!os_read_proc(path, buf, sizeof buf))
        return '?';
    char *p = strrchr(buf, ')'); /* the thread's name may hold spaces */
    char st = p && p[1] == ' ' ? p[2] : '?';
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    if (st != 'R' && os_read_proc(path, buf, sizeof buf) && buf[0] >= '0' &&
        buf[0] <= '9')
        *syscall_nr = strtol(buf, NULL, 10);
    return st;
}
