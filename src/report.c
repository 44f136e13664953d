/*
 * report.c - see report.h.  The text lives in a buffer open_memstream
 * grows (libc's malloc); mote__report_write frees it whatever happens.
 */
#include "report.h"

#include <errno.h>
#include <stdlib.h>

#include "os/os.h"

int mote__report_open(report *r)
{
    r->text = NULL;
    r->len = 0;
    r->f = open_memstream(&r->text, &r->len);
    return r->f ? 0 : -ENOMEM;
}

int mote__report_write(report *r, int fd)
{
    int res = fclose(r->f) == 0 ? mote__os_write_all(fd, r->text, r->len) : -ENOMEM;
    free(r->text);
    r->f = NULL;
    r->text = NULL;
    return res;
}
