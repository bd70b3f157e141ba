// strided_loop: walks N tensors of one shape element by element, each with its own strides (in
// elements; 0 where a tensor was broadcast). Every CPU elementwise kernel and the general reduction
// use it for inputs that are not plain contiguous arrays.
//
// It first simplifies the iteration space, so that most "strided" cases become long simple runs:
//   - dims of size 1 are dropped (their stride never matters);
//   - adjacent dims are merged when they are contiguous with each other *for every tensor*
//     (stride_outer == stride_inner * size_inner), so a contiguous (B, T, C) tensor is one run of
//     B*T*C elements and a broadcast (1, C) bias against a (B, C) input stays two dims, (B, C).
// Then it calls the functor once per innermost run:
//     f(n, inner_strides, p0, p1, ...)   // element i of the run is p0[i * inner_strides[0]], ...
// and the kernel decides inside f how to loop (all strides 1, one stride 0, or general).
// It does not reorder dims or know anything about dtypes; parallel_strided_loop splits it across threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "tensor/parallel.h"
#include "tensor/shape.h"

namespace mt::cpu {

// One tensor in the loop: its first element and its strides, one per dim of the loop's shape.
template <typename T>
struct Operand {
  T* data;
  const int64_t* strides;
};

// The loop after simplification: dims innermost first.
template <size_t N>
struct LoopShape {
  int ndim = 0;  // 0 means a single element
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims][N] = {};  // strides[d][t]: tensor t's stride along dim d
};

template <size_t N>
LoopShape<N> simplify_loop(const Shape& sizes, const std::array<const int64_t*, N>& strides) {
  LoopShape<N> s;
  for (int d = sizes.size() - 1; d >= 0; --d) {  // innermost to outermost
    if (sizes[d] == 1) continue;
    if (s.ndim > 0) {
      const int last = s.ndim - 1;  // the group just inside dim d
      bool mergeable = true;
      for (size_t t = 0; t < N; ++t)
        mergeable = mergeable && strides[t][d] == s.strides[last][t] * s.sizes[last];
      if (mergeable) {
        s.sizes[last] *= sizes[d];
        continue;
      }
    }
    s.sizes[s.ndim] = sizes[d];
    for (size_t t = 0; t < N; ++t) s.strides[s.ndim][t] = strides[t][d];
    ++s.ndim;
  }
  return s;
}

namespace detail {
template <typename F, typename... T, size_t... I>
inline void call_run(F& f, int64_t n, const std::array<int64_t, sizeof...(T)>& inner,
                     const std::array<char*, sizeof...(T)>& p, std::index_sequence<I...>) {
  f(n, inner, reinterpret_cast<T*>(p[I])...);
}

// The odometer over the outer dims 1..ndim-1: calls f once per innermost run of s, starting from
// the byte pointers p.
template <typename F, typename... T>
void run_loop(const LoopShape<sizeof...(T)>& s, std::array<char*, sizeof...(T)> p, F& f) {
  constexpr size_t N = sizeof...(T);
  constexpr std::array<int64_t, N> elem_size{static_cast<int64_t>(sizeof(T))...};
  std::array<int64_t, N> inner{};
  const int64_t n = s.ndim > 0 ? s.sizes[0] : 1;
  for (size_t t = 0; t < N && s.ndim > 0; ++t) inner[t] = s.strides[0][t];

  // Bump the innermost outer dim; when it wraps, rewind it and carry into the next one.
  int64_t index[kMaxDims] = {};
  for (;;) {
    call_run<F, T...>(f, n, inner, p, std::index_sequence_for<T...>{});
    int d = 1;
    for (; d < s.ndim; ++d) {
      for (size_t t = 0; t < N; ++t) p[t] += s.strides[d][t] * elem_size[t];
      if (++index[d] < s.sizes[d]) break;
      for (size_t t = 0; t < N; ++t) p[t] -= s.strides[d][t] * s.sizes[d] * elem_size[t];
      index[d] = 0;
    }
    if (d >= s.ndim) return;
  }
}

// Pointers walk in bytes so operands of different dtypes (copy with a cast) can share the loop.
template <typename... T>
std::array<char*, sizeof...(T)> byte_pointers(Operand<T>... ops) {
  return {const_cast<char*>(reinterpret_cast<const char*>(ops.data))...};
}
}  // namespace detail

// Calls f(n, inner_strides, T0* p0, T1* p1, ...) for every innermost run of the loop over `sizes`.
// Operands may be const-qualified (Operand<const float>) for inputs.
template <typename F, typename... T>
void strided_loop(const Shape& sizes, F&& f, Operand<T>... ops) {
  if (sizes.numel() == 0) return;
  const LoopShape<sizeof...(T)> s = simplify_loop<sizeof...(T)>(sizes, {ops.strides...});
  detail::run_loop<F, T...>(s, detail::byte_pointers(ops...), f);
}

// strided_loop split across the intra-op threads (tensor/parallel.h) along the simplified loop's
// outermost dim, in chunks of about `grain` elements (a single run is cut into pieces of `grain`).
// The chunks depend on the shapes and grain only (Note [Fixed chunks]). f must not write an
// element another run reads or writes: true of elementwise ops, whose output has no stride 0.
template <typename F, typename... T>
void parallel_strided_loop(int64_t grain, const Shape& sizes, F&& f, Operand<T>... ops) {
  constexpr size_t N = sizeof...(T);
  const int64_t numel = sizes.numel();
  if (numel == 0) return;
  const LoopShape<N> s = simplify_loop<N>(sizes, {ops.strides...});
  const std::array<char*, N> p = detail::byte_pointers(ops...);
  if (numel <= grain || s.ndim == 0) return detail::run_loop<F, T...>(s, p, f);
  constexpr std::array<int64_t, N> elem_size{static_cast<int64_t>(sizeof(T))...};
  const int top = s.ndim - 1;
  const int64_t per_index = numel / s.sizes[top];  // elements under one step of the outermost dim
  parallel_for(s.sizes[top], grain / per_index, [&](int64_t lo, int64_t hi) {
    LoopShape<N> part = s;
    part.sizes[top] = hi - lo;
    std::array<char*, N> q = p;
    for (size_t t = 0; t < N; ++t) q[t] += lo * s.strides[top][t] * elem_size[t];
    detail::run_loop<F, T...>(part, q, f);
  });
}

}  // namespace mt::cpu
