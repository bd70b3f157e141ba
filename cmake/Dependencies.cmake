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

# Note [Which GEMM]: Eigen's own GEMM in a build compiled for this CPU (MT_NATIVE, the default),
# OpenBLAS in a portable one. Eigen's kernels are C++ templates, so -march=native gives them this
# CPU's widest vectors (AVX-512 here), and measured in one run (bench/README.md, "Sixth pass") they
# beat Debian's OpenBLAS 0.3.21 on this Zen 4 machine at every size the workloads use: 1024² at
# 125-156 GFLOP/s against 103-113, the MLP step 0.71 against 1.02 ms, the GPT step 97 against 127
# ms. OpenBLAS picks its kernels at run time, which is what a binary built for any x86-64
# (MT_NATIVE=OFF) needs: Eigen would be compiled for SSE2 there. MT_BLAS=ON or OFF overrides it.
set(MT_HAVE_BLAS OFF)
set(MT_GEMM_IMPL "Eigen")
if(MT_BLAS STREQUAL "ON" OR (MT_BLAS STREQUAL "AUTO" AND NOT MT_NATIVE))
  find_library(MT_BLAS_LIBRARY NAMES openblas)
  find_path(MT_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas)
  if(MT_BLAS_LIBRARY AND MT_CBLAS_INCLUDE_DIR)
    set(MT_HAVE_BLAS ON)
    set(MT_GEMM_IMPL "OpenBLAS")
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

# NCCL: GPU collectives for ProcessGroupNCCL (distributed/process_group_nccl.cpp). Only with the CUDA
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
