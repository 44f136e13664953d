# tools/mote-gdb.py against a live program: list the tasks, backtrace a
# parked one.  Needs gdb and debug information; sanitizer builds are left
# out (their runtimes change the process under the debugger).
find_program(MOTE_GDB gdb)
if(MOTE_GDB AND MOTE_SANITIZE STREQUAL "")
  add_executable(gdb_target ${CMAKE_CURRENT_SOURCE_DIR}/gdb_target.c)
  target_compile_options(gdb_target PRIVATE -g -O1 -fno-omit-frame-pointer)
  target_link_libraries(gdb_target PRIVATE mote_static)
  add_test(NAME gdb_mote_tasks
    COMMAND ${MOTE_GDB} -batch -nx
      -ex "source ${CMAKE_SOURCE_DIR}/tools/mote-gdb.py"
      -ex "break gdb_marker" -ex "run" -ex "mote-tasks" -ex "mote-bt 2"
      $<TARGET_FILE:gdb_target>)
  set_tests_properties(gdb_mote_tasks PROPERTIES TIMEOUT 120
    ENVIRONMENT "MOTE_WORKERS=1"
    PASS_REGULAR_EXPRESSION "task 2 \\(named_one\\) on worker 0: chan receive.*3 tasks.*in wait_here.*in task_entry")
  # The same with both stacks frozen: read from their images.
  add_test(NAME gdb_mote_tasks_frozen
    COMMAND ${MOTE_GDB} -batch -nx
      -ex "source ${CMAKE_SOURCE_DIR}/tools/mote-gdb.py"
      -ex "break gdb_marker" -ex "run" -ex "mote-tasks" -ex "mote-bt 2"
      --args $<TARGET_FILE:gdb_target> frozen)
  set_tests_properties(gdb_mote_tasks_frozen PROPERTIES TIMEOUT 120
    ENVIRONMENT "MOTE_WORKERS=1;MOTE_STACK_FREEZE=5ms"
    PASS_REGULAR_EXPRESSION "task 2 \\(named_one\\) on worker 0: chan receive, stack frozen.*3 tasks.*in wait_here.*in task_entry")
endif()
