# Extra registrations for the netpoller's tests.
#
# A fork child of a process whose blocking pool has a thread starts threads
# of its own; TSan refuses that unless told the program means it.
if(TARGET test_net AND MOTE_SANITIZE STREQUAL "thread")
  set_tests_properties(test_net.a_fork_child_has_a_blocking_pool_of_its_own PROPERTIES
    ENVIRONMENT "TSAN_OPTIONS=die_after_fork=0")
endif()
