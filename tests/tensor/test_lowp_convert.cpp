// bfloat16 and float16 tensors: conversion against PyTorch 1.13 bit for bit (every 16-bit pattern
// widened, tricky float32 values narrowed), creation, printing and dtype promotion.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "minitrain.h"
#include "tests/tensor/lowp_test_util.h"

using namespace mt;
using mt::test::bits16;
using mt::test::from_bits16;
using mt::test::lowp_fixtures;

namespace {

// The fixture's checksum of a widening: Σ bits(float32(h))·(2h+1) mod 2^64 over all patterns h.
uint64_t widen_checksum(DType dtype) {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  const Tensor wide = from_bits16(all, {65536}, dtype).to(kFloat32);
  const float* f = wide.data_ptr<float>();
  uint64_t sum = 0;
  for (uint32_t h = 0; h < 65536; ++h) sum += uint64_t{std::bit_cast<uint32_t>(f[h])} * (2 * uint64_t{h} + 1);
  return sum;
}

uint64_t fixture_checksum(const char* name) {
  return static_cast<uint64_t>(lowp_fixtures()(name).data_ptr<int64_t>()[0]);
}

}  // namespace

TEST_CASE("lowp: every bfloat16 and float16 bit pattern widens to float32 as PyTorch's does") {
  CHECK(widen_checksum(kBFloat16) == fixture_checksum("widen.bf16.checksum"));
  CHECK(widen_checksum(kFloat16) == fixture_checksum("widen.f16.checksum"));
  // And what the checksum covers, in words: a float16 NaN gets the quiet bit, a bfloat16 NaN keeps its bits.
  CHECK(std::bit_cast<uint32_t>(half_to_float(0x7C01)) == 0x7FC02000u);
  CHECK(std::bit_cast<uint32_t>(bfloat16_to_float(0x7F81)) == 0x7F810000u);
}

