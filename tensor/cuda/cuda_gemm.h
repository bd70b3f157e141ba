// GEMM settings of the CUDA backend, and the cuBLAS handle of each device.
//
//   mt::cuda::set_allow_tf32(true);   // float32 matmuls may use TF32 tensor cores (faster, ~1e-3 rel. error)
//
// TF32 is off by default, as PyTorch's torch.backends.cuda.matmul.allow_tf32: float32 GEMMs then
// round like float32 arithmetic, and CPU and GPU results agree to float32 rounding. Only compiled
// into CUDA builds.
#pragma once

#include <cublas_v2.h>

namespace mt::cuda {

void set_allow_tf32(bool allow);
bool allow_tf32();

// One handle per device, bound to the device's compute stream and to a workspace from the caching
// allocator (so cuBLAS never calls cudaMalloc itself during training). Made on first use.
cublasHandle_t cublas_handle(int device);

}  // namespace mt::cuda
