# MPI (Open MPI from Debian: libopenmpi-dev, openmpi-bin) for multi-process worlds.
# Included (OPTIONAL) from CMakeLists.txt after onnxdp_parallel_impl exists. When MPI is found:
#   - parallel/mpi/*.cpp join onnxdp_parallel_impl, which links MPI and defines ONNXDP_HAVE_MPI=1
#     for itself and everything that uses it;
#   - with BUILD_TESTING: onnxdp_mpi_check (tests/parallel/mpi_check.cpp) and CTest tests that run
#     it under mpiexec (label "mpi").
# Without MPI onnxdp builds and runs single-process worlds only (make_mpi_world throws).
# -DONNXDP_MPI=OFF skips MPI even when it is installed.

option(ONNXDP_MPI "Build multi-process worlds with MPI when it is found" ON)
if(NOT ONNXDP_MPI OR NOT TARGET onnxdp_parallel_impl)
  return()
endif()

find_package(MPI COMPONENTS C QUIET)
if(NOT MPI_C_FOUND)
  message(STATUS "onnxdp: MPI not found; multi-process worlds are not built")
  return()
endif()
message(STATUS "onnxdp: MPI ${MPI_C_VERSION} found (${MPIEXEC_EXECUTABLE}); multi-process worlds enabled")

file(GLOB PARALLEL_MPI_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/parallel/mpi/*.cpp)
target_sources(onnxdp_parallel_impl PRIVATE ${PARALLEL_MPI_SRC})
target_link_libraries(onnxdp_parallel_impl PRIVATE MPI::MPI_C)
target_compile_definitions(onnxdp_parallel_impl PUBLIC ONNXDP_HAVE_MPI=1)

# The tests are added when the top directory is done: BUILD_TESTING (include(CTest)) comes later
# in CMakeLists.txt than this file.
function(onnxdp_add_mpi_tests)
  if(NOT BUILD_TESTING OR NOT MPIEXEC_EXECUTABLE)
    return()
  endif()
  add_executable(onnxdp_mpi_check ${CMAKE_SOURCE_DIR}/tests/parallel/mpi_check.cpp)
  target_link_libraries(onnxdp_mpi_check PRIVATE onnxdp_parallel MPI::MPI_C)

  # Open MPI refuses root without --allow-run-as-root (CI containers run as root) and more ranks
  # than cores without --oversubscribe; other MPIs do not know these flags.
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE mpiexec_version ERROR_QUIET)
  set(flags ${MPIEXEC_PREFLAGS})
  if(mpiexec_version MATCHES "Open ?MPI|OpenRTE")
    list(APPEND flags --allow-run-as-root --oversubscribe)
  endif()
  set(check $<TARGET_FILE:onnxdp_mpi_check>)
  set(run ${MPIEXEC_EXECUTABLE} ${flags} ${MPIEXEC_NUMPROC_FLAG})

  # Launched by nobody: a world of the local replicas only, MPI never initialised.
  add_test(NAME mpi.no_launcher COMMAND ${check} --local 2 --expect-mpi 0)
  # Worlds of 1, 2 and 4 replicas: sums, broadcast, all_gather, asynchronous order, bitwise
  # identical results, against values the check computes independently.
  add_test(NAME mpi.np1 COMMAND ${run} 1 ${check} --local 1 --expect-mpi 1)
  add_test(NAME mpi.np2 COMMAND ${run} 2 ${check} --local 1 --expect-mpi 1)
  add_test(NAME mpi.np2_local2 COMMAND ${run} 2 ${check} --local 2 --expect-mpi 1)
  set_tests_properties(mpi.no_launcher mpi.np1 mpi.np2 mpi.np2_local2 PROPERTIES
                       TIMEOUT 120 LABELS mpi PASS_REGULAR_EXPRESSION "mpi_check: OK")

  # Failures must end the job with an error, in bounded time, never hang.
  # stall: MPI rank 1 skips a collective (alive, stuck elsewhere): rank 0 reports the timeout.
  # die: MPI rank 1 exits in the middle: the job ends with an error.
  string(REPLACE ";" "|" run_bar "${run}")
  set(expect ${CMAKE_SOURCE_DIR}/tests/parallel/expect_failure.cmake)
  add_test(NAME mpi.rank_stalls COMMAND ${CMAKE_COMMAND}
           "-DCMD=${run_bar}|2|${check}|--local|2|--mode|stall|--timeout|2"
           "-DEXPECT=did not reach all_reduce #[0-9]+ .*within 2 s" -DMAX_SECONDS=25 -P ${expect})
  add_test(NAME mpi.rank_dies COMMAND ${CMAKE_COMMAND}
           "-DCMD=${run_bar}|2|${check}|--local|1|--mode|die|--timeout|5"
           "-DEXPECT=exits early.*(mpiexec|mpirun|did not reach)" -DMAX_SECONDS=25 -P ${expect})
  add_test(NAME mpi.rank_killed COMMAND ${CMAKE_COMMAND}
           "-DCMD=${run_bar}|2|${check}|--local|2|--mode|kill|--timeout|5"
           "-DEXPECT=kills itself.*(mpiexec|mpirun|did not reach)" -DMAX_SECONDS=25 -P ${expect})
  # Processes that disagree on the number of local replicas: an error at start, not a wrong world.
  add_test(NAME mpi.local_mismatch COMMAND ${CMAKE_COMMAND}
           "-DCMD=${run_bar}|1|${check}|--local|1|:|${MPIEXEC_NUMPROC_FLAG}|1|${check}|--local|2"
           "-DEXPECT=same number of local replicas" -DMAX_SECONDS=25 -P ${expect})
  set(failure_tests mpi.rank_stalls mpi.rank_dies mpi.rank_killed mpi.local_mismatch)
  if(mpiexec_version MATCHES "Open ?MPI|OpenRTE")
    # Open MPI ends the whole job when a process fails; told not to, the survivor must end itself
    # by the timeout (as under launchers that do not clean up). mpiexec then exits 0.
    add_test(NAME mpi.rank_dies_timeout COMMAND ${CMAKE_COMMAND}
             "-DCMD=${run_bar}|2|--mca|orte_abort_on_non_zero_status|0|${check}|--local|1|--mode|die|--timeout|3"
             "-DEXPECT=did not reach all_reduce #2 .*within 3 s" -DALLOW_ZERO_EXIT=ON -DMAX_SECONDS=25 -P ${expect})
    list(APPEND failure_tests mpi.rank_dies_timeout)
  endif()
  set_tests_properties(${failure_tests} PROPERTIES TIMEOUT 60 LABELS mpi)
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL onnxdp_add_mpi_tests)
