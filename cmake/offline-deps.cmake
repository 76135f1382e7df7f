# -DONNXDP_DEPS_PREFIX=PREFIX: build against Debian packages unpacked without root into PREFIX by
# `scripts/offline-deps unpack DIR PREFIX` (GPU hosts without network; docs/GPU.md "Offline GPU hosts").
# Included from CMakeLists.txt before the first find_package. What it does:
#   - PREFIX/usr goes first in CMAKE_PREFIX_PATH: find_package / find_library / find_path look
#     there before the system (the CMake config files were made relocatable by the unpack step);
#   - OpenBLAS and Open MPI are pointed at explicitly (the system may have its own copies, and
#     Open MPI's wrapper compiler finds its relocated tree through OPAL_PREFIX);
#   - the executables get PREFIX's library dirs as RPATH (DT_RPATH, not RUNPATH, so that the
#     libraries' own dependencies, e.g. libhwloc under libmpi, resolve there too). `. PREFIX/env.sh`
#     is still needed for mpiexec and the Open MPI plugins.
set(ONNXDP_DEPS_PREFIX "" CACHE PATH "Prefix of Debian packages unpacked by scripts/offline-deps")
if(NOT ONNXDP_DEPS_PREFIX)
  return()
endif()

get_filename_component(_deps "${ONNXDP_DEPS_PREFIX}" ABSOLUTE)
if(NOT EXISTS "${_deps}/usr/include")
  message(FATAL_ERROR "ONNXDP_DEPS_PREFIX=${_deps} has no usr/include: "
                      "run scripts/offline-deps unpack DIR ${_deps} first")
endif()
if(NOT CMAKE_LIBRARY_ARCHITECTURE)
  set(CMAKE_LIBRARY_ARCHITECTURE x86_64-linux-gnu)
endif()
set(_deps_lib "${_deps}/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}")
message(STATUS "onnxdp: dependencies from ${_deps}")

list(PREPEND CMAKE_PREFIX_PATH "${_deps}/usr")
# Debian's doctest/CLI11/nlohmann-json configs live under usr/share/cmake and usr/lib/cmake.
list(PREPEND CMAKE_PREFIX_PATH "${_deps}/usr/lib/cmake" "${_deps}/usr/share/cmake")

# OpenBLAS: CMakeLists.txt's find_library / find_path keep a cached result, so finding them here
# first (prefix only) decides.
foreach(_blas openblas-pthread openblas-openmp openblas-serial)
  if(EXISTS "${_deps_lib}/${_blas}/libopenblas.so")
    find_library(OPENBLAS_LIB NAMES openblas PATHS "${_deps_lib}/${_blas}" NO_DEFAULT_PATH)
    find_path(CBLAS_INCLUDE NAMES cblas.h PATHS "${_deps}/usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/${_blas}"
              NO_DEFAULT_PATH)
    set(OpenBLAS_DIR "${_deps_lib}/${_blas}/cmake/openblas" CACHE PATH "OpenBLAS config (offline deps)")
    list(APPEND _deps_rpath "${_deps_lib}/${_blas}")
    break()
  endif()
endforeach()

# Open MPI: its wrapper compiler and mpiexec relocate with OPAL_PREFIX; FindMPI runs the wrapper,
# which needs the prefix's libraries.
if(EXISTS "${_deps}/usr/bin/mpicc.openmpi")
  set(ENV{OPAL_PREFIX} "${_deps}/usr")
  set(ENV{LD_LIBRARY_PATH} "${_deps_lib}:$ENV{LD_LIBRARY_PATH}")
  set(MPI_C_COMPILER "${_deps}/usr/bin/mpicc.openmpi" CACHE FILEPATH "MPI C wrapper (offline deps)")
  set(MPIEXEC_EXECUTABLE "${_deps}/usr/bin/orterun" CACHE FILEPATH "mpiexec (offline deps)")
endif()

list(PREPEND _deps_rpath "${_deps_lib}")
list(APPEND CMAKE_BUILD_RPATH ${_deps_rpath})
list(APPEND CMAKE_INSTALL_RPATH ${_deps_rpath})
add_link_options(LINKER:--disable-new-dtags)
