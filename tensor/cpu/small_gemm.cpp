// Note [Attention's products in registers]: a GPT head's products are tiny (at the preset's sizes,
// (64, 32)·(32, 64) and (64, 64)·(64, 32), cut further by the causal mask into blocks of 8 rows),
// and seven of them per head and step run 128 heads per layer. Through a GEMM library each call
// packs both operands into its own layout and walks its cache blocking before the first
// multiply-add, which at these sizes costs about as much as the arithmetic. Here the operands are
// already in the L1 cache, so no packing is needed: C is cut into tiles of kRows rows by kVectors
// vectors of columns; a tile's sums stay in registers for the whole k loop, which loads one row of
// B's tile (kVectors vectors) and broadcasts one element of A per tile row, then multiply-adds
// every pair. 4 x 4 vectors of 8 floats is 16 sum registers, 4 of B and 1 of A: it fits the 32
// vector registers of AVX-512 (the compiler spills without it, so there the tile is 4 x 2) and
// needs 8 loads per 16 FMAs, within what a core issues per cycle. The ends are tiles of fewer rows
// and vectors, and the last n mod lanes columns plain loops; every element is summed over p in
// order, whichever tile it falls in. bench/bench_transformer.cpp times the attention kernel's parts.
#include "tensor/cpu/small_gemm.h"

#include <type_traits>

