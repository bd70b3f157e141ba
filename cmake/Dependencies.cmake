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

# GEMM: OpenBLAS when present (bench/ measured it faster than Eigen's own GEMM; docs/design.md).
set(MT_HAVE_BLAS OFF)
set(MT_GEMM_IMPL "Eigen")
if(NOT MT_BLAS STREQUAL "OFF")
  find_library(MT_BLAS_LIBRARY NAMES openblas)
  find_path(MT_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas)
  if(MT_BLAS_LIBRARY AND MT_CBLAS_INCLUDE_DIR)
    set(MT_HAVE_BLAS ON)
    set(MT_GEMM_IMPL "OpenBLAS")
  elseif(MT_BLAS STREQUAL "ON")
    message(FATAL_ERROR "MT_BLAS=ON but OpenBLAS was not found (Debian: libopenblas-dev)")
  endif()
endif()

# CUDA: the switch exists now; the backend itself arrives with the CUDA issue (docs/design.md).
set(MT_CUDA_STATUS "off")
if(NOT MT_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(MT_CUDA_STATUS "available (nvcc found; no CUDA sources yet)")
  elseif(MT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MT_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()
