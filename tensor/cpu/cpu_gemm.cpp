// CpuBackend::gemm: batched out = a·b (+ out). out: (B, M, N) contiguous; a: (B, M, K); b: (B, K, N).
// a and b are row-major or column-major matrices (unit stride in one of the last two dims), so a
// transpose is free: linear's x·wᵀ passes wᵀ as a column-major view of w, with no copy.
//
// Three implementations:
//   gemm_loops      three loops, any strides, any dtype (cpu::gemm_reference). The documented
//                   reference that the tests compare against, and the fast choice for tiny problems
//                   (M*N*K < kSmallGemm), where a BLAS call's fixed cost dominates.
//   gemv_loops      matrix-vector products (N == 1 or M == 1) of modest size, see kSmallGemv.
//   gemm_blas       a GEMM library in blocks on the intra-op threads (Note [GEMM on the pool]):
//                   Eigen's own GEMM through Eigen::Map, or OpenBLAS's cblas_sgemm/dgemm where the
//                   build links it (MT_HAVE_BLAS), whichever the build measured faster or MT_GEMM
//                   names (Note [Which GEMM] in cmake/Dependencies.cmake).
//   gemm_low_precision  bfloat16 and float16: float32 GEMM (either library) on tiles widened to
//                   float32 one at a time (Note [Low-precision GEMM in tiles]); also the one mixed
//                   case, 16-bit a and b into a float32 out (sums kept unrounded: convolution's
//                   weight and column gradients, Note [Low-precision convolution]).
// int64 always takes the reference loops: BLAS has no integer GEMM. Every path sums in
// compute_t<T> (float32 for the 16-bit dtypes) and rounds each output element once.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/detail/layout.h"
#include "tensor/parallel.h"

#ifdef MT_HAVE_BLAS
#include <cblas.h>
#endif
#ifdef __F16C__
#include <immintrin.h>
#endif
#include "tensor/cpu/eigen_core.h"

