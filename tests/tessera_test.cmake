# tessera_test(): registers a GoogleTest binary; it is skipped when its source
# file does not exist yet. Used by tests/CMakeLists.txt and by the trainer-only
# build's TESSERA_TRAINER_TESTS (tests/worker/trainer without gRPC).
#
#   tessera_test(<name> SOURCES <file>... [LIBS <lib>...] [LABELS <label>...] [NO_PCH])
#
# Precompiled headers shared by the tests. Parsing LibTorch's headers, or
# gRPC's and the generated tessera.pb.h, is most of a test file's compile time,
# so each family of tests reuses one precompiled header, built once by a small
# target of its own (tessera_test_pch_<family>). A test joins a family on its
# own, from what it links (directly or through its LIBS): see
# tessera_test_pch_family() below. NO_PCH leaves a test out, e.g. one that is
# given definitions or options of its own that the header would have to match.
#
# GCC uses a precompiled header only where the compile flags agree with those it
# was built with: the same definitions (an extra one only where the headers
# never test it) and the same options (-pthread defines _REENTRANT, which
# libstdc++ tests). That is why each family's target links the very library that
# puts a test in the family, and why a test that links the libraries of two
# families (LibTorch's and gRPC's -pthread) gets neither. Where they still
# disagree GCC falls back, silently, to parsing the headers; CMake compiles
# every user of the header with -Winvalid-pch, so the build prints the reason.
# Clang makes such a mismatch an error instead; the shared headers are GCC's only.
option(TESSERA_TEST_PCH "Share one precompiled header among the tests of each family" ON)

# The families, one row each: <name>|<library>|<header>|<header>... A test is in
# a family when it links <library>, whose definitions and options the family's
# header is built with.
#   torch  LibTorch's tests (tests/worker/trainer), with what tessera_trainer_torch
#          carries PUBLIC (e.g. TESSERA_HAVE_GLOO=1 where Gloo is found)
#   grpc   in-process gRPC, CLI and end-to-end tests: grpc++ (-pthread) and the stubs
#   proto  the tests of the coordinator's core and store and of the specs: the
#          messages, without gRPC (and so without -pthread)
set(TESSERA_TEST_PCH_FAMILIES
  "torch|tessera_trainer_torch|<torch/torch.h>|<gtest/gtest.h>|<gmock/gmock.h>"
  "grpc|tessera_proto_grpc|<grpcpp/grpcpp.h>|\"tessera/v1/tessera.grpc.pb.h\"|<gtest/gtest.h>|<gmock/gmock.h>"
  "proto|tessera_proto_messages|\"tessera/v1/tessera.pb.h\"|<gtest/gtest.h>|<gmock/gmock.h>")

# tessera_test_link_closure(<out-var> <lib>...): <lib>... and what they pass on
# to whoever links them, transitively (their PUBLIC and INTERFACE libraries: the
# ones whose definitions and options a test is compiled with).
function(tessera_test_link_closure out)
  set(seen "")
  set(todo ${ARGN})
  while(todo)
    list(POP_FRONT todo lib)
    # Skip link-only entries (a library's PRIVATE ones), other generator
    # expressions, and the markers ("::@(0x...)") that target_link_libraries()
    # leaves when called from another folder.
    if(lib STREQUAL "" OR lib MATCHES "^::@" OR lib MATCHES "\\$<" OR lib IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${lib})
    if(TARGET ${lib})
      get_target_property(aliased ${lib} ALIASED_TARGET)
      if(aliased)
        list(APPEND todo ${aliased})
      endif()
      get_target_property(ilibs ${lib} INTERFACE_LINK_LIBRARIES)
      if(ilibs)
        list(APPEND todo ${ilibs})
      endif()
    endif()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

# tessera_test_pch_family(<out-var> <lib>...): the family whose header a test
# linking <lib>... reuses, or "" for none. The test must link the family's
# library, and every other family's library it links must come with that one
# (tessera_proto_grpc with tessera_trainer_torch, say, would bring -pthread).
function(tessera_test_pch_family out)
  set(${out} "" PARENT_SCOPE)
  tessera_test_link_closure(closure ${ARGN})
  set(linked "")
  foreach(row IN LISTS TESSERA_TEST_PCH_FAMILIES)
    string(REPLACE "|" ";" row "${row}")
    list(GET row 1 lib)
    if(lib IN_LIST closure)
      list(APPEND linked ${lib})
    endif()
  endforeach()
  foreach(row IN LISTS TESSERA_TEST_PCH_FAMILIES)
    string(REPLACE "|" ";" row "${row}")
    list(GET row 0 family)
    list(GET row 1 lib)
    if(NOT lib IN_LIST linked)
      continue()
    endif()
    tessera_test_link_closure(own ${lib})
    set(fits TRUE)
    foreach(other IN LISTS linked)
      if(NOT other IN_LIST own)
        set(fits FALSE)
      endif()
    endforeach()
    if(fits)
      set(${out} ${family} PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

# tessera_test_pch_target(<family>): defines tessera_test_pch_<family> the
# first time a test asks for it: one object file over an empty source, compiled
# with the family's library, GoogleTest, and the tests' include folder, so that
# its flags are the tests' flags.
function(tessera_test_pch_target family)
  if(TARGET tessera_test_pch_${family})
    return()
  endif()
  foreach(row IN LISTS TESSERA_TEST_PCH_FAMILIES)
    string(REPLACE "|" ";" row "${row}")
    list(POP_FRONT row name lib)
    if(name STREQUAL family)
      set(anchor ${CMAKE_CURRENT_BINARY_DIR}/tessera_test_pch_${family}.cc)
      file(CONFIGURE OUTPUT ${anchor}
           CONTENT "// The ${family} tests' precompiled header (tests/tessera_test.cmake).\n")
      add_library(tessera_test_pch_${family} OBJECT ${anchor})
      target_include_directories(tessera_test_pch_${family} PRIVATE ${PROJECT_SOURCE_DIR})
      target_link_libraries(tessera_test_pch_${family}
        PRIVATE ${lib} GTest::gtest GTest::gtest_main GTest::gmock)
      target_precompile_headers(tessera_test_pch_${family} PRIVATE ${row})
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "tessera_test: no precompiled-header family '${family}'")
endfunction()

function(tessera_test name)
  cmake_parse_arguments(T "NO_PCH" "" "SOURCES;LIBS;LABELS" ${ARGN})
  foreach(src ${T_SOURCES})
    if(NOT EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${src})
      return()
    endif()
  endforeach()
  add_executable(${name} ${T_SOURCES})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  if(TESSERA_TEST_PCH AND NOT T_NO_PCH AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    tessera_test_pch_family(family ${T_LIBS})
    if(family)
      tessera_test_pch_target(${family})
      target_precompile_headers(${name} REUSE_FROM tessera_test_pch_${family})
    endif()
  endif()
  gtest_discover_tests(${name}
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
    PROPERTIES LABELS "${T_LABELS}"
               ENVIRONMENT "TESSERA_BIN_DIR=${CMAKE_BINARY_DIR}/bin;TESSERA_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
    DISCOVERY_TIMEOUT 60)
endfunction()
