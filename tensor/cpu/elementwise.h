// map_unary / map_binary: out[i] = f(in[i]) and out[i] = f(a[i], b[i]) over same-shaped tensors,
// the loops behind copy, unary and binary ops. The functor is a lambda, so each op gets its own
// instantiated loop and the compiler sees the operation inside it: there is no per-element switch
// or function pointer, and the contiguous loops vectorise at -O3 -march=native.
//
// Fast paths, cheapest first (they matter most for the tiny tensors of the seed model, where the
// loop itself is a few nanoseconds and anything per-element-generic would dominate):
//   1. every operand contiguous          -> one plain indexed loop
//   2. one input a broadcast scalar      -> the scalar is loaded once, the rest is case 1
//   3. anything else                     -> strided_loop, with cases 1 and 2 again per inner run
// Outputs may alias an input with the same layout (in-place ops): every loop reads element i
// before it writes element i.
// Each path is split across the intra-op threads in fixed chunks of `grain` elements
// (Note [Fixed chunks], tensor/parallel.h); tensors up to `grain` elements run in one plain call.
//
// Note [Loop pointers in locals]: the fast loops copy their captured pointers and scalar into
// locals before looping. In parallel_for's one-call path (n <= grain) the lambda is inlined and its
// captures live in a closure whose address escapes (to the pool path beside it), and GCC 12 then
// re-read `o` from the closure after every store and left some loops scalar: the comparison
// x > 0 of ReLU's backward on (128, 256) floats took 36 µs instead of 3 µs (bench/ mlp_step).
// With locals nothing can alias them and every path vectorises.
#pragma once

#include "tensor/cpu/cpu_backend.h"

namespace mt::cpu {

template <typename TO, typename TI, typename F>
void map_unary(const Tensor& out, const Tensor& in, F f, int64_t grain = kGrainElementwise) {
  TO* o = data<TO>(out);
  const TI* x = data<const TI>(in);
  if (is_contiguous(out) && is_contiguous(in)) {
    parallel_for(out.numel(), grain, [=](int64_t lo, int64_t hi) {
      TO* const dst = o;  // Note [Loop pointers in locals]
      const TI* const src = x;
      for (int64_t i = lo; i < hi; ++i) dst[i] = f(src[i]);
    });
    return;
  }
  parallel_strided_loop(
      grain, out.sizes(),
      [&](int64_t n, const std::array<int64_t, 2>& s, TO* o, const TI* x) {
        if (s[0] == 1 && s[1] == 1) {
          for (int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
        } else {
          for (int64_t i = 0; i < n; ++i) o[i * s[0]] = f(x[i * s[1]]);
        }
      },
      Operand<TO>{o, out.strides().begin()}, Operand<const TI>{x, in.strides().begin()});
}

template <typename T, typename F>
void map_binary(const Tensor& out, const Tensor& a, const Tensor& b, F f, int64_t grain = kGrainElementwise) {
  T* o = data<T>(out);
  const T* x = data<const T>(a);
  const T* y = data<const T>(b);
  const int64_t n = out.numel();
  if (is_contiguous(out)) {
    const bool a_dense = is_contiguous(a), b_dense = is_contiguous(b);
    if (a_dense && b_dense) {
      parallel_for(n, grain, [=](int64_t lo, int64_t hi) {
        T* const dst = o;  // Note [Loop pointers in locals]
        const T *const src_a = x, *const src_b = y;
        for (int64_t i = lo; i < hi; ++i) dst[i] = f(src_a[i], src_b[i]);
      });
      return;
    }
    if (a_dense && is_broadcast_scalar(b)) {  // x * 2, x - mean, ...
      const T y0 = *y;
      parallel_for(n, grain, [=](int64_t lo, int64_t hi) {
        T* const dst = o;  // Note [Loop pointers in locals]
        const T* const src = x;
        const T scalar = y0;
        for (int64_t i = lo; i < hi; ++i) dst[i] = f(src[i], scalar);
      });
      return;
    }
    if (b_dense && is_broadcast_scalar(a)) {  // 1 - x, ...
      const T x0 = *x;
      parallel_for(n, grain, [=](int64_t lo, int64_t hi) {
        T* const dst = o;  // Note [Loop pointers in locals]
        const T* const src = y;
        const T scalar = x0;
        for (int64_t i = lo; i < hi; ++i) dst[i] = f(scalar, src[i]);
      });
      return;
    }
  }
  // Typical here: x (B, C) + bias (C) -> runs of C with strides (1, 1, 1), and
  // x (B, C) * scale (B, 1) -> runs of C with strides (1, 1, 0).
  parallel_strided_loop(
      grain, out.sizes(),
      [&](int64_t n, const std::array<int64_t, 3>& s, T* o, const T* x, const T* y) {
        if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
          for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
        } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {
          const T y0 = *y;
          for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y0);
        } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {
          const T x0 = *x;
          for (int64_t i = 0; i < n; ++i) o[i] = f(x0, y[i]);
        } else {
          for (int64_t i = 0; i < n; ++i) o[i * s[0]] = f(x[i * s[1]], y[i * s[2]]);
        }
      },
      Operand<T>{o, out.strides().begin()}, Operand<const T>{x, a.strides().begin()},
      Operand<const T>{y, b.strides().begin()});
}

}  // namespace mt::cpu
