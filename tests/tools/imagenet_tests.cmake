# tools/imagenet.sh end to end (tests/tools/imagenet_test.py): a tiny ILSVRC2012-like tree made
# by `tally make-data synthetic-jpeg`, packed with each validation-label layout the script
# reads, and trained with the recipe shrunk to a tiny model on 2 workers and 1 server.
foreach(case LocCsvTest GroundTruthTest ValFoldersTest RefusalTest)
  add_test(NAME imagenet.${case}
           COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tools/imagenet_test.py $<TARGET_FILE:tally> ${case})
  set_tests_properties(imagenet.${case} PROPERTIES LABELS quick TIMEOUT 300
                       ENVIRONMENT "OMP_WAIT_POLICY=passive;OMP_NUM_THREADS=2")
endforeach()
