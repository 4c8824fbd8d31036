# Compiler flags for the fuzz build (TESSERA_FUZZ=ON), included by the top-level
# CMakeLists.txt before any target is defined, so that every library of the
# project is built with coverage instrumentation for libFuzzer and with the
# sanitizers. System libraries (gRPC, protobuf, abseil, yaml-cpp, SQLite, zlib)
# are Debian's gcc builds: they link fine (both use libstdc++) but are neither
# instrumented nor sanitized, so the fuzzers only see coverage in our code.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "TESSERA_FUZZ needs clang (libFuzzer): configure with "
                      "CC=clang CXX=clang++ in a separate build directory")
endif()

# Which sanitizers to build with, besides libFuzzer's coverage instrumentation.
set(TESSERA_FUZZ_SANITIZERS "address,undefined"
    CACHE STRING "Sanitizers for the fuzz build (-fsanitize=...)")

add_compile_options(
  -fsanitize=fuzzer-no-link,${TESSERA_FUZZ_SANITIZERS}
  # Undefined behaviour aborts the run (as a crash) instead of printing and going on.
  -fno-sanitize-recover=all
  -fno-omit-frame-pointer
  -gline-tables-only)
add_link_options(-fsanitize=${TESSERA_FUZZ_SANITIZERS})
