// The CUDA emulator's cuBLAS (include/cublas_v2.h): a reference GEMM queued on the handle's stream.
// It refuses what cuBLAS refuses (negative sizes, a leading dimension below the stored rows,
// mismatched types) with CUBLAS_STATUS_INVALID_VALUE, and treats a matrix that reaches outside its
// device allocation as a kernel fault (cudaErrorIllegalAddress at the next synchronisation), as a
// GPU would. beta == 0 never reads C, as in cuBLAS (C may hold NaN). TF32 compute rounds both
// operands to TF32's 10-bit mantissa first. bfloat16 and float16 matrices are read as float32
// (exact), every product is summed in float32, and C is rounded to 16 bits once, by the stand-in
// cuda_bf16.h and cuda_fp16.h (CUDA's rounding, CUDA's NaN).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "emu_internal.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  int device = 0;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
};

namespace {

cublasStatus_t invalid(const std::string& why) {
  mt_emu::set_last_error(cudaErrorInvalidValue, "cublasGemmStridedBatchedEx: " + why);
  (void)cudaGetLastError();  // cuBLAS reports through its status, not the runtime's last error
  return CUBLAS_STATUS_INVALID_VALUE;
}

float to_tf32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & 0xffffe000u;  // round to 10 mantissa bits
  std::memcpy(&x, &bits, 4);
  return x;
}

// A stored element as its compute type (S, the storage type, to Acc), and back.
float widen(float x) { return x; }
double widen(double x) { return x; }
float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
float widen(__half x) { return __half2float(x); }
template <typename S, typename Acc>
S narrow(Acc x) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else if constexpr (std::is_same_v<S, __half>) return __float2half_rn(x);
  else return x;
}

// S: the stored type of A, B and C; Acc: the compute type, in which alpha, beta and the sums are.
template <typename S, typename Acc>
void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, Acc alpha, const S* a, int lda, long long sa,
          const S* b, int ldb, long long sb, Acc beta, S* c, int ldc, long long sc, int batch, bool tf32) {
  for (int bi = 0; bi < batch; ++bi) {
    const S* A = a + bi * sa;
    const S* B = b + bi * sb;
    S* C = c + bi * sc;
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        Acc acc = 0;
        for (int p = 0; p < k; ++p) {
          Acc x = widen(ta == CUBLAS_OP_N ? A[i + static_cast<long long>(p) * lda] : A[p + static_cast<long long>(i) * lda]);
          Acc y = widen(tb == CUBLAS_OP_N ? B[p + static_cast<long long>(j) * ldb] : B[j + static_cast<long long>(p) * ldb]);
          if constexpr (std::is_same_v<S, float>)
            if (tf32) x = to_tf32(x), y = to_tf32(y);
          acc += x * y;
        }
        S& out = C[i + static_cast<long long>(j) * ldc];
        out = narrow<S>(beta == Acc(0) ? alpha * acc : alpha * acc + beta * widen(out));
      }
  }
}

// The element size of an emulated type, and whether it is computed in compute; 0 when not emulated.
size_t element_size(cudaDataType_t type, cublasComputeType_t compute) {
  switch (type) {
    case CUDA_R_32F: return compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? 4 : 0;
    case CUDA_R_64F: return compute == CUBLAS_COMPUTE_64F ? 8 : 0;
    case CUDA_R_16BF:
    case CUDA_R_16F: return compute == CUBLAS_COMPUTE_32F ? 2 : 0;
  }
  return 0;
}

