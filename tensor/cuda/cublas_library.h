// cuBLAS, loaded when the first GEMM on a GPU needs it (dlopen), not when the program starts.
//
// Note [cuBLAS on first use]: linking libcublas makes every program that contains the CUDA backend map
// libcublas and libcublasLt at start-up, and the dynamic loader's relocations touch their pages: a CPU
// run of mini_train (the seed job, /usr/bin/time -v) peaked at 206-224 MiB resident, against
// 13.3-13.7 MiB with cuBLAS loaded this way (bench/README.md, "Peak resident memory"). The backend
// calls only five cuBLAS functions, so it looks them up once in a dlopen()ed libcublas and calls
// them through this table; a run that never multiplies matrices on a GPU never loads cuBLAS.
// cudart (about 0.5 MiB resident) and NCCL (1 MiB) stay linked. The CUDA emulator
// (tests/cuda_emu) builds this file with MT_CUDA_EMULATOR and hands out its own functions instead.
//
//   MT_CUBLAS_CHECK(cublas().gemm_strided_batched_ex(handle, ...));
#pragma once

#include <cublas_v2.h>

namespace mt::cuda {

// The cuBLAS functions the backend calls (cublas_v2.h's names; cublasCreate is cublasCreate_v2 there).
struct CublasLibrary {
  decltype(&cublasCreate) create;
  decltype(&cublasSetStream) set_stream;
  decltype(&cublasSetWorkspace) set_workspace;
  decltype(&cublasSetMathMode) set_math_mode;
  // Spelled out: in C++ cublas_api.h overloads cublasGemmStridedBatchedEx (the legacy cudaDataType
  // compute-type form), so decltype cannot pick one.
  using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n,
                                                  int k, const void* alpha, const void* a, cudaDataType a_type,
                                                  int lda, long long stride_a, const void* b, cudaDataType b_type,
                                                  int ldb, long long stride_b, const void* beta, void* c,
                                                  cudaDataType c_type, int ldc, long long stride_c, int batch_count,
                                                  cublasComputeType_t compute_type, cublasGemmAlgo_t algo);
  GemmStridedBatchedEx gemm_strided_batched_ex;
};

// Loads libcublas on the first call (thread-safe) and returns its functions; throws an mt::Error
// naming the library and dlopen's reason when it cannot be loaded.
const CublasLibrary& cublas();

}  // namespace mt::cuda
