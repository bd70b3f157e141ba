// 8-lane float32 vectors and the vectorised exp that softmax, logsumexp and the unary exp, sigmoid
// and silu kernels share (Note [Vectorised float exp]).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mt::cpu::vec {

// Note [Vectorised float exp]: libm's expf is a call per element that the compiler cannot
// vectorise, and it was most of a float32 softmax, logsumexp or sigmoid: bench/nn_ops.sh's
// cross-entropy took 4.7x libtorch's time, whose Sleef exp runs 8 or 16 lanes at once (with this:
// 1.0x). Float32 loops that need e^x therefore run in vectors of 8 lanes (GCC's vector extension, so
// no intrinsics and any x86 or Arm target), with this exp: e^x = 2ⁿ·e^r with n = floor(x/ln 2 + ½)
// and r = x - n·ln 2 (ln 2 in two parts, so r is exact), e^r by Cephes' degree-6 polynomial on
// |r| <= ln 2/2, and 2ⁿ as 2^⌊n/2⌋·2^(n-⌊n/2⌋), two factors put into exponent bits, so that every
// n from -150 to 128 stays within the normal range of each factor. Within 2 ulp of std::exp for
// normal results (tests/autograd/test_tensor_ops.cpp); subnormal results are rounded twice. Above
// 88.7228, where e^x overflows float32, it gives inf; below -104, where e^x rounds to 0, it gives 0,
// as for -inf (a masked score); NaN stays NaN. float64 loops keep std::exp: gradcheck and the 1e-9
// comparisons with PyTorch run in float64.
using F8 = float __attribute__((vector_size(32)));
using I8 = int32_t __attribute__((vector_size(32)));
constexpr int64_t kLanes = 8;

inline F8 splat(float c) { return F8{c, c, c, c, c, c, c, c}; }
inline F8 load(const float* p) {
  F8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, F8 v) { std::memcpy(p, &v, sizeof v); }
// The first `n` (< 8) elements of p, the rest `fill`.
inline F8 load_tail(const float* p, int64_t n, float fill) {
  F8 v = splat(fill);
  for (int64_t k = 0; k < n; ++k) v[k] = p[k];
  return v;
}
// The first `n` (< 8) lanes of v to p.
inline void store_tail(float* p, F8 v, int64_t n) {
  for (int64_t k = 0; k < n; ++k) p[k] = v[k];
}
inline F8 pow2_bits(I8 n) {  // 2ⁿ for n in [-126, 127]
  const I8 bits = (n + 127) << 23;
  F8 f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline F8 exp_lanes(F8 x) {
  const I8 under = x < splat(-104.0f);
  const I8 over = x > splat(88.7228394f);
  const F8 xc = (under | over) ? splat(0.0f) : x;
  F8 n = xc * splat(1.44269504088896341f) + splat(0.5f);
  const F8 truncated = __builtin_convertvector(__builtin_convertvector(n, I8), F8);
  n = truncated - (truncated > n ? splat(1.0f) : splat(0.0f));  // floor
  const F8 r = (xc - n * splat(0.693359375f)) + n * splat(2.12194440e-4f);
  F8 p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  const F8 er = p * r * r + r + splat(1.0f);
  const I8 ni = __builtin_convertvector(n, I8);  // garbage for NaN, whose er is NaN
  const I8 half = ni >> 1;
  const F8 e = er * pow2_bits(half) * pow2_bits(ni - half);
  return under ? splat(0.0f) : over ? splat(INFINITY) : e;
}

inline float lane_sum(F8 v) {
  float s = 0;
  for (int k = 0; k < kLanes; ++k) s += v[k];
  return s;
}

}  // namespace mt::cpu::vec
