/* heap_libc.c - temporary: mote_malloc & co. forward to the C library until
 * mote's own allocator (issue 4) replaces this file. */
#include <malloc.h>
#include <stdlib.h>
#include "mote.h"
#define API __attribute__((visibility("default")))
API void *mote_malloc(size_t n) { return malloc(n); }
API void *mote_calloc(size_t n, size_t s) { return calloc(n, s); }
API void *mote_realloc(void *p, size_t n) { return realloc(p, n); }
API void mote_free(void *p) { free(p); }
API void *mote_aligned_alloc(size_t a, size_t n) { return aligned_alloc(a, n); }
API size_t mote_usable_size(const void *p) { return malloc_usable_size((void *)p); }
API void mote_mem_release(void) { malloc_trim(0); }
