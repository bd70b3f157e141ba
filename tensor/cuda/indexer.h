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
#include <climits>
#include <cstdint>
#include <initializer_list>

#include "tensor/host_device.h"
#include "tensor/shape.h"

namespace mt::cuda {

template <int N, typename I = int64_t>
struct StridedIndexer {
  using Index = I;
  int ndim = 0;                      // 0: a single element (every offset is 0)
  I sizes[kMaxDims] = {};            // innermost first
  I strides[kMaxDims][N] = {};       // strides[d][t]: tensor t's stride along dim d

  // off[t] = offset (in elements) of linear element `linear` in tensor t.
  MT_HOST_DEVICE void offsets(I linear, I (&off)[N]) const {
    if (ndim == 1) {  // the common strided case (one run, or a merged contiguous block): no division
      for (int t = 0; t < N; ++t) off[t] = linear * strides[0][t];
      return;
    }
    for (int t = 0; t < N; ++t) off[t] = 0;
    for (int d = 0; d < ndim; ++d) {
      const I i = linear % sizes[d];
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

// Note [32-bit index math]: an integer division is one instruction pair on a CPU, but a GPU has no
// divider: nvcc expands a 32-bit `/` or `%` into about 20 instructions and a 64-bit one into a
// call of about 70, and the strided kernels divide once per dim per element. So an indexer whose
// offsets all fit in 32 bits is narrowed to uint32_t on the host and its kernel instantiated for
// that: true when the element count and every tensor's largest offset, sum of (size - 1)·stride,
// are at most index32_limit() (2^31 - 1; no stride is negative here, and the kernels' grid-stride
// steps stay below 2^32). A tensor beyond it keeps int64_t, the same kernel. Contiguous operands
// never get here: map_unary / map_binary take their dense or packed path, with no index math.
// Tests lower the limit (index32_limit() = small) to run the 64-bit path on small tensors.
inline int64_t& index32_limit() {
  static int64_t limit = INT32_MAX;
  return limit;
}

template <int N>
bool fits_index32(const StridedIndexer<N>& ix, int64_t n) {
  const int64_t limit = index32_limit();
  if (n > limit) return false;
  for (int t = 0; t < N; ++t) {
    int64_t extent = 0;
    for (int d = 0; d < ix.ndim; ++d) {
      if (ix.strides[d][t] < 0) return false;
      extent += (ix.sizes[d] - 1) * ix.strides[d][t];
      if (extent > limit) return false;
    }
  }
  return true;
}

// For kernels that index dense tensors themselves (cuda_index.cu, cuda_conv.cu): every one of these
// element counts fits 32-bit offsets.
inline bool fits_index32(std::initializer_list<int64_t> numels) {
  for (int64_t n : numels)
    if (n > index32_limit()) return false;
  return true;
}

// fn.template operator()<I>() with I = Narrow (uint32_t, or int32_t for signed coordinates) when
// fits32, else int64_t.
template <typename Narrow = uint32_t, typename F>
void with_index_type(bool fits32, F&& fn) {
  if (fits32) fn.template operator()<Narrow>();
  else fn.template operator()<int64_t>();
}

// The same indexer in uint32_t; only when fits_index32.
template <int N>
StridedIndexer<N, uint32_t> narrow_index32(const StridedIndexer<N>& ix) {
  StridedIndexer<N, uint32_t> out;
  out.ndim = ix.ndim;
  for (int d = 0; d < ix.ndim; ++d) {
    out.sizes[d] = static_cast<uint32_t>(ix.sizes[d]);
    for (int t = 0; t < N; ++t) out.strides[d][t] = static_cast<uint32_t>(ix.strides[d][t]);
  }
  return out;
}

// fn(indexer) with the 32-bit indexer when it fits (Note [32-bit index math]), else the 64-bit one.
template <int N, typename F>
void with_index_width(const StridedIndexer<N>& ix, int64_t n, F&& fn) {
  if (fits_index32(ix, n)) fn(narrow_index32(ix));
  else fn(ix);
}

}  // namespace mt::cuda