namespace mt {
namespace {

// Calls k with an Eigen::Map of the matrix in its storage order, so Eigen's GEMM reads it in place.
template <typename T, typename K>
void with_eigen_matrix(const T* p, int64_t rows, int64_t cols, MatrixLayout l, K&& k) {
  using Stride = Eigen::OuterStride<>;
  if (l.col_major) {
    using M = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
    k(Eigen::Map<const M, 0, Stride>(p, rows, cols, Stride(l.ld)));
  } else {
    using M = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    k(Eigen::Map<const M, 0, Stride>(p, rows, cols, Stride(l.ld)));
  }
}

// C (m, n), row-major with row stride ldc, (C +)= A (m, k)·B (k, n) through Eigen's own GEMM, each
// operand read in place through its layout: gemm_call's path when OpenBLAS is not used.
template <typename T>
void eigen_gemm(int64_t m, int64_t n, int64_t k, const T* A, MatrixLayout la, const T* B, MatrixLayout lb,
                bool accumulate, T* C, int64_t ldc) {
  using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<RowMajor, 0, Eigen::OuterStride<>> c(C, m, n, Eigen::OuterStride<>(ldc));
  with_eigen_matrix(A, m, k, la, [&](const auto& a) {
    with_eigen_matrix(B, k, n, lb, [&](const auto& b) {
      if (accumulate) {
        c.noalias() += a * b;
      } else {
        c.noalias() = a * b;
      }
    });
  });
}

// Below this many multiply-adds the plain loops beat a BLAS call. Measured here (OpenBLAS 0.3.21,
// Eigen 3.4, AVX-512): 4x4x4 takes 45 ns in the loops against 60 (OpenBLAS) and 70 (Eigen), while
// 8x8x8 takes 138 against 105 and 97, and linear's 32x10x1 468 against 143. OpenBLAS's fixed cost
// is small (~50 ns), so only truly tiny products stay in the loops.
constexpr int64_t kSmallGemm = 256;

struct GemmDims {
  int64_t batch, m, n, k;
};

// out[b, i, j] (+)= sum_p a[b, i, p] * b[b, p, j]: one dot product per output element, summed in
// order p = 0, 1, ..., K-1, reading a and b through their strides. On the tiny problems it gets,
// this plain form beats the (i, p, j) "axpy" order, whose vectorised inner loop over j costs more
// to enter than it saves when N is 1 or a few (linear's x·wᵀ with one output feature).
template <typename T, typename Acc = compute_t<T>>
void gemm_loops(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate, GemmDims d) {
  T* c = cpu::data<T>(out);
  const T* pa = cpu::data<const T>(a);
  const T* pb = cpu::data<const T>(b);
  const int64_t sa0 = a.strides()[0], sa1 = a.strides()[1], sa2 = a.strides()[2];
  const int64_t sb0 = b.strides()[0], sb1 = b.strides()[1], sb2 = b.strides()[2];
  for (int64_t bi = 0; bi < d.batch; ++bi) {
    const T* A = pa + bi * sa0;
    const T* B = pb + bi * sb0;
    T* C = c + bi * d.m * d.n;
    for (int64_t i = 0; i < d.m; ++i)
      for (int64_t j = 0; j < d.n; ++j) {
        Acc acc = accumulate ? Acc(C[i * d.n + j]) : Acc(0);
        for (int64_t p = 0; p < d.k; ++p) acc += Acc(A[i * sa1 + p * sa2]) * Acc(B[p * sb1 + j * sb2]);
        C[i * d.n + j] = T(acc);
      }
  }
}

// Matrix-vector products of modest size: N == 1 (y = A·x) or M == 1 (yᵀ = xᵀ·B). Here a GEMM
// call's setup costs more than the arithmetic (the seed model's x·wᵀ and dW are 32×10 by 10×1:
// ~2,400 instructions inside cblas_sgemm against ~1,000 here).
constexpr int64_t kSmallGemv = 16384;

// Note [Independent sums in flight]: every output element is one sum over p = 0, 1, ..., K-1 in
// order, and one such sum is a chain of dependent adds (4 cycles each here), so a loop that
// finishes one output before starting the next waits on that chain. These loops carry kLanes
// outputs at once, each in its own register, each summed in the same order as before; the chains
// overlap. (Whether the compiler fuses a multiply and its add into one FMA differs between loop
// shapes, so an output may differ from the reference loops' in the last bit: the tests compare
// within a tolerance. The seed model's weights after 1000 steps moved by 1.5e-8.)
constexpr int64_t kLanes = 8;

// C[i] (+)= Σ_p A[i, p]·B[p] for the rows i of A, kLanes rows at a time. A stride may be the
// constant Unit, so the compiler sees unit-stride loads (and vectorises the lanes when rows are).
using Unit = std::integral_constant<int64_t, 1>;
template <typename T, typename RowStride, typename ColStride, typename Acc = compute_t<T>>
void rows_times_vector(T* C, const T* A, RowStride row_stride, ColStride col_stride, const T* B, int64_t b_stride,
                       int64_t m, int64_t k, bool accumulate) {
  int64_t i = 0;
  for (; i + kLanes <= m; i += kLanes) {
    Acc acc[kLanes];
    for (int64_t q = 0; q < kLanes; ++q) acc[q] = accumulate ? Acc(C[i + q]) : Acc(0);
    const T* rows = A + i * row_stride;
    for (int64_t p = 0; p < k; ++p) {
      const Acc bp = B[p * b_stride];
      for (int64_t q = 0; q < kLanes; ++q) acc[q] += Acc(rows[q * row_stride + p * col_stride]) * bp;
    }
    for (int64_t q = 0; q < kLanes; ++q) C[i + q] = T(acc[q]);
  }
  for (; i < m; ++i) {
    Acc acc = accumulate ? Acc(C[i]) : Acc(0);
    for (int64_t p = 0; p < k; ++p) acc += Acc(A[i * row_stride + p * col_stride]) * Acc(B[p * b_stride]);
    C[i] = T(acc);
  }
}

template <typename T>
void gemv_loops(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate, GemmDims d) {
  T* c = cpu::data<T>(out);
  const T* pa = cpu::data<const T>(a);
  const T* pb = cpu::data<const T>(b);
  const Shape& sa = a.strides();
  const Shape& sb = b.strides();
  for (int64_t bi = 0; bi < d.batch; ++bi) {
    const T* A = pa + bi * sa[0];
    const T* B = pb + bi * sb[0];
    T* C = c + bi * d.m * d.n;
    if (d.n == 1) {  // C[i] = Σ_p A[i, p]·B[p]: the rows of A against the vector B
      if (sa[2] == 1) rows_times_vector(C, A, sa[1], Unit{}, B, sb[1], d.m, d.k, accumulate);
      else rows_times_vector(C, A, sa[1], sa[2], B, sb[1], d.m, d.k, accumulate);
    } else {  // M == 1: C[j] = Σ_p A[p]·B[p, j]: the columns of B against the vector A
      if (sb[2] == 1) rows_times_vector(C, B, Unit{}, sb[1], A, sa[2], d.n, d.k, accumulate);
      else rows_times_vector(C, B, sb[2], sb[1], A, sa[2], d.n, d.k, accumulate);
    }
  }
}

// Note [GEMM on the pool]: the GEMM library runs single-threaded (OpenBLAS: set_num_threads keeps
// it at 1; Eigen: built without OpenMP), and a large GEMM is split here into fixed blocks of C's
// rows (or columns, whichever dimension is longer), one library call per block, run on the
// intra-op pool like every other kernel. Two reasons:
//   - bits: OpenBLAS's own threads change its K blocking with the thread count (measured: a
//     (64, 784)·(784, 256) product differs in the last bits between 1 and 2 OpenBLAS threads), while
//     a block's single-threaded call depends only on the block's shape, and the blocks depend only
//     on the GEMM's (Note [Fixed chunks], tensor/parallel.h);
//   - one pool: OpenBLAS's idle threads spin for a while after each call, and would compete for the
//     cores with the pool's threads running the elementwise kernels between GEMMs.
// Each block costs a repacking of the operand it shares, O(rows·K) beside O(rows·K·block) work,
// and a narrow block runs the kernels below their rate. Measured here (OpenBLAS 0.3.21, one
// thread, thread CPU time): C (1024, 1024) = A (1024, 1024)·B in blocks of 64 / 128 / 256 / 512 / 1024
// rows ran at 75 / 83 / 88 / 93 / 94 GFLOP/s, and (256, 784)·(784, 128), an MLP layer's size, in
// blocks of 16 / 32 / 64 / 128 / 256 rows at 75 / 87 / 90 / 98 / 101. So a block is at least
// kGemmGrain multiply-adds and at least min(kGemmBlockRows, half the dimension split) rows: a big
// GEMM still splits in two or more for two threads, but never into slivers. Both bounds depend on
// the shape alone (bits).
//
// Note [One call on one thread]: with one thread the blocks buy no parallelism, only their cost:
// each repacks the shared operand and runs narrower. Measured on an Intel Xeon (OpenBLAS 0.3.21,
// SkylakeX kernels, one thread, best of 7): the MLP's forward (128, 784)·(784, 256) took 373 µs in
// one call against 397 in its two column blocks, and dW₁ (256, 128)·(128, 784) 313-321 against 327.
// So OpenBLAS at one thread takes the whole product in one call, but only where that gives the
// blocks' bits, which depends on the library's kernels:
//   - SkylakeX kernels: OpenBLAS's single-threaded driver cuts K into panels by K alone and every
//     block sums each element over the same panels in the same order, so splitting C's rows or
//     columns changes no element, except where a block is small enough for the small-matrix
//     kernels, which sum differently (their permit takes them up to 100³ multiply-adds). A sweep of
//     1440 random shapes that split, both transposes, beta 0 and 1: 15 differed between one call and
//     the blocks, every one with a last block under 10⁶ multiply-adds; so the one call is taken only
//     where the last block is at least kGemmGrain multiply-adds (1203 of the 1440, none differed).
//   - Zen kernels (an AMD EPYC host, same OpenBLAS): an element's bits depend on where it falls in
//     the micro-kernel's tile of 24, counted from the call's first row or column, so a block that
//     starts at 512 (not a multiple of 24) shifts every tile after it. Measured: (1100, 300)·(300,
//     200) in blocks of 512 rows differs from one call in 9127 elements, from row 504 on, even with
//     K = 8; in blocks of 384 rows (16 tiles) in none. Here every thread count keeps the blocks.
// Other kernels were never measured, so they keep the blocks too: the one call is an allow-list of
// kernels (openblas_get_corename), never assumed, and never on Eigen, whose own blocking depends on
// all three sizes. tests/nn/test_thread_independence.cpp compares 1 thread with 2 and 3 on the MLP,
// on 36 random shapes and on 4 of the SkylakeX 15, and fails without the bound on SkylakeX and
// without the allow-list on Zen.
constexpr int64_t kGemmGrain = int64_t{1} << 22;  // multiply-adds per block, at least
constexpr int64_t kGemmBlockRows = 512;           // rows (or columns) per block, at least, where the GEMM has them

#ifdef MT_HAVE_BLAS
constexpr bool kHaveOpenBLAS = true;
constexpr bool kDefaultOpenBLAS = MT_GEMM_DEFAULT_OPENBLAS;  // the build's pick (CMakeLists.txt)

// C (m, n), row-major with row stride ldc, (beta·C +)= A (m, k)·B (k, n), through OpenBLAS.
template <typename T>
void gemm_openblas(int64_t m, int64_t n, int64_t k, const T* A, MatrixLayout la, const T* B, MatrixLayout lb,
                   bool accumulate, T* C, int64_t ldc) {
  static const int settled = get_num_threads();  // Note [GEMM on the pool]: OpenBLAS set to 1 thread
  (void)settled;
  const auto ta = la.col_major ? CblasTrans : CblasNoTrans;
  const auto tb = lb.col_major ? CblasTrans : CblasNoTrans;
  const T beta = accumulate ? T(1) : T(0);  // beta = 1 adds onto out (linear's bias)
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, A, la.ld, B, lb.ld, beta, C, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, A, la.ld, B, lb.ld, beta, C, ldc);
  }
}

