# Finds what minitrain builds against. Everything comes from the system (Debian packages installed
# by scripts/install-deps.sh, or a conda environment from environment.yml); nothing is downloaded.
find_package(Threads REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(ZLIB REQUIRED)  # gzip'd IDX files (Fashion-MNIST ships as *.gz)

# Gloo: CPU collectives for ProcessGroupGloo (Debian: libgloo-dev; exports the target `gloo`).
# Optional: conda-forge has no Gloo, and without it the distributed layer builds with its
# single-process group only (ProcessGroupGloo::is_available() is false).
find_package(Gloo CONFIG QUIET)
set(MT_HAVE_GLOO OFF)
if(Gloo_FOUND)
  set(MT_HAVE_GLOO ON)
endif()

# MPI: CPU collectives for ProcessGroupMPI (Debian: libopenmpi-dev openmpi-bin; conda-forge: openmpi).
# Only MPI's C API is used. This project enables only the CXX language, so FindMPI's CXX component
# (the C API, usable from C++) is asked for, with the deprecated MPI-2 C++ bindings left out.
# Optional under AUTO: without it ProcessGroupMPI::is_available() is false.
set(MT_HAVE_MPI OFF)
if(NOT MT_MPI STREQUAL "OFF")
  set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "Do not use MPI's deprecated C++ bindings")
  find_package(MPI COMPONENTS CXX QUIET)
  if(MPI_CXX_FOUND)
    set(MT_HAVE_MPI ON)
  elseif(MT_MPI STREQUAL "ON")
    message(FATAL_ERROR "MT_MPI=ON but MPI was not found (Debian: apt install libopenmpi-dev openmpi-bin; "
                        "conda: conda install -c conda-forge openmpi)")
  endif()
endif()

# Sets out_var to Eigen or OpenBLAS, whichever cmake/gemm_probe.cpp measures faster here (Note
# [Which GEMM] below), once per build folder (cached as MT_GEMM_PROBE); OpenBLAS where it cannot run.
function(mt_probe_gemm out_var)
  if(NOT DEFINED CACHE{MT_GEMM_PROBE})
    set(probe_output "")
    if(NOT CMAKE_CROSSCOMPILING)
      try_run(probe_run probe_compiled ${CMAKE_BINARY_DIR}/gemm_probe ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/gemm_probe.cpp
              CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${MT_CBLAS_INCLUDE_DIR}"
              COMPILE_DEFINITIONS -O3 -march=native -DNDEBUG
              LINK_LIBRARIES Eigen3::Eigen ${MT_BLAS_LIBRARY}
              CXX_STANDARD 17
              RUN_OUTPUT_VARIABLE probe_output)
    endif()
    string(STRIP "${probe_output}" probe_output)
    if(NOT probe_output MATCHES "^eigen [0-9.]+ openblas [0-9.]+ pick (Eigen|OpenBLAS)$")
      set(probe_output "did not run: pick OpenBLAS")
    endif()
    set(MT_GEMM_PROBE "${probe_output}" CACHE INTERNAL "cmake/gemm_probe.cpp's GFLOP/s and pick (Note [Which GEMM])")
  endif()
  string(REGEX MATCH "(Eigen|OpenBLAS)$" pick "${MT_GEMM_PROBE}")
  message(STATUS "minitrain: GEMM probe (one thread, GFLOP/s): ${MT_GEMM_PROBE}")
  set(${out_var} ${pick} PARENT_SCOPE)
endfunction()

# Note [Which GEMM]: OpenBLAS's GEMM or Eigen's own, whichever is faster on the machine, and since
# that depends on the machine, a native build (MT_NATIVE, the default) measures it when it is
# configured. Eigen's kernels are C++ templates, so -march=native gives them this CPU's widest
# vectors; OpenBLAS picks hand-written kernels at run time. Measured (bench/README.md, "Sixth pass"
# and "Seventh pass"), one thread: on one host of this project's machine kind Eigen ran 1024² at
# 125-156 GFLOP/s against OpenBLAS's 103-113 and the MLP step in 0.71 against 1.02 ms; on another
# host reporting the same CPU (AMD EPYC, family 25 model 17) Eigen ran 68-83 GFLOP/s against 92-102
# and the MLP step in 1.43-1.56 against 1.22-1.30 ms. So no fixed choice is right: the probe
# (cmake/gemm_probe.cpp, half a second) times both on the workloads' shapes and takes Eigen only
# when it is at least 5 % faster (a near tie keeps OpenBLAS, the library libtorch uses). Its
# result is cached (MT_GEMM_PROBE in CMakeCache.txt; delete it to measure again) and printed.
#   MT_BLAS=AUTO  OpenBLAS linked when found; the default GEMM is the probe's pick in a native
#                 build, OpenBLAS in a portable one (Eigen would be compiled for SSE2 there)
#   MT_BLAS=ON    OpenBLAS required, and the default GEMM, no probe
#   MT_BLAS=OFF   Eigen's GEMM only
# Where OpenBLAS is linked, both GEMMs are in the library and MT_GEMM=eigen|openblas chooses at run
# time (tensor/cpu/cpu_gemm.cpp); the tests run on both (tests/CMakeLists.txt).
set(MT_HAVE_BLAS OFF)
set(MT_GEMM_IMPL "Eigen")  # the default GEMM
if(NOT MT_BLAS STREQUAL "OFF")
  find_library(MT_BLAS_LIBRARY NAMES openblas)
  find_path(MT_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas)
  if(MT_BLAS_LIBRARY AND MT_CBLAS_INCLUDE_DIR)
    set(MT_HAVE_BLAS ON)
    set(MT_GEMM_IMPL "OpenBLAS")
    if(MT_BLAS STREQUAL "AUTO" AND MT_NATIVE)
      mt_probe_gemm(MT_GEMM_IMPL)
    endif()
  elseif(MT_BLAS STREQUAL "ON")
    message(FATAL_ERROR "MT_BLAS=ON but OpenBLAS was not found (Debian: libopenblas-dev)")
  endif()
