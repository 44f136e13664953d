/*
 * errors.c - names for mote's error values.  Stateless and thread-safe.
 */
#include <errno.h>
#include <string.h>

#include "mote.h"

const char *mote_strerror(int err)
{
    if (err == 0)
        return "success";
    if (err == MOTE_ECLOSED)
        return "channel closed";
    if (err == -EDEADLK)
        return "all tasks are asleep (deadlock)";
    if (err == -EPERM)
        return "not permitted here (no runtime, or not inside a task)";
    if (err < 0 && err > -4096) {
        const char *s = strerrordesc_np(-err);
        if (s)
            return s;
    }
    return "unknown error";
}
