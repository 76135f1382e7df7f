# Runs a command that must FAIL: non-zero exit, within MAX_SECONDS, with output matching EXPECT.
#   cmake "-DCMD=prog|arg|arg" "-DEXPECT=regex" -DMAX_SECONDS=30 -P expect_failure.cmake
# (CMD uses | between arguments: a ; would be split by add_test.)
# -DALLOW_ZERO_EXIT=ON: only the output and the time are checked (a launcher told to keep going
# may exit 0 although a process failed).
string(REPLACE "|" ";" cmd "${CMD}")
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out
                TIMEOUT ${MAX_SECONDS})
string(TIMESTAMP t1 "%s")
math(EXPR seconds "${t1} - ${t0}")
message("${out}")
if(rc MATCHES "timeout")
  message(FATAL_ERROR "still running after ${MAX_SECONDS} s: a failure must not hang")
endif()
if(rc EQUAL 0 AND NOT ALLOW_ZERO_EXIT)
  message(FATAL_ERROR "exited 0 after ${seconds} s: expected a failure")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "exit ${rc} after ${seconds} s, but the output does not match: ${EXPECT}")
endif()
message("failed as expected: exit ${rc} after ${seconds} s, output matches '${EXPECT}'")
