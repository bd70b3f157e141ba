// Views share storage and see writes through each other; reshape copies only when strides force it.
#include <doctest/doctest.h>

#include "minitrain.h"
#include "tensor/raw_ops.h"

using namespace mt;

namespace {
std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }
Tensor iota(const Shape& shape) { return arange(0.0, static_cast<double>(shape.numel()), 1.0, {}).view(shape); }
}  // namespace

TEST_CASE("views alias the storage of their base") {
  Tensor a = iota({2, 3});
  Tensor v = a.view({3, 2});
  Tensor t = a.transpose(0, 1);
  Tensor n = a.narrow(1, 1, 2);
  CHECK(v.storage() == a.storage());
  CHECK(t.storage() == a.storage());
  CHECK(n.storage() == a.storage());
  // A write through one view is seen by all.
  n.fill_(7);
  CHECK(values(a) == std::vector<float>{0, 7, 7, 3, 7, 7});
  CHECK(values(t) == std::vector<float>{0, 3, 7, 7, 7, 7});
  CHECK(values(v) == std::vector<float>{0, 7, 7, 3, 7, 7});
}

TEST_CASE("transpose and permute swap strides, contiguous() copies only when needed") {
  Tensor a = iota({2, 3, 4});
  Tensor p = a.permute({2, 0, 1});
  CHECK(p.sizes() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK_FALSE(p.is_contiguous());
  Tensor c = p.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.storage() != a.storage());
  CHECK(a.contiguous().storage() == a.storage());
  // Element (k, i, j) of p is element (i, j, k) of a.
  CHECK(values(c)[1 * 6 + 1 * 3 + 2] == values(a)[1 * 12 + 2 * 4 + 1]);
  CHECK_THROWS_WITH_AS(a.t(), doctest::Contains("at most 2 dims"), Error);
}

TEST_CASE("slice, narrow, expand, squeeze, unsqueeze, flatten") {
  Tensor a = iota({4, 5});
  CHECK(values(a.slice(1, 1, 5, 2)) == std::vector<float>{1, 3, 6, 8, 11, 13, 16, 18});
  CHECK(values(a.slice(0, -2, 100)) == values(a.narrow(0, 2, 2)));
  Tensor col = iota({3, 1});
  Tensor e = col.expand({3, 4});
  CHECK(e.strides() == Shape{1, 0});
  CHECK(values(e) == std::vector<float>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2});
  CHECK(e.expand({2, 3, 4}).strides() == Shape{0, 1, 0});
  CHECK(iota({1, 3, 1}).squeeze().sizes() == Shape{3});
  CHECK(iota({1, 3, 1}).squeeze(0).sizes() == Shape{3, 1});
  CHECK(iota({1, 3, 1}).squeeze(1).sizes() == Shape{1, 3, 1});  // not size 1: unchanged
  CHECK(iota({3}).unsqueeze(0).sizes() == Shape{1, 3});
  CHECK(iota({3}).unsqueeze(-1).sizes() == Shape{3, 1});
  CHECK(iota({2, 3, 4}).flatten(1).sizes() == Shape{2, 12});
  CHECK(iota({2, 3, 4}).flatten().sizes() == Shape{24});
}

TEST_CASE("view needs compatible strides, reshape falls back to a copy") {
  Tensor a = iota({2, 3, 4});
  Tensor t = a.transpose(0, 1);  // (3, 2, 4) with strides (4, 12, 1)
  // The last dim is still contiguous, so splitting it is a view...
  Tensor split = t.view({3, 2, 2, 2});
  CHECK(split.storage() == a.storage());
  CHECK(values(split) == values(t));
  // ...but merging dims 0 and 1 is not: their strides do not line up.
  CHECK_THROWS_WITH_AS(t.view({6, 4}), doctest::Contains("use reshape"), Error);
  Tensor r = t.reshape({6, 4});
  CHECK(r.storage() != a.storage());
  CHECK(values(r) == values(t));
  // -1 is inferred.
  CHECK(a.view({-1, 4}).sizes() == Shape{6, 4});
  CHECK_THROWS_WITH_AS(a.view({-1, 5}), doctest::Contains("invalid for 24 elements"), Error);
  CHECK_THROWS_WITH_AS(a.view({-1, -1}), doctest::Contains("only one dimension can be -1"), Error);
}

TEST_CASE("out-of-range dims and bad view arguments name the op") {
  Tensor a = iota({2, 3});
  CHECK_THROWS_WITH_AS(a.transpose(0, 2), doctest::Contains("transpose: dim 2 is out of range"), Error);
  CHECK_THROWS_WITH_AS(a.narrow(1, 2, 2), doctest::Contains("narrow: start 2 length 2 is out of range"), Error);
  CHECK_THROWS_WITH_AS(a.expand({3, 3}), doctest::Contains("expand: cannot expand [2, 3] to [3, 3]"), Error);
  CHECK_THROWS_WITH_AS(a.permute({0, 0}), doctest::Contains("permute: dim 0 appears twice"), Error);
  CHECK_THROWS_WITH_AS(a.sum({5}), doctest::Contains("sum: dim 5 is out of range"), Error);
  CHECK_THROWS_WITH_AS(a.unsqueeze(4), doctest::Contains("unsqueeze: dim 4 is out of range"), Error);
}