endif()

# CUDA: the CUDA backend (tensor/cuda/: kernels, cuBLAS GEMM, caching allocator) when nvcc is found
# (AUTO) or required (ON). The kernels are compiled for MT_CUDA_ARCHITECTURES (80 = A100, 90 = H100/H200;
# each one adds compile time). The shared CUDA runtime is used everywhere (NCCL and mini_train link it
# too): one process, one runtime.
set(MT_CUDA_ARCHITECTURES "80;90" CACHE STRING "GPU architectures for the CUDA kernels (CMAKE_CUDA_ARCHITECTURES)")
set(MT_HAVE_CUDA OFF)
set(MT_CUDA_STATUS "off")
if(NOT MT_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES ${MT_CUDA_ARCHITECTURES})
    endif()
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    # C++20 like the host code. CMake (3.22 to 3.25 at least) knows nvcc's dialect flags only up to C++17 (nvcc >= 12
    # has -std=c++20), so the flag is named here; CMake then applies it as for any dialect.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(MT_HAVE_CUDA ON)
    set(MT_CUDA_STATUS "on (CUDA ${CUDAToolkit_VERSION}, sm ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(MT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MT_CUDA=ON but no CUDA compiler (nvcc) was found (put it on PATH or set CUDACXX)")
  endif()
endif()

# NCCL: GPU collectives for ProcessGroupNCCL (distributed/process_group/nccl/process_group_nccl.cpp). Only with the CUDA
# backend: NCCL works on CUDA tensors. Looked for in NCCL_ROOT (cache variable or environment), then
# in the CUDA toolkit's folder (where NVIDIA's HPC images and our dev machine keep it), then in the
# system's default places (Debian: libnccl-dev). A pip-installed PyTorch brings NCCL as the Python
# package nvidia-nccl-cu*: scripts/gpu-check.sh passes its folder as NCCL_ROOT.
set(MT_NCCL AUTO CACHE STRING "Build ProcessGroupNCCL: AUTO (when the CUDA backend and NCCL are found), ON, OFF")
set_property(CACHE MT_NCCL PROPERTY STRINGS AUTO ON OFF)
set(NCCL_ROOT "" CACHE PATH "Folder with include/nccl.h and lib/libnccl.so (optional)")
set(MT_HAVE_NCCL OFF)
if(NOT MT_NCCL STREQUAL "OFF")
  if(NOT MT_HAVE_CUDA)
    if(MT_NCCL STREQUAL "ON")
      message(FATAL_ERROR "MT_NCCL=ON needs the CUDA backend, which this configuration does not build "
                          "(MT_CUDA=${MT_CUDA}; is nvcc on PATH?)")
    endif()
  else()
    set(mt_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT})
    if(CMAKE_CUDA_COMPILER)
      get_filename_component(mt_cuda_bin "${CMAKE_CUDA_COMPILER}" DIRECTORY)
      get_filename_component(mt_cuda_root "${mt_cuda_bin}" DIRECTORY)
      list(APPEND mt_nccl_hints ${mt_cuda_root})
    endif()
    find_path(MT_NCCL_INCLUDE_DIR nccl.h HINTS ${mt_nccl_hints} PATH_SUFFIXES include)
    # libnccl.so.2 alone: the pip package ships no unversioned symlink.
    find_library(MT_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${mt_nccl_hints}
                 PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
    if(MT_NCCL_INCLUDE_DIR AND MT_NCCL_LIBRARY)
      set(MT_HAVE_NCCL ON)
    elseif(MT_NCCL STREQUAL "ON")
      message(FATAL_ERROR "MT_NCCL=ON but NCCL was not found (nccl.h: ${MT_NCCL_INCLUDE_DIR}, libnccl: "
                          "${MT_NCCL_LIBRARY}); set NCCL_ROOT to the folder holding include/nccl.h and lib/")
    endif()
  endif()
endif()