#else
constexpr bool kHaveOpenBLAS = false;
constexpr bool kDefaultOpenBLAS = false;
#endif

// Note [Which GEMM] (cmake/Dependencies.cmake) at run time: the build's default, unless MT_GEMM
// names the other. Settled on the first GEMM; a malformed value is one error line, every time.
bool settle_openblas() {
  const char* env = std::getenv("MT_GEMM");
  const std::string name = env ? env : "";
  if (name.empty()) return kDefaultOpenBLAS;
  MT_CHECK(name == "eigen" || name == "openblas", "MT_GEMM must be eigen or openblas, got '", name, "'");
  MT_CHECK(name == "eigen" || kHaveOpenBLAS, "MT_GEMM=openblas, but this build has no OpenBLAS ",
           "(configured with MT_BLAS=OFF, or without libopenblas-dev)");
  return name == "openblas";
}

bool gemm_uses_openblas() {
  static const bool openblas = settle_openblas();
  return openblas;
}

// The OpenBLAS kernels on which one call gives the blocks' bits (Note [One call on one thread]).
bool one_call_keeps_bits() {
#ifdef MT_HAVE_BLAS
  static const bool verified = std::string(openblas_get_corename()) == "SkylakeX";
  return verified;
#else
  return false;
#endif
}

template <typename T>
void gemm_call(bool openblas, int64_t m, int64_t n, int64_t k, const T* A, MatrixLayout la, const T* B,
               MatrixLayout lb, bool accumulate, T* C, int64_t ldc) {
#ifdef MT_HAVE_BLAS
  if (openblas) return gemm_openblas<T>(m, n, k, A, la, B, lb, accumulate, C, ldc);
#endif
  eigen_gemm<T>(m, n, k, A, la, B, lb, accumulate, C, ldc);
}

