# The allocator.  MOTE_HEAP_SOURCES go into libmote (mote_malloc & co.); the
# same sources built with MOTE_HEAP_PRELOAD, plus the OS layer and option
# table (MOTE_BASE_SOURCES), make libmote-malloc.so, a drop-in malloc for any
# program (LD_PRELOAD or link), which needs nothing from libmote at run time.
set(MOTE_HEAP_SOURCES
  src/heap/api.c
  src/heap/arena.c
  src/heap/asym.c
  src/heap/lock.c
  src/heap/page.c
  src/heap/profile.c
  src/heap/runcache.c
  src/heap/scavenger.c
  src/heap/sizeclass.c
  src/heap/stats.c
  src/heap/tcache.c
)

add_library(mote-malloc SHARED ${MOTE_HEAP_SOURCES} ${MOTE_BASE_SOURCES})
mote_internal_target(mote-malloc)
target_compile_definitions(mote-malloc PRIVATE MOTE_HEAP_PRELOAD=1)
# The thread cache pointer is initial-exec (static TLS), which a preloaded or
# linked library may use.  -fno-builtin-malloc & co. keep the compiler from
# turning our own calls into recursion.
target_compile_options(mote-malloc PRIVATE -fno-builtin-malloc
  -fno-builtin-free -fno-builtin-calloc -fno-builtin-realloc)
# gcc's analyser knows malloc, memalign, valloc, reallocarray... by name and
# applies its model of them to their own definitions here ("leak of
# memalign(...)" inside memalign).  Those two checks stay on for the same
# code in libmote, where the functions are named mote_*.
if(MOTE_ANALYZE)
  target_compile_options(mote-malloc PRIVATE -Wno-analyzer-malloc-leak
    -Wno-analyzer-use-after-free -Wno-analyzer-double-free)
endif()
target_link_libraries(mote-malloc PRIVATE Threads::Threads ${CMAKE_DL_LIBS})
target_link_options(mote-malloc PRIVATE -Wl,-z,nodelete)
set_target_properties(mote-malloc PROPERTIES OUTPUT_NAME mote-malloc
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
install(TARGETS mote-malloc LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
