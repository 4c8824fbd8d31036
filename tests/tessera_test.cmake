# tessera_test(): registers a GoogleTest binary; it is skipped when its source
# file does not exist yet. Used by tests/CMakeLists.txt and by the trainer-only
# build's TESSERA_TRAINER_TESTS (tests/worker/trainer without gRPC).
function(tessera_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  foreach(src ${T_SOURCES})
    if(NOT EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${src})
      return()
    endif()
  endforeach()
  add_executable(${name} ${T_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  gtest_discover_tests(${name}
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
    PROPERTIES LABELS "${T_LABELS}"
               ENVIRONMENT "TESSERA_BIN_DIR=${CMAKE_BINARY_DIR}/bin;TESSERA_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
    DISCOVERY_TIMEOUT 60)
endfunction()
