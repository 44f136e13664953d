# The allocator (issue 4).  MOTE_HEAP_SOURCES go into libmote (mote_malloc &
# co., heap_metric); the same sources built with MOTE_HEAP_PRELOAD make
# libmote-malloc.so, a drop-in malloc for any program (LD_PRELOAD or link),
# which needs nothing from libmote at run time.
set(MOTE_HEAP_SOURCES
  src/heap/api.c
  src/heap/arena.c
  src/heap/config.c
  src/heap/os.c
  src/heap/page.c
  src/heap/scavenger.c
  src/heap/sizeclass.c
  src/heap/stats.c
  src/heap/tcache.c
)

add_library(mote-malloc SHARED ${MOTE_HEAP_SOURCES})
# src/ is quote-only: src/sched.h must not shadow <sched.h>.
target_include_directories(mote-malloc PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include)
target_compile_options(mote-malloc PRIVATE -iquote ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_compile_definitions(mote-malloc PRIVATE _GNU_SOURCE MOTE_HEAP_PRELOAD=1)
# -ftls-model: the thread cache pointer is initial-exec (static TLS), which
# a preloaded or linked library may use.  -fno-builtin-malloc & co. keep the
# compiler from turning our own calls into recursion.
target_compile_options(mote-malloc PRIVATE -fvisibility=hidden -fno-builtin-malloc
  -fno-builtin-free -fno-builtin-calloc -fno-builtin-realloc)
target_link_libraries(mote-malloc PRIVATE Threads::Threads)
target_link_options(mote-malloc PRIVATE -Wl,-z,nodelete)
set_target_properties(mote-malloc PROPERTIES OUTPUT_NAME mote-malloc
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
install(TARGETS mote-malloc LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
