/*
 * symbol.h - names a code address for diagnostics, including functions that
 * are not exported (static ones): dladdr first, then the full symbol table
 * of the object file that contains the address.
 */
#ifndef MOTE_SYMBOL_H
#define MOTE_SYMBOL_H

#include <stddef.h>

/* Writes the name of the function containing addr into buf; false when
 * none is found.  Uses only open/read/mmap, so it also works from the
 * overflow handler. */
_Bool mote__symbol_name(const void *addr, char *buf, size_t len);

#endif