template <typename T>
void gemm_blas(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate, GemmDims d,
               MatrixLayout la, MatrixLayout lb) {
  T* c = cpu::data<T>(out);
  const T* pa = cpu::data<const T>(a);
  const T* pb = cpu::data<const T>(b);
  // Blocks of `block` rows of C (split_rows) or columns, a multiple of 64, fixed by the shapes.
  const bool split_rows = d.m >= d.n;
  const int64_t along = split_rows ? d.m : d.n, per_line = (split_rows ? d.n : d.m) * d.k;
  const auto round_up_64 = [](int64_t x) { return std::max<int64_t>(64, (x + 63) / 64 * 64); };
  const int64_t block = std::max(round_up_64(kGemmGrain / std::max<int64_t>(per_line, 1)),
                                 std::min(kGemmBlockRows, round_up_64((along + 1) / 2)));
  const bool openblas = gemm_uses_openblas();  // here, on the calling thread: a bad MT_GEMM throws here
  const int64_t last_block = along - (along - 1) / block * block;
  const bool one_call =
      openblas && get_num_threads() == 1 && one_call_keeps_bits() && last_block * per_line >= kGemmGrain;
  const int64_t per_block = one_call ? along : block;  // Note [One call on one thread]
  const int64_t blocks = (along + per_block - 1) / per_block;
  parallel_for(d.batch * blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t bi = t / blocks, first = t % blocks * per_block, count = std::min(per_block, along - first);
      const T* A = pa + bi * a.strides()[0];
      const T* B = pb + bi * b.strides()[0];
      T* C = c + bi * d.m * d.n;
      if (split_rows) {  // rows [first, first + count) of A and C; row i of A starts at i·ld or i
        gemm_call<T>(openblas, count, d.n, d.k, A + first * (la.col_major ? 1 : la.ld), la, B, lb, accumulate,
                     C + first * d.n, d.n);
      } else {  // columns [first, first + count) of B and C
        gemm_call<T>(openblas, d.m, count, d.k, A, la, B + first * (lb.col_major ? lb.ld : 1), lb, accumulate,
                     C + first, d.n);
      }
    }
  });
}

