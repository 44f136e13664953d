# Extra registrations for the netpoller's tests (TSan builds only).
#
# - A fork child of a process whose blocking pool has a thread starts
#   threads of its own; TSan refuses that unless told the program means it.
# - One case closes a descriptor under a reading task on purpose (the race
#   it tests); tsan-close-race.supp names that one closer.
if(TARGET test_net AND MOTE_SANITIZE STREQUAL "thread")
  set_property(TEST test_net.a_fork_child_has_a_blocking_pool_of_its_own APPEND PROPERTY
    ENVIRONMENT "TSAN_OPTIONS=die_after_fork=0")
  set_property(TEST test_net.close_from_a_plain_thread_races_no_reader_into_a_stale_wait
    APPEND PROPERTY ENVIRONMENT
    "TSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tsan-close-race.supp")
endif()