// Bytes from the first to one past the last element a strided batch of (rows, cols) column-major
// matrices touches.
size_t extent(int rows, int cols, int ld, long long stride, int batch, size_t element) {
  if (rows == 0 || cols == 0 || batch == 0) return 0;
  return (static_cast<size_t>(batch - 1) * stride + static_cast<size_t>(cols - 1) * ld + rows) * element;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  (*handle)->device = mt_emu::current_device_index();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (bytes > 0 && !mt_emu::is_device_range(workspace, bytes)) return invalid("the workspace is not device memory");
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const unsigned base = static_cast<unsigned>(mode) & ~static_cast<unsigned>(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (base > CUBLAS_TF32_TENSOR_OP_MATH) return CUBLAS_STATUS_INVALID_VALUE;
  handle->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m,
                                          int n, int k, const void* alpha, const void* A, cudaDataType_t a_type,
                                          int lda, long long sa, const void* B, cudaDataType_t b_type, int ldb,
                                          long long sb, const void* beta, void* C, cudaDataType_t c_type, int ldc,
                                          long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batch < 0) return invalid("negative size m, n, k or batch");
  if (ta == CUBLAS_OP_C || tb == CUBLAS_OP_C) return invalid("CUBLAS_OP_C is not emulated");
  // Stored shapes: op(A) is (m, k), so A is (m, k) for N and (k, m) for T; likewise B.
  const int a_rows = ta == CUBLAS_OP_N ? m : k, a_cols = ta == CUBLAS_OP_N ? k : m;
  const int b_rows = tb == CUBLAS_OP_N ? k : n, b_cols = tb == CUBLAS_OP_N ? n : k;
  if (lda < std::max(1, a_rows))
    return invalid("lda = " + std::to_string(lda) + " is below A's stored rows " + std::to_string(a_rows));
  if (ldb < std::max(1, b_rows))
    return invalid("ldb = " + std::to_string(ldb) + " is below B's stored rows " + std::to_string(b_rows));
  if (ldc < std::max(1, m)) return invalid("ldc = " + std::to_string(ldc) + " is below m = " + std::to_string(m));
  if (sa < 0 || sb < 0 || sc < 0) return invalid("negative batch stride");
  if (a_type != b_type || a_type != c_type) return invalid("A, B and C differ in type");
  const size_t element = element_size(a_type, compute);
  if (element == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  if (mt_emu::stream_device(handle->stream) != mt_emu::current_device_index())
    return invalid("the handle's stream is not on the current device");
  // C's batches must not overlap (cuBLAS writes them concurrently).
  if (batch > 1 && static_cast<size_t>(sc) < static_cast<size_t>(n - 1) * ldc + m)
    return invalid("stride_c = " + std::to_string(sc) + " makes the batches of C overlap");
  std::string fault;
  if (k > 0 && !mt_emu::is_device_range(A, extent(a_rows, a_cols, lda, sa, batch, element)))
    fault = "A reaches outside its device allocation";
  else if (k > 0 && !mt_emu::is_device_range(B, extent(b_rows, b_cols, ldb, sb, batch, element)))
    fault = "B reaches outside its device allocation";
  else if (!mt_emu::is_device_range(C, extent(m, n, ldc, sc, batch, element)))
    fault = "C reaches outside its device allocation";
  mt_emu::count_launch("cublasGemmStridedBatchedEx");
  const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  // alpha and beta are read now, on the host, as cuBLAS does in host pointer mode.
  auto queue = [&]<typename S, typename Acc>() {
    const Acc al = *static_cast<const Acc*>(alpha), be = *static_cast<const Acc*>(beta);
    mt_emu::enqueue(handle->stream, [=] {
      if (!fault.empty()) return mt_emu::fail_context(cudaErrorIllegalAddress, "cuBLAS GEMM: " + fault);
      gemm<S, Acc>(ta, tb, m, n, k, al, static_cast<const S*>(A), lda, sa, static_cast<const S*>(B), ldb, sb, be,
                   static_cast<S*>(C), ldc, sc, batch, tf32);
    });
  };
  switch (a_type) {
    case CUDA_R_32F: queue.operator()<float, float>(); break;
    case CUDA_R_64F: queue.operator()<double, double>(); break;
    case CUDA_R_16BF: queue.operator()<__nv_bfloat16, float>(); break;
    case CUDA_R_16F: queue.operator()<__half, float>(); break;
  }
  return CUBLAS_STATUS_SUCCESS;
}