namespace mt::cpu {
namespace {

// 32-byte vectors (GCC's vector extension: any target, no intrinsics): 8 floats or 4 doubles.
template <typename T>
struct VecOf;
template <>
struct VecOf<float> {
  using type = float __attribute__((vector_size(32)));
};
template <>
struct VecOf<double> {
  using type = double __attribute__((vector_size(32)));
};
template <typename T>
using Vec = typename VecOf<T>::type;
template <typename T>
constexpr int64_t kLanes = sizeof(Vec<T>) / sizeof(T);

constexpr int kRows = 4;
#if defined(__AVX512F__)
constexpr int kVectors = 4;
#else
constexpr int kVectors = 2;
#endif

template <typename T>
Vec<T> load(const T* p) {
  Vec<T> v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
template <typename T>
void store(T* p, Vec<T> v) {
  __builtin_memcpy(p, &v, sizeof v);
}

// Note [B in registers]: GCC (12, -O3) folds each load of B's row into the FMA that uses it, as a
// memory operand, so a tile row reloads what the previous row loaded: 16 loads and 4 broadcasts per
// 16 FMAs, and the loads, not the FMAs, bound the loop (measured here, at the preset's sizes: 49
// GFLOP/s for P·V). An empty asm statement that claims to change the vector makes the compiler hold
// it in a register for the FMAs that follow (72 GFLOP/s, OpenBLAS's rate on the same calls). On
// targets other than x86 the statement is left out.
template <typename V>
inline void keep_in_register(V& v) {
#if defined(__x86_64__) && defined(__AVX__)
  asm("" : "+x"(v));
#else
  (void)v;
#endif
}

// One tile: rows [0, R) of C, columns [0, NV·lanes), sums in registers over the whole k loop.
template <typename T, int R, int NV>
void tile(int64_t k, const T* A, int64_t a_row, int64_t a_col, const T* B, int64_t ldb, T* C, int64_t ldc,
          bool accumulate) {
  constexpr int64_t L = kLanes<T>;
  Vec<T> c[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) c[r][v] = accumulate ? load(C + r * ldc + v * L) : Vec<T>{};
  for (int64_t p = 0; p < k; ++p) {
    Vec<T> b[NV];
    for (int v = 0; v < NV; ++v) b[v] = load(B + p * ldb + v * L);
    for (int v = 0; v < NV; ++v) keep_in_register(b[v]);
    for (int r = 0; r < R; ++r) {
      const T a = A[r * a_row + p * a_col];
      for (int v = 0; v < NV; ++v) c[r][v] += a * b[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) store(C + r * ldc + v * L, c[r][v]);
}

// Columns [0, NV·lanes) of C, all m rows: kRows at a time, then the last m mod kRows.
template <typename T, int NV>
void column_block(int64_t m, int64_t k, const T* A, int64_t a_row, int64_t a_col, const T* B, int64_t ldb, T* C,
                  int64_t ldc, bool accumulate) {
  int64_t i = 0;
  for (; i + kRows <= m; i += kRows)
    tile<T, kRows, NV>(k, A + i * a_row, a_row, a_col, B, ldb, C + i * ldc, ldc, accumulate);
  const T* a = A + i * a_row;
  T* c = C + i * ldc;
  switch (m - i) {
    case 3: return tile<T, 3, NV>(k, a, a_row, a_col, B, ldb, c, ldc, accumulate);
    case 2: return tile<T, 2, NV>(k, a, a_row, a_col, B, ldb, c, ldc, accumulate);
    case 1: return tile<T, 1, NV>(k, a, a_row, a_col, B, ldb, c, ldc, accumulate);
    default: return;
  }
}
static_assert(kRows == 4, "column_block's switch covers kRows - 1 left-over rows");

// Columns [j0, n), fewer than one vector: one plain sum per element.
template <typename T>
void column_tail(int64_t m, int64_t j0, int64_t n, int64_t k, const T* A, int64_t a_row, int64_t a_col, const T* B,
                 int64_t ldb, T* C, int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = j0; j < n; ++j) {
      T acc = accumulate ? C[i * ldc + j] : T(0);
      for (int64_t p = 0; p < k; ++p) acc += A[i * a_row + p * a_col] * B[p * ldb + j];
      C[i * ldc + j] = acc;
    }
}

// Note [Transpose in 8 x 8 blocks]: Q·Kᵀ needs Kᵀ row by row, and an element-by-element transpose
// of a (64, 32) head cost a fifth of the product it prepares (one scattered store per element).
// Blocks of 8 x 8 floats are read as 8 row vectors and written as 8 column vectors, rearranged in
// three rounds of shuffles (pairs of rows interleaved, then pairs of pairs, then the 128-bit halves
// exchanged: AVX's unpack, shufps and permute2f128 pattern), 24 shuffles per 64 elements.
using F8 = Vec<float>;
void transpose_8x8(const float* src, int64_t ld_src, float* dst, int64_t ld_dst) {
  F8 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = load(src + i * ld_src);
  for (int i = 0; i < 8; i += 2) {  // t: elements 0, 1, 4, 5 (and 2, 3, 6, 7) of rows i, i + 1 interleaved
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)  // u: four rows' elements j and j + 4 for j = 0, 1, 2, 3
    for (int h = 0; h < 2; ++h) {
      u[i + 2 * h] = __builtin_shufflevector(t[i + h], t[i + h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      u[i + 2 * h + 1] = __builtin_shufflevector(t[i + h], t[i + h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int j = 0; j < 4; ++j) {  // column j from the low halves, column j + 4 from the high ones
    store(dst + j * ld_dst, __builtin_shufflevector(u[j], u[j + 4], 0, 1, 2, 3, 8, 9, 10, 11));
    store(dst + (j + 4) * ld_dst, __builtin_shufflevector(u[j], u[j + 4], 4, 5, 6, 7, 12, 13, 14, 15));
  }
}

}  // namespace

template <typename T>
void transpose(int64_t rows, int64_t cols, const T* src, int64_t ld_src, T* dst, int64_t ld_dst) {
  int64_t i0 = 0;
  if constexpr (std::is_same_v<T, float>) {  // Note [Transpose in 8 x 8 blocks]
    for (; i0 + 8 <= rows; i0 += 8)
      for (int64_t j = 0; j + 8 <= cols; j += 8) transpose_8x8(src + i0 * ld_src + j, ld_src, dst + j * ld_dst + i0, ld_dst);
    for (int64_t i = 0; i < i0; ++i)  // the last cols mod 8 columns of those rows
      for (int64_t j = cols / 8 * 8; j < cols; ++j) dst[j * ld_dst + i] = src[i * ld_src + j];
  }
  for (int64_t i = i0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[j * ld_dst + i] = src[i * ld_src + j];
}

template <typename T>
void small_gemm(int64_t m, int64_t n, int64_t k, const T* A, int64_t a_row, int64_t a_col, const T* B, int64_t ldb,
                T* C, int64_t ldc, bool accumulate) {
  constexpr int64_t L = kLanes<T>;
  int64_t j = 0;
  for (; j + kVectors * L <= n; j += kVectors * L)
    column_block<T, kVectors>(m, k, A, a_row, a_col, B + j, ldb, C + j, ldc, accumulate);
  const int64_t vectors = (n - j) / L;  // fewer than kVectors left
  if (vectors == 3) column_block<T, 3>(m, k, A, a_row, a_col, B + j, ldb, C + j, ldc, accumulate);
  if (vectors == 2) column_block<T, 2>(m, k, A, a_row, a_col, B + j, ldb, C + j, ldc, accumulate);
  if (vectors == 1) column_block<T, 1>(m, k, A, a_row, a_col, B + j, ldb, C + j, ldc, accumulate);
  column_tail(m, j + vectors * L, n, k, A, a_row, a_col, B, ldb, C, ldc, accumulate);
}

template void transpose<float>(int64_t, int64_t, const float*, int64_t, float*, int64_t);
template void transpose<double>(int64_t, int64_t, const double*, int64_t, double*, int64_t);
template void small_gemm<float>(int64_t, int64_t, int64_t, const float*, int64_t, int64_t, const float*, int64_t,
                                float*, int64_t, bool);
template void small_gemm<double>(int64_t, int64_t, int64_t, const double*, int64_t, int64_t, const double*, int64_t,
                                 double*, int64_t, bool);

}  // namespace mt::cpu
