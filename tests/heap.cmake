# Extra registrations for the allocator's tests (issue 4).
#
# test_heap_preload runs whole programs under LD_PRELOAD=libmote-malloc.so
# and compares their output with glibc's, one case per program (registered
# as every case is, by tests/CMakeLists.txt).  It needs the .so and a small
# library to dlopen (heap_dso, generated here: tests/ holds only test_*.c).
# Real programs: python3, sqlite3, git, cmake (Debian packages of the same
# names); a case exits 77 (SKIP) only when its program is not installed, or
# in a sanitizer build, where the sanitizer owns malloc.
if(TARGET test_heap_preload)
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/heap_dso.c
    "#include <stdlib.h>\n#include <string.h>\n"
    "__attribute__((constructor)) static void init(void) { free(strdup(\"ctor\")); }\n"
    "char *heap_dso_alloc(size_t n) { char *p = malloc(n); memset(p, 'x', n); return p; }\n"
    "void heap_dso_free(void *p) { free(p); }\n")
  add_library(heap_dso SHARED ${CMAKE_CURRENT_BINARY_DIR}/heap_dso.c)
  target_compile_options(heap_dso PRIVATE -fno-builtin)
  add_dependencies(test_heap_preload mote-malloc heap_dso)
  target_link_libraries(test_heap_preload PRIVATE ${CMAKE_DL_LIBS})
  # the inner checks call malloc & co. for their errors: no elision
  target_compile_options(test_heap_preload PRIVATE -fno-builtin)
  target_compile_definitions(test_heap_preload PRIVATE
    MOTE_MALLOC_SO="$<TARGET_FILE:mote-malloc>" HEAP_DSO="$<TARGET_FILE:heap_dso>")
endif()

# A forked child of a threaded parent may start the allocator's scavenger
# thread (a long-lived child needs one). TSan refuses new threads after such
# a fork unless told that the program means it.
if(TARGET test_heap_fork AND MOTE_SANITIZE STREQUAL "thread")
  set_property(TEST ${MOTE_TESTS_test_heap_fork} APPEND PROPERTY
    ENVIRONMENT "TSAN_OPTIONS=die_after_fork=0")
endif()