// Note [Low-precision GEMM in tiles]: BLAS has no bfloat16 or float16 GEMM here (Debian's OpenBLAS
// 0.3.21 is built without cblas_sbgemm: `nm -D libopenblas.so` shows no sbgemm), and widening
// both operands to float32 first would allocate twice their size again: a (4096, 4096) bfloat16
// weight would need 64 MiB of float32 beside its 32. So C is cut into tiles of kLowTile x kLowTile,
// and each tile is one task: for each panel of kLowTile along K, the A (tile rows, panel) and
// B (panel, tile columns) pieces are widened into small float32 buffers and multiplied by the
// float32 GEMM (beta 1, onto the tile's float32 sums); after the last panel the tile is rounded
// into out once. The scratch is three float32 buffers per task, each at most kLowTile² (768 KiB in
// all), whatever the operands' sizes, and cut to the tile's and the panel's size where a dim is
// shorter (a K of 128: 512 KiB); it comes from the CPU allocator, so cpu_memory_stats sees it (the
// test of the bound does). Each piece of A is widened once per tile column and each of B once per tile row:
// 2/kLowTile conversions per multiply-add. The tiles are fixed by the shapes, and each tile's
// sums run in the same order on any thread, so the bits do not depend on the thread count.
constexpr int64_t kLowTile = 256;

// dst[i] = float(src[i·stride]) for i < n. float16 rows take F16C's VCVTPH2PS where the build has it,
// 8 at a time: the portable half_to_float's branches made a 1024³ float16 GEMM twice as slow as a
// bfloat16 one (130 against 68 ms here). The instruction's results are half_to_float's, NaNs
// included (quiet bit set, payload kept); the float16 GEMM test compares them with PyTorch's.
template <typename T>
void widen(float* dst, const T* src, int64_t n, int64_t stride) {
  int64_t i = 0;
#ifdef __F16C__
  if constexpr (std::is_same_v<T, Half>) {
    if (stride == 1)
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  }
#endif
  for (; i < n; ++i) dst[i] = src[i * stride];
}

