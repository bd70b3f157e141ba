// fit_standardization and standardize_ (data/standardize.h): known statistics, the in-place result
// equal to the out-of-place formula used at inference, and no temporary the size of the data
// (Note [One copy of a dataset]).
#include <doctest/doctest.h>

#include <cmath>

#include "data/standardize.h"
#include "tensor/raw_ops.h"
#include "tensor/caching_allocator.h"
#include "tensor/generator.h"
#include "tensor/storage.h"

using namespace mt;

TEST_CASE("standardize: mean and population std of every element, in float64") {
  const Tensor x = raw::contiguous(raw::cast(arange(1.0, 5.0), kFloat32));  // 1 2 3 4
  const data::Standardization s = data::fit_standardization(x);
  CHECK(s.mean == 2.5);
  CHECK(s.std == doctest::Approx(std::sqrt(1.25)).epsilon(1e-15));
  // A constant input: std is floored, so the transform stays finite.
  CHECK(data::fit_standardization(full({3}, 7.0)).std == 1e-6);
  CHECK_THROWS_WITH_AS(data::fit_standardization(arange(int64_t{4})), doctest::Contains("float32 or float64"), Error);
  CHECK_THROWS_WITH_AS(data::standardize_(x, {.mean = 0, .std = 0}), doctest::Contains("std must be positive"), Error);
}

TEST_CASE("standardize: in place, to the bits of (x - mean) / std, without a copy of the data") {
  Generator gen(3);
  const Tensor x = raw::unary(UnaryOp::AddScalar, randn({64, 1024}, gen), 0.3);  // 256 KiB: a large CPU block
  const Tensor expected = raw::unary(UnaryOp::MulScalar, raw::unary(UnaryOp::AddScalar, x, -0.25), 1.0 / 1.5);
  const uint64_t large_before = cpu_cache_stats().allocations;
  const data::Standardization s = data::fit_standardization(x);
  data::standardize_(x, {.mean = 0.25, .std = 1.5});
  CHECK(cpu_cache_stats().allocations == large_before);  // no block of 128 KiB or more was asked for
  CHECK(raw::sum(raw::binary(BinaryOp::Ne, x, expected)).item() == 0);
  // By its own statistics, the data ends with mean 0 and std 1.
  CHECK(s.mean == doctest::Approx(0.3).epsilon(0.02));
  data::standardize_(x, data::fit_standardization(x));
  const data::Standardization after = data::fit_standardization(x);
  CHECK(std::abs(after.mean) < 1e-6);
  CHECK(after.std == doctest::Approx(1.0).epsilon(1e-6));
}
