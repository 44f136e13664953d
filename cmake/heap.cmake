# Placeholder until the allocator lands (issue 4): the runtime's allocations
# go through mote_malloc, which for now forwards to the C library.
set(MOTE_HEAP_SOURCES src/heap_libc.c)
