// The random number generator: Philox-4x32-10 against the published known-answer vectors, the
// Generator's (seed, offset) state, and the exact element layout of uniform/normal fills that the
// CUDA backend must reproduce (Note [Random stream layout] in tensor/cpu/cpu_random.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "tensor/detail/philox.h"
#include "tensor/generator.h"
#include "tensor/raw_ops.h"
#include "tensor/tensor.h"

using namespace mt;

TEST_CASE("Philox-4x32-10 matches the Random123 known-answer vectors") {
  // From Random123's tests/kat_vectors: counter (4 words), key (2 words) -> output (4 words).
  using detail::philox4x32_10;
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
        detail::PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        detail::PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        detail::PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("Generator::philox splits seed and counter into the key and counter words") {
  CHECK(Generator::philox(0, 0) == std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  const uint64_t seed = 0x299f31d0a4093822, counter = 0x85a308d3243f6a88;
  CHECK(Generator::philox(seed, counter) == detail::philox4x32_10({0x243f6a88, 0x85a308d3, 0, 0},
                                                                  {0xa4093822, 0x299f31d0}));
}

TEST_CASE("a generator's state is (seed, offset) and restoring it repeats the stream") {
  Generator gen(42);
  const uint64_t first = gen.next_u64();
  const double second = gen.next_double();
  CHECK(gen.offset() == 2);
  CHECK(second >= 0.0);
  CHECK(second < 1.0);
  const auto w = Generator::philox(42, 0);
  CHECK(first == ((static_cast<uint64_t>(w[1]) << 32) | w[0]));

  gen.set_state(42, 0);
  CHECK(gen.next_u64() == first);
  CHECK(gen.next_double() == second);

  manual_seed(7);
  const uint64_t a = default_generator().next_u64();
  manual_seed(7);
  CHECK(default_generator().next_u64() == a);
  CHECK(Generator(8).next_u64() != a);
}

TEST_CASE("uniform fills follow the documented stream layout") {
  Generator gen(123);
  gen.set_state(123, 5);
  Tensor f = empty({6});  // float32: 4 per block -> 2 blocks (counters 5, 6), 2 words dropped
  raw::uniform_(f, gen, -1.0, 3.0);
  CHECK(gen.offset() == 7);
  const std::vector<float> v = f.to_vector<float>();
  for (int i = 0; i < 6; ++i) {
    const auto w = Generator::philox(123, 5 + i / 4);
    const float expected = static_cast<float>(std::fma(4.0, uniform_float(w[i % 4]), -1.0));
    CHECK(v[i] == std::min(expected, std::nextafter(3.0f, -1.0f)));
  }

  Tensor d = empty({3}, {.dtype = kFloat64});  // float64: 2 per block -> 2 blocks
  raw::uniform_(d, gen, 0.0, 1.0);
  CHECK(gen.offset() == 9);
  const std::vector<double> dv = d.to_vector<double>();
  for (int i = 0; i < 3; ++i) {
    const auto w = Generator::philox(123, 7 + i / 2);
    CHECK(dv[i] == uniform_double(w[2 * (i % 2)], w[2 * (i % 2) + 1]));
  }
}

TEST_CASE("normal fills are Box-Muller on the documented words") {
  Generator gen(9);
  Tensor f = empty({5});
  raw::normal_(f, gen, 1.0, 2.0);
  CHECK(gen.offset() == 2);
  const std::vector<float> v = f.to_vector<float>();
  for (int i = 0; i < 5; ++i) {
    const auto w = Generator::philox(9, i / 4);
    const int p = (i % 4) / 2;
    const double u1 = 1.0 - uniform_float(w[2 * p]), u2 = uniform_float(w[2 * p + 1]);
    const double r = std::sqrt(-2.0 * std::log(u1)), t = 2.0 * std::numbers::pi * u2;
    CHECK(v[i] == static_cast<float>(std::fma(2.0, r * (i % 2 == 0 ? std::cos(t) : std::sin(t)), 1.0)));
  }

  Tensor d = empty({2}, {.dtype = kFloat64});
  raw::normal_(d, gen, 0.0, 1.0);
  const auto w = Generator::philox(9, 2);
  const double u1 = 1.0 - uniform_double(w[0], w[1]), u2 = uniform_double(w[2], w[3]);
  const double r = std::sqrt(-2.0 * std::log(u1)), t = 2.0 * std::numbers::pi * u2;
  CHECK(d.to_vector<double>() == std::vector<double>{r * std::cos(t), r * std::sin(t)});
}

TEST_CASE("uniform never returns high, even when low + (high - low) * u rounds up to it") {
  // The largest u, 1 - 2^-24, gives 2 + 3u = 5 - 1.8e-7, which rounds to 5.0f in float32. Block
  // 8418514 of seed 1 starts with such a word (found by scanning the counters).
  const uint64_t counter = 8418514;
  REQUIRE(static_cast<float>(std::fma(3.0, uniform_float(Generator::philox(1, counter)[0]), 2.0)) == 5.0f);
  Generator gen(1);
  gen.set_state(1, counter);
  Tensor u = empty({1});
  raw::uniform_(u, gen, 2.0, 5.0);
  CHECK(u.item() < 5.0);
  CHECK(u.item() == std::nextafter(5.0f, 0.0f));
}

TEST_CASE("the stream does not depend on how it is split into fills") {
  // Whole blocks are a pure function of the counter: one fill of 8 floats equals two fills of 4.
  Generator one(5), two(5);
  Tensor all = empty({8}), first = empty({4}), second = empty({4});
  raw::normal_(all, one);
  raw::normal_(first, two);
  raw::normal_(second, two);
  std::vector<float> joined = first.to_vector<float>();
  for (float x : second.to_vector<float>()) joined.push_back(x);
  CHECK(all.to_vector<float>() == joined);
}

TEST_CASE("random fills have the right distribution") {
  Generator gen(2024);
  const int n = 200000;
  Tensor u = empty({n});
  raw::uniform_(u, gen, 2.0, 5.0);
  Tensor z = empty({n}, {.dtype = kFloat64});
  raw::normal_(z, gen, -1.0, 3.0);
  double su = 0, sz = 0, sz2 = 0;
  int outside = 0, not_finite = 0;
  for (float x : u.to_vector<float>()) {
    outside += x < 2.0f || x >= 5.0f;
    su += x;
  }
  for (double x : z.to_vector<double>()) {
    not_finite += !std::isfinite(x);
    sz += x;
    sz2 += x * x;
  }
  CHECK(outside == 0);
  CHECK(not_finite == 0);
  const double mean_z = sz / n, var_z = sz2 / n - mean_z * mean_z;
  CHECK(su / n == doctest::Approx(3.5).epsilon(0.01));
  CHECK(mean_z == doctest::Approx(-1.0).epsilon(0.03));
  CHECK(std::sqrt(var_z) == doctest::Approx(3.0).epsilon(0.01));
}

TEST_CASE("factories without a generator draw from the default one, which manual_seed reseeds") {
  manual_seed(123);
  const Tensor a = randn({5}), b = rand({2, 3}, {.dtype = kFloat64}), c = randint(-3, 4, {1000});
  manual_seed(123);
  CHECK(randn({5}).to_vector<float>() == a.to_vector<float>());
  CHECK(rand({2, 3}, {.dtype = kFloat64}).to_vector<double>() == b.to_vector<double>());
  CHECK(randint(-3, 4, {1000}).to_vector<int64_t>() == c.to_vector<int64_t>());
  // The same numbers as an explicit Generator(123) making the same draws in the same order.
  Generator gen(123);
  CHECK(randn({5}, gen).to_vector<float>() == a.to_vector<float>());
  CHECK(rand({2, 3}, gen, {.dtype = kFloat64}).to_vector<double>() == b.to_vector<double>());
  CHECK(randint(-3, 4, {1000}, gen).to_vector<int64_t>() == c.to_vector<int64_t>());
  // Later draws continue the stream rather than repeating it.
  CHECK(randn({5}).to_vector<float>() != a.to_vector<float>());
  // randint covers [low, high) and nothing else.
  const std::vector<int64_t> v = c.to_vector<int64_t>();
  CHECK(c.dtype() == kInt64);
  CHECK(*std::min_element(v.begin(), v.end()) == -3);
  CHECK(*std::max_element(v.begin(), v.end()) == 3);
  CHECK(randint(0, 2, {3}, {.dtype = kFloat32}).dtype() == kFloat32);
  const int64_t lowest = std::numeric_limits<int64_t>::min(), highest = std::numeric_limits<int64_t>::max();
  CHECK(randint(lowest, highest, {4}).numel() == 4);  // a range of 2^64 - 1 does not overflow
  CHECK_THROWS_WITH_AS(randint(4, 4, {2}), doctest::Contains("randint: low (4) must be below high (4)"), Error);
}
