# Gradient compression in launched jobs. tally.kv (tests/python/compression_test.py): the
# fixtures' sums value for value with one server, with two and --server-replicas 1, and through
# SGD; skipped, saying so, without the extension. `tally train --gradient-compression`
# (tests/tools/compression_train_test.py): 2bit and 1bit jobs train, bad settings are refused.
foreach(case CompressionJobTest)
  add_test(NAME python.${case}
           COMMAND ${TALLY_EXTENSION_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/compression_test.py
                   ${CMAKE_BINARY_DIR}/python ${case})
  set_tests_properties(python.${case} PROPERTIES LABELS quick TIMEOUT 180
                       SKIP_REGULAR_EXPRESSION "SKIPPED python:"
                       ENVIRONMENT "OMP_WAIT_POLICY=passive;OMP_NUM_THREADS=2")
endforeach()
foreach(case CompressedJobTest RefusalTest)
  add_test(NAME compression.${case}
           COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/compression_train_test.py $<TARGET_FILE:tally> ${case})
  set_tests_properties(compression.${case} PROPERTIES LABELS quick TIMEOUT 300
                       ENVIRONMENT "OMP_WAIT_POLICY=passive;OMP_NUM_THREADS=1")
endforeach()
# A spare server taking a lost server's place under 2bit pushes (tests/fault/
# spare_compression_test.py): the job ends bit for bit as without the faults.
add_test(NAME fault.SpareCompressionTest
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/fault/spare_compression_test.py $<TARGET_FILE:tally>
                 SpareCompressionTest)
set_tests_properties(fault.SpareCompressionTest PROPERTIES LABELS "fault;quick" TIMEOUT 300
                     SKIP_REGULAR_EXPRESSION "SKIPPED SpareCompressionTest:"
                     ENVIRONMENT "OMP_WAIT_POLICY=passive;OMP_NUM_THREADS=2")