TEST_CASE("lowp: float32 narrows to bfloat16 and float16 bit for bit as PyTorch's (ties, subnormals, overflow, NaN)") {
  const Tensor x = lowp_fixtures()("narrow.x");
  for (const auto& [dtype, name] : {std::pair{kBFloat16, "narrow.bf16"}, std::pair{kFloat16, "narrow.f16"}}) {
    INFO(name);
    const std::vector<uint16_t> got = bits16(x.to(dtype)), want = bits16(lowp_fixtures()(name));
    REQUIRE(got.size() == want.size());
    const std::vector<float> in = x.to_vector<float>();
    int bad = 0;
    for (size_t i = 0; i < got.size() && bad < 5; ++i)
      if (got[i] != want[i]) {
        ++bad;
        FAIL_CHECK("float bits 0x" << std::hex << std::bit_cast<uint32_t>(in[i]) << ": minitrain 0x" << got[i]
                                   << ", PyTorch 0x" << want[i]);
      }
  }
  // A few by hand: ties go to even, 65520 overflows float16, the largest float rounds to bfloat16 infinity.
  CHECK(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);
  CHECK(float_to_bfloat16(1.0f + std::ldexp(3.0f, -8)) == 0x3F82);
  CHECK(float_to_bfloat16(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(float_to_half(65520.0f) == 0x7C00);
}

TEST_CASE("lowp: casts between every dtype pair go through float32, strided too") {
  const Tensor x = from_vector(std::vector<float>{0.1f, -2.5f, 70000.f, 3e-8f, 1.0f, 1000.1f}, {2, 3});
  for (DType dt : {kBFloat16, kFloat16}) {
    INFO(dt);
    const Tensor h = x.to(dt);
    CHECK(h.dtype() == dt);
    std::vector<float> want;
    for (float v : x.to_vector<float>()) want.push_back(dt == kBFloat16 ? float(BFloat16(v)) : float(Half(v)));
    CHECK(h.to(kFloat32).to_vector<float>() == want);
    CHECK(h.to(kFloat64).to_vector<double>() == std::vector<double>(want.begin(), want.end()));
    CHECK(h.transpose(0, 1).to(kFloat32).contiguous().to_vector<float>() ==
          std::vector<float>{want[0], want[3], want[1], want[4], want[2], want[5]});
    // To int64: truncation of the float32 value (of the finite ones: 70000 is infinity in float16).
    CHECK(h.narrow(1, 0, 2).to(kInt64).to_vector<int64_t>() == std::vector<int64_t>{0, -2, 0, 1});
  }
  // bfloat16 <-> float16 directly: through float32, rounded once on the way in.
  const Tensor bf = x.to(kBFloat16);
  CHECK(bf.to(kFloat16).to(kFloat32).to_vector<float>()[0] == float(Half(float(BFloat16(0.1f)))));
}

TEST_CASE("lowp: creation (zeros, ones, full, arange, rand, randn) in bfloat16 and float16") {
  for (DType dt : {kBFloat16, kFloat16}) {
    INFO(dt);
    CHECK(zeros({2, 3}, {.dtype = dt}).to_vector<float>() == std::vector<float>(6, 0.0f));
    CHECK(ones({4}, {.dtype = dt}).to_vector<float>() == std::vector<float>(4, 1.0f));
    const float third = dt == kBFloat16 ? float(BFloat16(1.0f / 3)) : float(Half(1.0f / 3));
    CHECK(full({3}, 1.0 / 3, {.dtype = dt}).to_vector<float>() == std::vector<float>(3, third));
    const Tensor r = arange(0.0, 1.0, 0.25, {.dtype = dt});
    CHECK(r.dtype() == dt);
    CHECK(r.to_vector<float>() == std::vector<float>{0.0f, 0.25f, 0.5f, 0.75f});
    // Random draws are the float32 draw rounded: same generator state, same numbers up to rounding.
    Generator g1(7), g2(7);
    const Tensor n16 = randn({100}, g1, {.dtype = dt}), n32 = randn({100}, g2);
    CHECK(n16.dtype() == dt);
    CHECK(bits16(n16) == bits16(n32.to(dt)));
    const Tensor u = rand({1000}, g1, {.dtype = dt});
    CHECK(u.min().item() >= 0.0);
    CHECK(u.max().item() <= 1.0);
    Tensor e = empty({5}, {.dtype = dt});
    CHECK(e.numel() == 5);
    CHECK(e.storage()->nbytes() >= 10);
  }
}

TEST_CASE("lowp: printing shows the widened values and the dtype") {
  const Tensor x = from_vector(std::vector<float>{0.1f, -2.5f, 1.0f / 3}, {3}, {.dtype = kBFloat16});
  // The widened values, printed as float32's are: 0.1 is 0.10009765625 in bfloat16, 1/3 is 0.333984375.
  CHECK(x.str() == "tensor([0.1001, -2.5, 0.334], shape=[3], dtype=bfloat16)");
  CHECK(scalar_tensor(65504.0, {.dtype = kFloat16}).str() == "tensor(6.55e+04, shape=[], dtype=float16)");
}

TEST_CASE("lowp: dtype promotion follows PyTorch") {
  const Tensor bf = ones({2}, {.dtype = kBFloat16}), hf = ones({2}, {.dtype = kFloat16});
  const Tensor f32 = ones({2}), f64 = ones({2}, {.dtype = kFloat64}), i64 = ones({2}, {.dtype = kInt64});
  CHECK((bf + f32).dtype() == kFloat32);
  CHECK((bf + hf).dtype() == kFloat32);  // neither holds the other
  CHECK((hf * f64).dtype() == kFloat64);
  CHECK((bf + i64).dtype() == kBFloat16);
  CHECK((i64 - hf).dtype() == kFloat16);
  CHECK((bf + 0.1).dtype() == kBFloat16);  // a number takes the tensor's dtype
  CHECK((hf * 3.0).dtype() == kFloat16);
  CHECK(lt(bf, bf).dtype() == kBFloat16);
  static_assert(promote(kBFloat16, kFloat16) == kFloat32 && promote(kInt64, kBFloat16) == kBFloat16);
}

TEST_CASE("lowp: an op with no 16-bit kernel yet says so in one line") {
  CHECK_THROWS_WITH_AS(nn::init::uniform_(ones({2}, {.dtype = kFloat16})),
                       doctest::Contains("uniform: no float16 kernel yet; cast with .to(kFloat32)"), Error);
  CHECK(nn::init::uniform_(ones({2})).to(kFloat16).dtype() == kFloat16);  // fill in float32, then cast
}

TEST_CASE("lowp: sort and topk order 16-bit values as their float32 values, NaN last") {
  const std::vector<float> v = {0.5f, -1.0f, NAN, 3.0f, 0.5f, -INFINITY, 2.0f, 0.25f};
  for (DType dt : {kBFloat16, kFloat16}) {
    const Tensor x = from_vector(v, {2, 4}).to(dt), wide = x.to(kFloat32);
    for (bool descending : {false, true}) {
      const auto [values, indices] = x.sort(1, descending);
      const auto [wide_values, wide_indices] = wide.sort(1, descending);
      CHECK(values.dtype() == dt);
      CHECK(indices.to_vector<int64_t>() == wide_indices.to_vector<int64_t>());
    }
    const auto [top, at] = x.topk(2, 1);
    CHECK(at.to_vector<int64_t>() == std::get<1>(wide.topk(2, 1)).to_vector<int64_t>());
  }
}
