# Tally's fuzz tests (docs/fuzzing.md), included by tests/CMakeLists.txt.
#
# libFuzzer needs clang while Tally builds with gcc, so the harnesses are a project of their
# own (tests/fuzz/CMakeLists.txt), configured with clang and built into build/fuzz. It
# compiles only the sources the harnesses test. It is not part of the default build (every
# source under it compiled a second time, by clang, with sanitizers): the test fuzz.build
# builds it before the first fuzz test runs, or `cmake --build build --target tally_fuzzers`.
find_program(TALLY_FUZZ_CXX NAMES clang++ clang++-14 DOC "clang for the libFuzzer harnesses")
if(TALLY_FUZZ_CXX)
  include(ExternalProject)
  ExternalProject_Add(tally_fuzzers
                      SOURCE_DIR ${CMAKE_CURRENT_LIST_DIR}
                      BINARY_DIR ${CMAKE_BINARY_DIR}/fuzz
                      CMAKE_ARGS -DCMAKE_CXX_COMPILER=${TALLY_FUZZ_CXX}
                      INSTALL_COMMAND ""
                      EXCLUDE_FROM_ALL TRUE
                      BUILD_ALWAYS ON)  # its own make decides what is out of date
  add_test(NAME fuzz.build
           COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target tally_fuzzers -j2)
else()
  add_test(NAME fuzz.build COMMAND ${CMAKE_COMMAND} -E echo
           "clang++ not found: tools/install_deps.sh installs clang, which the fuzzers need")
  set_tests_properties(fuzz.build PROPERTIES WILL_FAIL TRUE)
endif()
# A slow machine compiles for minutes; the tests that need the fuzzers wait for it (fixture).
set_tests_properties(fuzz.build PROPERTIES LABELS "quick;fuzz" TIMEOUT 2400 FIXTURES_SETUP tally_fuzzers)

# Each fuzzer runs for a bounded time from its seeds; any finding fails the test.
foreach(name message recordio image secure ndarray safetensors checkpoint)
  add_test(NAME fuzz.${name}
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/run_fuzzer.sh ${CMAKE_BINARY_DIR}/fuzz ${name} 20)
  set_tests_properties(fuzz.${name} PROPERTIES LABELS "quick;fuzz" TIMEOUT 120
                       FIXTURES_REQUIRED tally_fuzzers)
endforeach()

# The file readers' tests under AddressSanitizer and UndefinedBehaviorSanitizer, built with the
# fuzzers (tests/fuzz/CMakeLists.txt): any report, a leak included, fails the test.
add_test(NAME sanitize.FileReaders COMMAND ${CMAKE_BINARY_DIR}/fuzz/file_readers_test)
set_tests_properties(sanitize.FileReaders PROPERTIES LABELS "quick;fuzz" TIMEOUT 300
                     FIXTURES_REQUIRED tally_fuzzers
                     ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:halt_on_error=1;UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1")

# A live dist_sync job on loopback, fed 10^5 mutated frames on every node's port while it
# trains, must finish with the weights of the same job run without them (about 30 s: two
# runs of the job). It needs python3-zmq, which only Debian's interpreter has.
set(TALLY_DEBIAN_PYTHON /usr/bin/python3 CACHE FILEPATH "the Python that has Debian's python3-zmq")
add_test(NAME fuzz.live_frames
         COMMAND ${TALLY_DEBIAN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/live_frames_test.py $<TARGET_FILE:tally>)
# Alone on the machine: the frames must all be sent while the job trains, and a neighbour
# (a fuzzer takes a whole core) would slow the sender and the job unevenly.
set_tests_properties(fuzz.live_frames PROPERTIES LABELS "quick;fault;fuzz" TIMEOUT 300 RUN_SERIAL TRUE
                     ENVIRONMENT "OMP_WAIT_POLICY=passive;OMP_NUM_THREADS=1")
