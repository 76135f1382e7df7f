# Included from CMakeLists.txt's CUDA block (ONNXDP_CUDA on, after onnxdp_cuda exists).
#
# Architectures: CMakeLists.txt sets CMAKE_CUDA_ARCHITECTURES (unless given) to 80-real 90-real
# 90-virtual, i.e. SASS for sm_80 (A100) and sm_90 (H100/H200) plus compute_90 PTX that newer GPUs
# JIT-compile.
#
# Tests: the doctest cases of suite "gpu" (tests/gpu/) are in onnxdp_tests with every other case;
# without a GPU they pass after printing "no GPU: <reason> -- CUDA kernel test SKIPPED". The CTest
# test gpu.cuda_kernels (label gpu) runs that suite once more and is reported as Skipped when it
# printed that, so `ctest -L gpu` on a machine without a GPU says "Skipped", never "Passed".
# gpu.cuda_check (label gpu too) runs suite "cuda": the check macros (tests/exec/test_cuda_check.cpp)
# and the backend harness (tests/backend/) on the emulated CUDA device, which need no GPU.

target_compile_options(onnxdp_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall>)

function(onnxdp_add_gpu_tests)
  if(NOT BUILD_TESTING OR NOT TARGET onnxdp_tests)
    return()
  endif()
  add_test(NAME gpu.cuda_kernels COMMAND onnxdp_tests --test-suite=gpu --no-intro=true)
  add_test(NAME gpu.cuda_check COMMAND onnxdp_tests --test-suite=cuda --no-intro=true)
  set_tests_properties(gpu.cuda_kernels gpu.cuda_check PROPERTIES LABELS gpu TIMEOUT 600)
  set_tests_properties(gpu.cuda_kernels PROPERTIES SKIP_REGULAR_EXPRESSION "CUDA kernel test SKIPPED")
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL onnxdp_add_gpu_tests)
