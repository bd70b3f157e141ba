// Helpers of the bfloat16 / float16 tests (test_lowp_convert.cpp, test_lowp_torch.cpp): raw bits of
// a 16-bit tensor, a tensor from raw bits, and the fixture file of PyTorch's results.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
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

}  // namespace mt::test
