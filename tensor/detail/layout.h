// Memory layouts every backend asks about: is a tensor dense row-major, and how a strided matrix maps
// onto a BLAS call (row- or column-major, leading dimension). The CPU backend (Eigen or OpenBLAS) and the CUDA
// backend (cuBLAS) make these decisions the same way, here.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tensor/tensor.h"

namespace mt {

// Row-major dense: the elements are data[0 .. numel) in order. Size-1 dims may have any stride.
// (Not Tensor::is_contiguous, which is out of line: kernels ask this on every call.)
inline bool is_dense(const Tensor& t) {
  const Shape& sizes = t.sizes();
  const Shape& strides = t.strides();
  int64_t expected = 1;
  for (int d = sizes.size() - 1; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// How a (rows, cols) matrix with strides (s_row, s_col) is stored for BLAS: row-major with leading
// dimension ld, or column-major. The stride of a size-1 dim never matters, and BLAS insists on
// ld >= the contiguous extent even when ld is never used, so a single row or column gets a valid ld
// whatever its strides. Returns false for layouts BLAS cannot express (e.g. an expanded matrix with a
// stride-0 dim): those need a copy, or the reference loops.
struct MatrixLayout {
  bool col_major;
  int64_t ld;
};
inline bool blas_layout(int64_t rows, int64_t cols, int64_t s_row, int64_t s_col, MatrixLayout& layout) {
  if ((s_col == 1 || cols == 1) && (rows == 1 || s_row >= std::max<int64_t>(cols, 1))) {
    layout = {false, rows == 1 ? std::max<int64_t>(cols, 1) : s_row};
    return true;
  }
  if ((s_row == 1 || rows == 1) && (cols == 1 || s_col >= std::max<int64_t>(rows, 1))) {
    layout = {true, cols == 1 ? std::max<int64_t>(rows, 1) : s_col};
    return true;
  }
  return false;
}

}  // namespace mt
