// small_gemm: C (+)= A·B for matrices that fit in the L1 cache, register-tiled, one thread, float
// and double. The attention kernel's per-head products (tensor/cpu/cpu_attention.cpp), where a
// GEMM library's call costs more than the arithmetic (Note [Attention's products in registers],
// tensor/cpu/small_gemm.cpp). Not a general GEMM: no packing and no cache blocking, so large
// operands run at the speed of their cache misses; tensor/cpu/cpu_gemm.cpp is the GEMM for those.
#pragma once

#include <cstdint>

namespace mt::cpu {

// C (m, n) (+)= A (m, k)·B (k, n), summed over p = 0, 1, ..., k-1 in order for every element.
//   A: element (i, p) at A[i·a_row + p·a_col], any strides (so a transpose is free);
//   B: row-major, unit column stride, row p at B + p·ldb;
//   C: row-major, unit column stride, row i at C + i·ldc; accumulate adds onto it (k = 0: C = 0).
template <typename T>
void small_gemm(int64_t m, int64_t n, int64_t k, const T* A, int64_t a_row, int64_t a_col, const T* B, int64_t ldb,
                T* C, int64_t ldc, bool accumulate);

// dst (cols, rows) = srcᵀ for src (rows, cols): element (i, j) of src at src[i·ld_src + j] goes to
// dst[j·ld_dst + i]. The right operand of a product with a transposed matrix, such as Q·Kᵀ.
template <typename T>
void transpose(int64_t rows, int64_t cols, const T* src, int64_t ld_src, T* dst, int64_t ld_dst);

}  // namespace mt::cpu
