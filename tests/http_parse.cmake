# test_http_parse tests the example HTTP server's parser, which lives beside
# the server in examples/ (it is not part of libmote).
if(TARGET test_http_parse)
  target_sources(test_http_parse PRIVATE ${CMAKE_SOURCE_DIR}/examples/http_parse.c)
  target_include_directories(test_http_parse PRIVATE ${CMAKE_SOURCE_DIR}/examples)
endif()
