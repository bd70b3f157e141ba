// clip_grad_norm_ against torch.nn.utils.clip_grad_norm_: the returned norm for several p, the
// clipped gradients, and no change when the norm is already small enough.
#include <doctest/doctest.h>

#include <cmath>

#include "optim_test_util.h"

using namespace mt;
using namespace mt::optim;
using namespace mt::optim::test;

namespace {

// Two parameters with gradients a = [[3, -4], [1, 0.5]] and b = [-2, 0, 1.5] (float64), plus one
// without a gradient, which clipping must skip. With `strided`, a's gradient is a transposed view,
// which takes the tensor-op path.
struct Params {
  Tensor a = make_param({0, 0, 0, 0}, {2, 2}, kFloat64, Layout::Contiguous);
  Tensor b = make_param({0, 0, 0}, {3}, kFloat64, Layout::Contiguous);
  Tensor none = make_param({0}, {1}, kFloat64, Layout::Contiguous);

  explicit Params(bool strided = false) {
    const Tensor ga = strided ? from_vector(std::vector<double>{3, 1, -4, 0.5}, {2, 2}).t()
                              : from_vector(std::vector<double>{3, -4, 1, 0.5}, {2, 2});
    a.set_grad(ga);
    b.set_grad(from_vector(std::vector<double>{-2, 0, 1.5}, {3}));
  }
  std::vector<Tensor> all() const { return {a, b, none}; }
  std::vector<double> grads() const {
    std::vector<double> out = a.grad().to_vector<double>();
    for (double x : b.grad().to_vector<double>()) out.push_back(x);
    return out;
  }
};

}  // namespace

TEST_CASE("clip_grad_norm_ returns the joint norm and scales the gradients by max_norm / (norm + 1e-6)") {
  // ‖(3, -4, 1, 0.5, -2, 0, 1.5)‖₂ = √(9 + 16 + 1 + 0.25 + 4 + 2.25) = √32.5 = 5.70087712549569;
  // clipping to 1 multiplies every gradient by 1 / (5.70087712549569 + 1e-6).
  // The clipped values are torch.nn.utils.clip_grad_norm_'s (1.13, float64; torch_reference.py).
  for (bool strided : {false, true}) {
    INFO("strided gradient: ", strided);
    Params ps(strided);
    CHECK(clip_grad_norm_(ps.all(), 1.0) == doctest::Approx(5.70087712549569).epsilon(1e-14));
    check_close({ps.grads()},
                {{0.5262347192765414, -0.7016462923687219, 0.17541157309218047, 0.08770578654609024,
                  -0.35082314618436095, 0.0, 0.2631173596382707}},
                1e-14);
    CHECK(!ps.none.grad().defined());
  }
}

TEST_CASE("clip_grad_norm_ with other norms") {
  SUBCASE("1-norm: Σ|g| = 12") {
    Params ps;
    CHECK(clip_grad_norm_(ps.all(), 1.0, 1.0) == 12.0);
    CHECK(ps.grads()[1] == doctest::Approx(-0.3333333055555579).epsilon(1e-14));  // -4 / (12 + 1e-6)
  }
  SUBCASE("3-norm below max_norm: the gradients are left alone") {
    Params ps;
    // (27 + 64 + 1 + 0.125 + 8 + 0 + 3.375)^(1/3) = 103.5^(1/3) = 4.695120936501775
    CHECK(clip_grad_norm_(ps.all(), 100.0, 3.0) == doctest::Approx(4.695120936501775).epsilon(1e-14));
    CHECK(ps.grads() == std::vector<double>{3, -4, 1, 0.5, -2, 0, 1.5});
  }
  SUBCASE("infinity norm: the largest |g| = 4") {
    for (bool strided : {false, true}) {
      Params ps(strided);
      CHECK(clip_grad_norm_(ps.all(), 0.5, kInfNorm) == 4.0);
      CHECK(ps.grads()[1] == doctest::Approx(-0.49999987500003124).epsilon(1e-14));  // -4 · 0.5 / (4 + 1e-6)
    }
  }
}

TEST_CASE("clip_grad_norm_ edge cases") {
  Tensor p = make_param({1}, {1}, kFloat32, Layout::Contiguous);
  CHECK(clip_grad_norm_({p}, 1.0) == 0.0);  // no gradients at all: norm 0, like PyTorch
  p.set_grad(full({1}, NAN));
  CHECK(std::isnan(clip_grad_norm_({p}, 1.0)));
  CHECK(std::isnan(p.grad().item()));  // scaled by a NaN coefficient, as PyTorch does
  CHECK_THROWS_WITH_AS(clip_grad_norm_({p}, 1.0, 0.0), doctest::Contains("norm_type must be > 0"), Error);
  CHECK_THROWS_WITH_AS(clip_grad_norm_({p}, -1.0), doctest::Contains("max_norm must be >= 0, got -1"), Error);
}

TEST_CASE("clip_grad_norm_ over a gradient of several chunks matches a long double sum at any thread count") {
  // 200,003 float32 values: three full chunks of Note [Lanes for the norm] and a ragged tail, so the
  // lanes, the chunk order and the tail are all exercised. The reference adds the exact squares one
  // by one in long double.
  constexpr int64_t kN = 200003;
  Generator gen(7);
  const Tensor values = randn({kN}, gen);
  const std::vector<float> v = values.to_vector<float>();
  long double sq = 0, abs_sum = 0;
  for (float x : v) sq += static_cast<long double>(x) * x, abs_sum += std::fabs(static_cast<long double>(x));
  const auto norm_at = [&](int threads, double p) {
    NumThreadsGuard guard(threads);
    Tensor w = zeros({kN}).requires_grad_();
    w.set_grad(values.clone());
    return clip_grad_norm_({w}, 1e30, p);  // max_norm above the norm: measured, not scaled
  };
  for (int threads : {1, 2}) {
    INFO(threads, " thread(s)");
    CHECK(norm_at(threads, 2.0) == doctest::Approx(static_cast<double>(std::sqrt(sq))).epsilon(1e-13));
    CHECK(norm_at(threads, 1.0) == doctest::Approx(static_cast<double>(abs_sum)).epsilon(1e-13));
  }
  CHECK(norm_at(1, 2.0) == norm_at(2, 2.0));  // the same bits: fixed chunks, summed in order
  // The infinity norm keeps a NaN wherever it sits, as torch.max does.
  Tensor g = values.clone();
  g.data_ptr<float>()[150001] = NAN;
  Tensor w = zeros({kN}).requires_grad_();
  w.set_grad(g);
  CHECK(std::isnan(clip_grad_norm_({w}, 1.0, kInfNorm)));
}
