# test_symbols inspects the built libraries with nm.
if(TARGET test_symbols)
  target_compile_definitions(test_symbols PRIVATE
    MOTE_LIB_A="$<TARGET_FILE:mote_static>" MOTE_LIB_SO="$<TARGET_FILE:mote_shared>"
    MOTE_MALLOC_SO="$<TARGET_FILE:mote-malloc>")
  add_dependencies(test_symbols mote_shared mote-malloc mote_static)
endif()
