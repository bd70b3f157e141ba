// The CUDA emulator's stand-in for cuBLAS (tests/cuda_emu/emu_cublas.cpp): the handle calls and the
// one GEMM the backend uses, cublasGemmStridedBatchedEx (float32, float64, bfloat16, float16),
// answered by a reference loop that checks its sizes, leading dimensions and strides the way cuBLAS
// does (CUBLAS_STATUS_INVALID_VALUE), and that every element it reads or writes lies inside the
// device allocation of its matrix.
#pragma once

#include <cuda_runtime.h>

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
using cudaDataType = cudaDataType_t;
enum cublasComputeType_t {
  CUBLAS_COMPUTE_16F = 64,
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
  CUBLAS_COMPUTE_64F = 70,
};
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };
enum cublasMath_t {
  CUBLAS_DEFAULT_MATH = 0,
  CUBLAS_TENSOR_OP_MATH = 1,
  CUBLAS_PEDANTIC_MATH = 2,
  CUBLAS_TF32_TENSOR_OP_MATH = 3,
  CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
};

struct cublasContext;
using cublasHandle_t = cublasContext*;

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes);
// Recorded on the handle; the emulated GEMM always sums in its compute type, as cuBLAS does under
// CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION.
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
// C[i] = alpha * op(A[i]) * op(B[i]) + beta * C[i], column-major, i < batch_count; alpha and beta
// on the host (CUBLAS_POINTER_MODE_HOST, the default), of the compute type's precision. Emulated
// types: 32F and 64F with their own compute types, 16BF and 16F with CUBLAS_COMPUTE_32F.
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType_t a_type,
                                          int lda, long long stride_a, const void* B, cudaDataType_t b_type, int ldb,
                                          long long stride_b, const void* beta, void* C, cudaDataType_t c_type,
                                          int ldc, long long stride_c, int batch_count,
                                          cublasComputeType_t compute_type, cublasGemmAlgo_t algo);
