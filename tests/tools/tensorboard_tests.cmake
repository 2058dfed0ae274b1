# `tally train --tensorboard` read back by the `tensorboard` package's EventAccumulator
# (tests/tools/tensorboard_test.py): a dist_sync job through tools/launch.py and a single
# process, each test class one ctest test, a few seconds each. Without the package
# (tools/install_deps.sh installs it) the test reports itself skipped, saying why.
foreach(case DistJobTest SingleProcessTest)
  add_test(NAME tensorboard.${case}
           COMMAND ${TALLY_TORCH_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/tools/tensorboard_test.py
                   $<TARGET_FILE:tally> ${case})
  set_tests_properties(tensorboard.${case} PROPERTIES LABELS quick TIMEOUT 300
                       SKIP_REGULAR_EXPRESSION "SKIPPED tensorboard:"
                       ENVIRONMENT "OMP_WAIT_POLICY=passive;OMP_NUM_THREADS=2")
endforeach()
