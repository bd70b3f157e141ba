// CudaBackend::gemm: batched out = a·b (+ out) through cuBLAS (float32, float64, and bfloat16 and
// float16 with float32 accumulation: Note [16-bit GEMM]), and a plain kernel for int64 (cuBLAS has
// no integer GEMM; int64 matmuls are rare and small).
// Contract (tensor/backend.h): out (B, M, N) contiguous; a (B, M, K) and b (B, K, N) each row- or
// column-major (unit stride in one of the last two dims); batch strides may be 0 (a shared matrix).
//
// Row-major vs column-major: cuBLAS works on column-major matrices, and a row-major (M, N) matrix is
// exactly a column-major (N, M) one, its transpose. So out = a·b is computed as outᵀ = bᵀ·aᵀ with the
// operands swapped and no data moved:
//   cublasGemmStridedBatchedEx(opB, opA, m = N, n = M, k = K, b, ldb, strideB, a, lda, strideA, out, N, M*N)
// where an operand stored row-major is passed as-is (op N: its memory already is the transpose cuBLAS
// wants), and one stored column-major (a transposed view, e.g. linear's wᵀ) is passed with op T.
// An operand neither row- nor column-major (e.g. expanded with stride 0 inside a matrix) is first
// copied to a contiguous temporary.
#include <algorithm>
#include <atomic>
#include <climits>
#include <mutex>

#include "tensor/cuda/cublas_library.h"
#include "tensor/cuda/cuda_allocator.h"
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_gemm.h"
#include "tensor/cuda/cuda_loops.cuh"

namespace mt::cuda {
namespace {

std::atomic<bool> tf32_allowed{false};

// cuBLAS's recommended workspace on Hopper; also ample for Ampere.
constexpr size_t kCublasWorkspace = size_t{32} << 20;

// out[bi, i, j] (+)= sum_p a[bi, i, p] * b[bi, p, j], one thread per output element; any strides.
template <typename T>
__global__ void gemm_loops_kernel(T* out, const T* a, const T* b, int64_t batch, int64_t m, int64_t n, int64_t k,
                                  int64_t sa0, int64_t sa1, int64_t sa2, int64_t sb0, int64_t sb1, int64_t sb2,
                                  bool accumulate) {
  const int64_t total = batch * m * n;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t j = e % n, i = (e / n) % m, bi = e / (m * n);
    T acc = accumulate ? out[e] : T(0);
    for (int64_t p = 0; p < k; ++p) acc += a[bi * sa0 + i * sa1 + p * sa2] * b[bi * sb0 + p * sb1 + j * sb2];
    out[e] = acc;
  }
}

// Note [16-bit GEMM]: bfloat16 and float16 operands go to cuBLAS as they are stored (CUDA_R_16BF,
// CUDA_R_16F for A, B and C) with CUBLAS_COMPUTE_32F: the tensor cores multiply the 16-bit values
// exactly and sum the products in float32, and each element of C is rounded to 16 bits once, at
// the end, as the CPU's tiles do (Note [Low-precision GEMM in tiles], tensor/cpu/cpu_gemm.cpp). No
// float32 copy of an operand is made. cuBLAS may otherwise split K and add the pieces' partial
// sums in the output type, rounding them to 16 bits on the way; the handle forbids that
// (CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION, set in cublas_handle), so the sum stays float32
// to the end. PyTorch allows it by default (allow_bf16_reduced_precision_reduction).
struct BlasTypes {
  cudaDataType data;
  cublasComputeType_t compute;
};

BlasTypes blas_types(DType t) {
  switch (t) {
    case DType::Float32: return {CUDA_R_32F, allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    case DType::Float64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case DType::BFloat16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F};
    case DType::Float16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F};
    default: MT_FAIL("gemm: dtype ", t, " is not supported on CUDA");
  }
}

int as_int(int64_t v, const char* what) {
  MT_CHECK(v >= 0 && v <= INT_MAX, "gemm: ", what, " = ", v, " is too large for cuBLAS (int)");
  return static_cast<int>(v);
}

}  // namespace

void set_allow_tf32(bool allow) { tf32_allowed.store(allow); }
bool allow_tf32() { return tf32_allowed.load(); }