template <typename T, typename Out = T>
void gemm_low_precision(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate, GemmDims d) {
  Out* c = cpu::data<Out>(out);
  const T* pa = cpu::data<const T>(a);
  const T* pb = cpu::data<const T>(b);
  const Shape& sa = a.strides();
  const Shape& sb = b.strides();
  const int64_t row_tiles = (d.m + kLowTile - 1) / kLowTile, col_tiles = (d.n + kLowTile - 1) / kLowTile;
  const bool openblas = gemm_uses_openblas();  // on the calling thread: a bad MT_GEMM throws here
  parallel_for(d.batch * row_tiles * col_tiles, 1, [&](int64_t lo, int64_t hi) {
    // wa (rows, panel), wb (panel, cols), acc (rows, cols): row-major float32, at most kLowTile².
    const int64_t tm = std::min(kLowTile, d.m), tk = std::min(kLowTile, d.k), tn = std::min(kLowTile, d.n);
    const Tensor scratch = empty({tm * tk + tk * tn + tm * tn}, {.dtype = kFloat32});
    float* wa = scratch.data_ptr<float>();
    float* wb = wa + tm * tk;
    float* acc = wb + tk * tn;
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t bi = t / (row_tiles * col_tiles), tile = t % (row_tiles * col_tiles);
      const int64_t i0 = tile / col_tiles * kLowTile, j0 = tile % col_tiles * kLowTile;
      const int64_t rows = std::min(kLowTile, d.m - i0), cols = std::min(kLowTile, d.n - j0);
      const T* A = pa + bi * sa[0] + i0 * sa[1];
      const T* B = pb + bi * sb[0] + j0 * sb[2];
      Out* C = c + bi * d.m * d.n + i0 * d.n + j0;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) acc[i * cols + j] = accumulate ? float(C[i * d.n + j]) : 0.0f;
      for (int64_t p0 = 0; p0 < d.k; p0 += kLowTile) {
        const int64_t panel = std::min(kLowTile, d.k - p0);
        for (int64_t i = 0; i < rows; ++i) widen(wa + i * panel, A + i * sa[1] + p0 * sa[2], panel, sa[2]);
        for (int64_t p = 0; p < panel; ++p) widen(wb + p * cols, B + (p0 + p) * sb[1], cols, sb[2]);
        gemm_call<float>(openblas, rows, cols, panel, wa, {false, panel}, wb, {false, cols}, true, acc, cols);
      }
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) C[i * d.n + j] = Out(acc[i * cols + j]);
    }
  });
}

// Checks the contract's shapes and returns (B, M, N, K).
GemmDims gemm_dims(const Tensor& out, const Tensor& a, const Tensor& b) {
  MT_CHECK(out.dim() == 3 && a.dim() == 3 && b.dim() == 3 && cpu::is_contiguous(out),
           "gemm: CPU kernel needs 3-D (B, M, K)·(B, K, N) -> contiguous (B, M, N), got ", a.sizes(), "·",
           b.sizes(), " -> ", out.sizes());
  const GemmDims d{out.sizes()[0], out.sizes()[1], out.sizes()[2], a.sizes()[2]};
  MT_CHECK(a.sizes() == Shape({d.batch, d.m, d.k}) && b.sizes() == Shape({d.batch, d.k, d.n}),
           "gemm: shapes do not match: ", a.sizes(), "·", b.sizes(), " -> ", out.sizes());
  return d;
}

}  // namespace

void CpuBackend::gemm(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate) {
  const GemmDims d = gemm_dims(out, a, b);
  if (out.numel() == 0) return;
  if (out.dtype() == kFloat32 && is_low_precision(a.dtype())) {  // 16-bit a, b; float32 sums (backend.h)
    MT_CHECK(b.dtype() == a.dtype(), "gemm: a (", a.dtype(), ") and b (", b.dtype(), ") differ in dtype");
    return MT_DISPATCH_FLOAT_AND_LOWP(a.dtype(), "gemm", [&]<typename T>() {
      if constexpr (is_low_precision(dtype_of<T>::value)) gemm_low_precision<T, float>(out, a, b, accumulate, d);
    });
  }
  MT_DISPATCH_ALL_AND_LOWP(out.dtype(), "gemm", [&]<typename T>() {
    MatrixLayout la, lb;
    if ((d.n == 1 || d.m == 1) && d.m * d.n * d.k < kSmallGemv) return gemv_loops<T>(out, a, b, accumulate, d);
    if constexpr (!std::is_same_v<compute_t<T>, T>) {
      if (d.m * d.n * d.k >= kSmallGemm) return gemm_low_precision<T>(out, a, b, accumulate, d);
    } else if constexpr (!std::is_same_v<T, int64_t>) {
      if (d.m * d.n * d.k >= kSmallGemm && blas_layout(d.m, d.k, a.strides()[1], a.strides()[2], la) &&
          blas_layout(d.k, d.n, b.strides()[1], b.strides()[2], lb)) {
        return gemm_blas<T>(out, a, b, accumulate, d, la, lb);
      }
    }
    gemm_loops<T>(out, a, b, accumulate, d);
  });
}

const char* cpu_gemm_library() { return gemm_uses_openblas() ? "OpenBLAS" : "Eigen"; }

void cpu::gemm_reference(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate) {
  const GemmDims d = gemm_dims(out, a, b);
  MT_DISPATCH_ALL_AND_LOWP(out.dtype(), "gemm", [&]<typename T>() { gemm_loops<T>(out, a, b, accumulate, d); });
}

}  // namespace mt
