// StridedIndexer: maps the linear index of an element (row-major over a loop shape) to the element's
// offset in each of N tensors with their own strides (0 where broadcast). It is the general path of
// every CUDA elementwise kernel: thread k handles linear index k and reads/writes through offsets.
//
//   auto ix = make_indexer<3>(out.sizes(), {out.strides().begin(), a.strides().begin(), b.strides().begin()});
//   // in a kernel:  int64_t off[3]; ix.offsets(i, off);  o[off[0]] = f(x[off[1]], y[off[2]]);
//
// make_indexer simplifies the shape first, with the same rules as the CPU's simplify_loop
// (tensor/cpu/strided_loop.h): size-1 dims are dropped, and adjacent dims are merged when they are
// contiguous with each other for every tensor. A contiguous tensor becomes one dim, and bias + (B, C)
// stays two. Dims are stored innermost first, so offsets() peels them off with % and /.
// It does not launch anything or know dtypes; it is plain C++ (MT_HOST_DEVICE), tested on the CPU
// in tests/tensor/test_cuda_host_math.cpp against the CPU backend's strided loop.
#pragma once

#include <array>
#include <cstdint>

#include "tensor/host_device.h"
#include "tensor/shape.h"

namespace mt::cuda {

template <int N>
struct StridedIndexer {
  int ndim = 0;                            // 0: a single element (every offset is 0)
  int64_t sizes[kMaxDims] = {};            // innermost first
  int64_t strides[kMaxDims][N] = {};       // strides[d][t]: tensor t's stride along dim d

  // off[t] = offset (in elements) of linear element `linear` in tensor t.
  MT_HOST_DEVICE void offsets(int64_t linear, int64_t (&off)[N]) const {
    if (ndim == 1) {  // the common strided case (one run, or a merged contiguous block): no division
      for (int t = 0; t < N; ++t) off[t] = linear * strides[0][t];
      return;
    }
    for (int t = 0; t < N; ++t) off[t] = 0;
    for (int d = 0; d < ndim; ++d) {
      const int64_t i = linear % sizes[d];
      linear /= sizes[d];
      for (int t = 0; t < N; ++t) off[t] += i * strides[d][t];
    }
  }
};

// strides[t] points at tensor t's strides, one per dim of `sizes`.
template <int N>
StridedIndexer<N> make_indexer(const Shape& sizes, const std::array<const int64_t*, N>& strides) {
  StridedIndexer<N> ix;
  for (int d = sizes.size() - 1; d >= 0; --d) {  // innermost to outermost
    if (sizes[d] == 1) continue;
    if (ix.ndim > 0) {
      const int last = ix.ndim - 1;  // the merged group just inside dim d
      bool mergeable = true;
      for (int t = 0; t < N; ++t) mergeable = mergeable && strides[t][d] == ix.strides[last][t] * ix.sizes[last];
      if (mergeable) {
        ix.sizes[last] *= sizes[d];
        continue;
      }
    }
    ix.sizes[ix.ndim] = sizes[d];
    for (int t = 0; t < N; ++t) ix.strides[ix.ndim][t] = strides[t][d];
    ++ix.ndim;
  }
  return ix;
}

// True when the indexer is one plain run with unit strides for every tensor: the contiguous fast path.
template <int N>
bool is_unit_run(const StridedIndexer<N>& ix) {
  if (ix.ndim == 0) return true;
  if (ix.ndim > 1) return false;
  for (int t = 0; t < N; ++t)
    if (ix.strides[0][t] != 1) return false;
  return true;
}

}  // namespace mt::cuda
