// Helpers of the bfloat16 / float16 tests (test_lowp_convert.cpp, test_lowp_torch.cpp,
// tests/nn/test_lowp_nn.cpp): raw bits of a 16-bit tensor, a tensor from raw bits, the fixture file
// of PyTorch's results, its names, and the one-ulp comparison with them.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "minitrain.h"
#include "tests/nn/torch_fixtures.h"

namespace mt::test {

// The 16-bit patterns of a bfloat16 or float16 tensor, row-major.
inline std::vector<uint16_t> bits16(const Tensor& t) {
  REQUIRE(element_size(t.dtype()) == 2);
  const Tensor c = t.contiguous();
  std::vector<uint16_t> out(static_cast<size_t>(c.numel()));
  if (!out.empty()) std::memcpy(out.data(), c.raw_data(), out.size() * 2);
  return out;
}

inline Tensor from_bits16(const std::vector<uint16_t>& bits, const Shape& shape, DType dtype) {
  Tensor t = empty(shape, {.dtype = dtype});
  if (!bits.empty()) std::memcpy(t.raw_data(), bits.data(), bits.size() * 2);
  return t;
}

// PyTorch 1.13's results, written by tests/nn/make_lowp_fixtures.py.
inline const TorchFixtures& lowp_fixtures() {
  static const TorchFixtures fixtures("lowp.safetensors");
  return fixtures;
}

// The fixture files name a 16-bit dtype's tensors "bf16.<name>" and "f16.<name>".
inline std::string lowp_prefix(DType dt) { return dt == kBFloat16 ? "bf16." : "f16."; }

// got within one 16-bit ulp of PyTorch's want, plus one ulp of want's largest value (Note
// [Low-precision tolerances], test_lowp_torch.cpp). At most five elements are reported.
inline void check_within_ulp_of_torch(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(got.dtype() == want.dtype());
  const double ulp = std::ldexp(1.0, got.dtype() == kBFloat16 ? -7 : -10);  // 8 and 11 significant bits
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = 0;
  for (double v : w) scale = std::max(scale, std::abs(v));
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i)
    if (std::abs(g[i] - w[i]) > ulp * (std::abs(w[i]) + scale)) {
      ++bad;
      FAIL_CHECK("element " << i << ": minitrain " << g[i] << ", PyTorch " << w[i]);
    }
}

}  // namespace mt::test
