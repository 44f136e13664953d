/*
 * debug.c - the failure path of internal checks (debug.h).  Malloc-free:
 * it may run inside the allocator or a signal handler.
 */
#include "debug.h"

#include <stdlib.h>
#include <string.h>

#include "os/os.h"

_Noreturn void mote__assert_fail(const char *expr, const char *file, int line,
                                 const char *func)
{
    char num[21];
    const char *p = mote__os_u64_str((unsigned)line, num);
    const char *parts[] = {
        "mote: internal check failed: ", expr, " (", func, " at ", file, ":", p, ")\n"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        mote__os_write_err(parts[i]);
    abort();
}