cublasHandle_t cublas_handle(int device) {
  struct Slot {
    std::once_flag once;
    cublasHandle_t handle = nullptr;
  };
  static const int count = device_count();
  static Slot* slots = new Slot[count > 0 ? count : 1];  // never destroyed: see cuda_allocator.cpp
  MT_CHECK(device >= 0 && device < count, "cuda:", device, " does not exist: this process sees ", count,
           " CUDA device(s)");
  Slot& slot = slots[device];
  std::call_once(slot.once, [&] {
    DeviceGuard guard(device);
    MT_CUBLAS_CHECK(cublas().create(&slot.handle));
    MT_CUBLAS_CHECK(cublas().set_stream(slot.handle, current_stream(device)));
    // 16-bit GEMMs sum in float32 to the end (Note [16-bit GEMM]); float32 and float64 are unaffected.
    MT_CUBLAS_CHECK(cublas().set_math_mode(slot.handle, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    void* workspace = device_allocator(device).allocate(kCublasWorkspace);  // held for the process
    MT_CUBLAS_CHECK(cublas().set_workspace(slot.handle, workspace, kCublasWorkspace));
  });
  return slot.handle;
}

void CudaBackend::gemm(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate) {
  MT_CHECK(out.dim() == 3 && a.dim() == 3 && b.dim() == 3 && is_dense(out),
           "gemm: CUDA kernel needs 3-D (B, M, K)·(B, K, N) -> contiguous (B, M, N), got ", a.sizes(), "·",
           b.sizes(), " -> ", out.sizes());
  const int64_t batch = out.sizes()[0], m = out.sizes()[1], n = out.sizes()[2], k = a.sizes()[2];
  MT_CHECK(a.sizes() == Shape({batch, m, k}) && b.sizes() == Shape({batch, k, n}), "gemm: shapes do not match: ",
           a.sizes(), "·", b.sizes(), " -> ", out.sizes());
  if (out.numel() == 0) return;
  DeviceGuard guard(device_);
  if (k == 0) {  // an empty sum: out = 0, or out unchanged when accumulating
    if (!accumulate) fill(out, 0.0);
    return;
  }
  if (out.dtype() == kInt64) {
    const auto g = elementwise_geometry(out.numel(), multiprocessors_);
    gemm_loops_kernel<int64_t><<<g.blocks, g.threads, 0, stream_>>>(
        static_cast<int64_t*>(out.raw_data()), static_cast<const int64_t*>(a.raw_data()),
        static_cast<const int64_t*>(b.raw_data()), batch, m, n, k, a.strides()[0], a.strides()[1], a.strides()[2],
        b.strides()[0], b.strides()[1], b.strides()[2], accumulate);
    MT_CUDA_CHECK_LAUNCH();
    return;
  }
  const BlasTypes types = blas_types(out.dtype());

  // Operands cuBLAS cannot read in place become contiguous temporaries (same stream: ordered).
  auto as_blas = [&](const Tensor& t, int64_t rows, int64_t cols, MatrixLayout& layout) {
    if (blas_layout(rows, cols, t.strides()[1], t.strides()[2], layout)) return t;
    Tensor dense = empty(t.sizes(), {.dtype = t.dtype(), .device = t.device()});
    copy_on_device(dense, t);
    layout = {false, std::max<int64_t>(cols, 1)};
    return dense;
  };
  MatrixLayout la, lb;
  const Tensor A = as_blas(a, m, k, la);
  const Tensor B = as_blas(b, k, n, lb);
  // A batch of one has no batch stride to speak of; cuBLAS still wants a valid number.
  const int64_t stride_a = batch == 1 ? 0 : A.strides()[0];
  const int64_t stride_b = batch == 1 ? 0 : B.strides()[0];

  cublasHandle_t handle = cublas_handle(device_);
  const cublasOperation_t op_b = lb.col_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = la.col_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int M = as_int(m, "M"), N = as_int(n, "N"), K = as_int(k, "K"), batches = as_int(batch, "batch");
  const int ld_a = as_int(la.ld, "lda"), ld_b = as_int(lb.ld, "ldb");
  // alpha and beta have the compute type's precision: double for float64, float otherwise.
  const float alpha32 = 1.0f, beta32 = accumulate ? 1.0f : 0.0f;
  const double alpha64 = 1.0, beta64 = accumulate ? 1.0 : 0.0;
  const bool f64 = types.compute == CUBLAS_COMPUTE_64F;
  MT_CUBLAS_CHECK(cublas().gemm_strided_batched_ex(
      handle, op_b, op_a, N, M, K, f64 ? static_cast<const void*>(&alpha64) : &alpha32, B.raw_data(), types.data, ld_b,
      stride_b, A.raw_data(), types.data, ld_a, stride_a, f64 ? static_cast<const void*>(&beta64) : &beta32,
      out.raw_data(), types.data, N, m * n, batches, types.compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace mt::cuda
