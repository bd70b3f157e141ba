// CpuBackend::uniform and ::normal: fill a contiguous floating tensor from a Generator's Philox
// stream (tensor/generator.h). Only the mapping from random words to numbers lives here; the
// block function is tensor/detail/philox.h.
//
// Note [Random stream layout]
// The numbers are a pure function of (seed, offset), so the CUDA backend must reproduce them
// element by element by following exactly this mapping. A fill of n elements reserves
// blocks = ceil(n / per_block) blocks with first = gen.advance(blocks), and block b gives the four
// 32-bit words w = Generator::philox(seed, first + b). Element i lives in block b = i / per_block:
//   uniform float32  4 per block: x = fma(high - low, uniform_float(w[i % 4]), low)
//   uniform float64  2 per block: j = i % 2, x = fma(high - low, uniform_double(w[2j], w[2j+1]), low)
//                    (both then clamped to the largest value below high, see uniform())
//   normal  float32  4 per block, Box–Muller on the pairs (w[0], w[1]) and (w[2], w[3]):
//                    p = (i % 4) / 2, u1 = 1 - uniform_float(w[2p]), u2 = uniform_float(w[2p+1]),
//                    r = sqrt(-2 ln u1), t = 2π u2; x = fma(std, r * (i even ? cos t : sin t), mean)
//   normal  float64  2 per block, one Box–Muller pair: u1 = 1 - uniform_double(w[0], w[1]),
//                    u2 = uniform_double(w[2], w[3]); element i % 2 == 0 takes cos, 1 takes sin.
// u1 is in (0, 1], never 0, so the log is always finite. The unused words of a last partial block
// are dropped: the next fill starts on a fresh block, and every fill moves the offset by whole blocks.
// Arithmetic is in double, rounded once to the tensor's dtype. The final scale-and-shift is an
// explicit fma (one rounding; CUDA's fma() is the same operation), since whether a compiler fuses
// "a + b * c" on its own varies with flags and targets. So uniforms are bit-identical on any IEEE
// machine. Normals also go through log, sqrt, sin and cos, whose last bit may differ between math
// libraries: float32 normals still match except in rare rounding ties, float64 ones may differ
// in the last bit.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/detail/philox.h"
#include "tensor/generator.h"

namespace mt {
namespace {

// Calls make(words, values) once per block; make writes kPerBlock values. Full blocks are written
// in place by a loop with no branches, which the compiler vectorises across blocks; the last,
// partial block goes through a small buffer.
template <typename T, int kPerBlock, typename Make>
void fill_from_blocks(const Tensor& out, Generator& gen, Make make) {
  const int64_t n = out.numel();
  const int64_t full = n / kPerBlock;
  const int64_t blocks = (n + kPerBlock - 1) / kPerBlock;
  const uint64_t seed = gen.seed();
  const uint64_t first = gen.advance(static_cast<uint64_t>(blocks));
  T* y = cpu::data<T>(out);
  for (int64_t b = 0; b < full; ++b)
    make(detail::philox_block(seed, first + static_cast<uint64_t>(b)), y + b * kPerBlock);
  if (full < blocks) {
    T tail[kPerBlock];
    make(detail::philox_block(seed, first + static_cast<uint64_t>(full)), tail);
    std::copy(tail, tail + (n - full * kPerBlock), y + full * kPerBlock);
  }
}

// One Box–Muller pair from u1 in (0, 1] and u2 in [0, 1).
template <typename T>
void box_muller(double u1, double u2, double mean, double std, T* pair) {
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double t = 2.0 * std::numbers::pi * u2;
  pair[0] = static_cast<T>(std::fma(std, r * std::cos(t), mean));
  pair[1] = static_cast<T>(std::fma(std, r * std::sin(t), mean));
}

void check_random_target(const char* op, const Tensor& out) {
  MT_CHECK(cpu::is_contiguous(out), op, ": CPU kernel needs a contiguous tensor, got shape ", out.sizes());
}

}  // namespace

void CpuBackend::uniform(const Tensor& out, Generator& gen, double low, double high) {
  check_random_target("uniform", out);
  const double range = high - low;
  MT_DISPATCH_FLOAT(out.dtype(), "uniform", [&]<typename T>() {
    // low + range * u can round up to high itself (u = 1 - 2^-24 with low = 2, high = 5 gives 5.0f);
    // clamping to the largest T below high keeps the interval half-open.
    const T top =
        high > low ? std::nextafter(static_cast<T>(high), static_cast<T>(low)) : static_cast<T>(low);
    if constexpr (std::is_same_v<T, float>) {
      fill_from_blocks<T, 4>(out, gen, [=](const std::array<uint32_t, 4>& w, T* v) {
        for (int j = 0; j < 4; ++j)
          v[j] = std::min(static_cast<T>(std::fma(range, static_cast<double>(uniform_float(w[j])), low)), top);
      });
    } else {
      fill_from_blocks<T, 2>(out, gen, [=](const std::array<uint32_t, 4>& w, T* v) {
        for (int j = 0; j < 2; ++j)
          v[j] = std::min(std::fma(range, uniform_double(w[2 * j], w[2 * j + 1]), low), top);
      });
    }
  });
}

void CpuBackend::normal(const Tensor& out, Generator& gen, double mean, double std) {
  check_random_target("normal", out);
  MT_DISPATCH_FLOAT(out.dtype(), "normal", [&]<typename T>() {
    if constexpr (std::is_same_v<T, float>) {
      fill_from_blocks<T, 4>(out, gen, [=](const std::array<uint32_t, 4>& w, T* v) {
        for (int p = 0; p < 2; ++p)
          box_muller(1.0 - uniform_float(w[2 * p]), uniform_float(w[2 * p + 1]), mean, std, v + 2 * p);
      });
    } else {
      fill_from_blocks<T, 2>(out, gen, [=](const std::array<uint32_t, 4>& w, T* v) {
        box_muller(1.0 - uniform_double(w[0], w[1]), uniform_double(w[2], w[3]), mean, std, v);
      });
    }
  });
}

}  // namespace mt
