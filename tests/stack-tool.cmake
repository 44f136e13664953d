# mote-stack (tools/mote-stack): the corpus against gcc's -fstack-usage and
# clang's .stack_sizes in every build variant, bad inputs, check, traces,
# entries found from mote_go calls, bounds against measured depths,
# calibrate, and the seed story.  Driven by tests/stack-corpus/run.py; a
# test exits 77 (skipped) only when its compiler or python3 is absent.
if(MOTE_STACK_BUILT)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(_st_run ${CMAKE_CURRENT_SOURCE_DIR}/stack-corpus/run.py)
  set(_st_src ${CMAKE_CURRENT_SOURCE_DIR}/stack-corpus)
  set(_st_work ${CMAKE_CURRENT_BINARY_DIR}/stack-work)
  if(Python3_Interpreter_FOUND)
    set(_st_py ${Python3_EXECUTABLE})
  else()
    set(_st_py sh -c "exit 77" --)
  endif()
  set(_st_tool $<TARGET_FILE:mote-stack>)
  find_program(MOTE_STACK_GCC gcc)
  find_program(MOTE_STACK_CLANG clang)
  foreach(cc gcc clang)
    string(TOUPPER ${cc} _up)
    if(MOTE_STACK_${_up})
      set(_cc ${MOTE_STACK_${_up}})
    else()
      set(_cc ${cc}) # run.py skips (77) when it cannot find it
    endif()
    add_test(NAME stack_corpus_${cc}
      COMMAND ${_st_py} ${_st_run} corpus ${_st_tool} ${_st_src} ${_st_work}/corpus ${_cc})
  endforeach()
  add_test(NAME stack_errors COMMAND ${_st_py} ${_st_run} errors ${_st_tool} ${_st_src} ${_st_work}/errors)
  add_test(NAME stack_check COMMAND ${_st_py} ${_st_run} check ${_st_tool} ${_st_src} ${_st_work}/check)
  add_test(NAME stack_traces COMMAND ${_st_py} ${_st_run} traces ${_st_tool} ${_st_src} ${_st_work}/traces)
  # spawn links the corpus with libmote.a as a user would, which a
  # sanitized libmote.a cannot be without the sanitizer's runtime.
  if(MOTE_SANITIZE STREQUAL "")
    add_test(NAME stack_spawn COMMAND ${_st_py} ${_st_run} spawn ${_st_tool} ${_st_src} ${_st_work}/spawn
      ${CMAKE_C_COMPILER} ${CMAKE_SOURCE_DIR}/include $<TARGET_FILE:mote_static>)
  else()
    add_test(NAME stack_spawn COMMAND sh -c "exit 77")
  endif()
  # The runtime's measured depths (exact only without a sanitizer: its
  # frames and redzones are on the same stacks) against the static bounds.
  set(_st_ccs ${CMAKE_C_COMPILER})
  foreach(_cc ${MOTE_STACK_GCC} ${MOTE_STACK_CLANG})
    list(APPEND _st_ccs ${_cc})
  endforeach()
  list(REMOVE_DUPLICATES _st_ccs)
  if(MOTE_SANITIZE STREQUAL "")
    add_test(NAME stack_live COMMAND ${_st_py} ${_st_run} live ${_st_tool} ${_st_src} ${_st_work}/live
      "${_st_ccs}" ${CMAKE_SOURCE_DIR}/include $<TARGET_FILE:mote_static>)
  else()
    add_test(NAME stack_live COMMAND sh -c "exit 77")
  endif()
  # Bounds against depths measured on a painted stack.
  add_test(NAME stack_sound COMMAND ${_st_py} ${_st_run} sound ${_st_tool} ${_st_src} ${_st_work}/sound
    ${CMAKE_C_COMPILER})
  # Under a sanitizer dlsym finds its interceptors, not libc: calibrate
  # would measure those.
  if(MOTE_SANITIZE STREQUAL "")
    add_test(NAME stack_calibrate COMMAND ${_st_py} ${_st_run} calibrate ${_st_tool} ${_st_work}/calibrate)
  else()
    add_test(NAME stack_calibrate COMMAND sh -c "exit 77")
  endif()
  # The story is about the handler's own frames; in an unoptimised or
  # sanitized runtime mote's parking path is deeper than any of them, which
  # is true but not the story.
  if(CMAKE_BUILD_TYPE STREQUAL "Debug" OR NOT MOTE_SANITIZE STREQUAL "")
    add_test(NAME stack_story COMMAND sh -c "echo 'stack_story: needs an optimised libmote'; exit 77")
  else()
    add_test(NAME stack_story COMMAND ${_st_py} ${_st_run} story ${_st_tool}
      $<TARGET_FILE:mote_stack_story> $<TARGET_FILE:mote_stack_story_fixed>
      ${CMAKE_SOURCE_DIR}/tools/mote-stack/mote.hints)
  endif()
  set_tests_properties(stack_corpus_gcc stack_corpus_clang stack_errors stack_check
    stack_traces stack_spawn stack_live stack_sound stack_calibrate stack_story
    PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS stack
    # a command-line tool exits on an error without freeing what it read
    ENVIRONMENT "ASAN_OPTIONS=detect_leaks=0")
  # Sanitized or unoptimised, the tool runs 10-15x slower (160,000 calls in
  # one function: 0.3 s in Release, 3.7-4.0 s under gcc's TSan, over the
  # 5 s limit on a loaded CI): stack_errors' limit grows with it, still far
  # below what the quadratic inputs took (20-46 s in Release).
  if(NOT MOTE_SANITIZE STREQUAL "" OR CMAKE_BUILD_TYPE STREQUAL "Debug")
    set_property(TEST stack_errors APPEND PROPERTY ENVIRONMENT "MOTE_STACK_TEST_SLOW=1")
  endif()
endif()
