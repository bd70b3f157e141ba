// Checks for every CUDA runtime and cuBLAS call: on failure, an mt::Error naming the failing call, the
// library's own error text, and the file and line (check.h's format).
//
//   MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
//   MT_CUBLAS_CHECK(cublasSgemm(...));
//   MT_CUDA_CHECK_LAUNCH();   // after a kernel launch: reports a bad launch configuration at once
//
// Only compiled into CUDA builds (tensor/cuda/ is built when CMake finds nvcc). NCCL's check lives
// with ProcessGroupNCCL.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "tensor/check.h"

namespace mt::cuda::detail {
// cuBLAS has no cublasGetErrorString before 11.4 under that name everywhere; ours spells the enum.
const char* cublas_status_name(cublasStatus_t status);
}  // namespace mt::cuda::detail

#define MT_CUDA_CHECK(call)                                                                         \
  do {                                                                                              \
    const cudaError_t mt_cuda_status_ = (call);                                                     \
    if (mt_cuda_status_ != cudaSuccess) [[unlikely]]                                                \
      ::mt::detail::fail(__FILE__, __LINE__, "CUDA error in ", #call, ": ",                         \
                         cudaGetErrorString(mt_cuda_status_));                                      \
  } while (0)

#define MT_CUDA_CHECK_LAUNCH() MT_CUDA_CHECK(cudaGetLastError())

#define MT_CUBLAS_CHECK(call)                                                                       \
  do {                                                                                              \
    const cublasStatus_t mt_cublas_status_ = (call);                                                \
    if (mt_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                    \
      ::mt::detail::fail(__FILE__, __LINE__, "cuBLAS error in ", #call, ": ",                       \
                         ::mt::cuda::detail::cublas_status_name(mt_cublas_status_));               \
  } while (0)
