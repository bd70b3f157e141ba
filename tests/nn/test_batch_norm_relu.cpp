// The fused batch norm + ReLU (+ max pool) op (Note [Fused batch norm, ReLU and pool]) against its
// composition relu(batch_norm(x)) and max_pool2d of it: values, gradients and running statistics, in
// training and eval, float64 and float32, at 1 and 2 threads; float64 gradcheck; and Sequential's
// fusing of the run BatchNorm2d, ReLU, MaxPool2d (Note [Fused runs in Sequential]), which must step
// aside for hooks and synchronised statistics.
#include <doctest/doctest.h>

#include <cmath>
#include <optional>

#include "minitrain.h"
#include "nn/nn.h"
#include "tensor/raw_batch_norm.h"

using namespace mt;

namespace {

// |got - want| <= tol·(1 + |want|) elementwise.
void check_close(const Tensor& got, const Tensor& want, double tol) {
  REQUIRE(got.sizes() == want.sizes());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(g[i] - w[i]) <= tol * (1 + std::abs(w[i])));
  }
}

// x: (3, 4, 6, 6) whose channels have means far from 0 (so a dropped mean term shows), weight and
// bias of either sign (so ReLU cuts some channels more than others).
struct Inputs {
  Tensor x, w, b, dy_source;
  explicit Inputs(DType dtype, uint64_t seed = 5) {
    Generator gen(seed);
    const Tensor offset = from_vector(std::vector<double>{3, -2, 0.5, 10}, {1, 4, 1, 1});
    x = (randn({3, 4, 6, 6}, gen, {.dtype = kFloat64}) * 2.0 + offset).to(dtype).requires_grad_();
    w = from_vector(std::vector<double>{1.5, -0.7, 0.3, 2.0}, {4}).to(dtype).requires_grad_();
    b = from_vector(std::vector<double>{0.2, 0.1, -0.4, 0.0}, {4}).to(dtype).requires_grad_();
    dy_source = randn({3, 4, 6, 6}, gen, {.dtype = kFloat64}).to(dtype);
  }
};

struct Run {
  Tensor y, dx, dw, db, running_mean, running_var;
};

// One forward and backward through F::batch_norm_relu (fused) or the composition, from fresh
// running statistics (mean 0.5, var 2, so eval differs from training), training or eval.
Run run(const Inputs& in, bool fused, bool training, const std::optional<Pool2dOptions>& pool) {
  const DType dt = in.x.dtype();
  Tensor rm = full({4}, 0.5, {.dtype = dt}), rv = full({4}, 2.0, {.dtype = dt});
  for (const Tensor& p : {in.x, in.w, in.b}) p.set_grad(Tensor());
  const nn::F::BatchNormFuncOptions o{.training = training, .momentum = 0.1, .eps = 1e-5};
  Tensor y;
  if (fused) {
    REQUIRE(raw::batch_norm_relu_applies(in.x, pool));
    y = nn::F::batch_norm_relu(in.x, rm, rv, in.w, in.b, o, pool);
    CHECK(y.grad_fn()->name() == "BatchNormReluBackward");
  } else {
    y = relu(nn::F::batch_norm(in.x, rm, rv, in.w, in.b, o));
    if (pool) y = max_pool2d(y, *pool);
  }
  const Tensor dy = in.dy_source.numel() == y.numel() ? in.dy_source.view(y.sizes())
                                                      : narrow(in.dy_source.flatten(), 0, 0, y.numel()).view(y.sizes());
  y.backward(dy);
  return {y.detach(), in.x.grad(), in.w.grad(), in.b.grad(), rm, rv};
}

void check_same(const Run& a, const Run& b, double tol) {
  check_close(a.y, b.y, tol);
  check_close(a.dx, b.dx, tol);
  check_close(a.dw, b.dw, tol);
  check_close(a.db, b.db, tol);
  check_close(a.running_mean, b.running_mean, tol);
  check_close(a.running_var, b.running_var, tol);
}

const std::optional<Pool2dOptions> kPools[] = {std::nullopt, Pool2dOptions{.kernel_size = 2},
                                               Pool2dOptions{.kernel_size = 3, .stride = 2},  // overlapping windows
                                               Pool2dOptions{.kernel_size = {2, 3}, .stride = {1, 3}}};

}  // namespace

TEST_CASE("batch_norm_relu equals relu(batch_norm(x)) and its max pool: values, gradients, running statistics") {
  for (DType dt : {kFloat64, kFloat32}) {
    const double tol = dt == kFloat64 ? 1e-12 : 2e-5;
    const Inputs in(dt);
    for (const auto& pool : kPools) {
      for (bool training : {true, false}) {
        INFO(dt, " pool ", pool ? pool->kernel_size.h : 0, "x", pool ? pool->kernel_size.w : 0, " training ", training);
        check_same(run(in, true, training, pool), run(in, false, training, pool), tol);
      }
    }
  }
}

TEST_CASE("batch_norm_relu gives the same bits at 1 and 2 threads") {
  // (2, 64, 30, 30): 64 channels of 1,800 values, more than one chunk of channels.
  Generator gen(11);
  const Tensor x = (randn({2, 64, 30, 30}, gen) + 1.0).requires_grad_();
  const Tensor w = (randn({64}, gen)).requires_grad_(), b = randn({64}, gen).requires_grad_();
  const auto once = [&](int threads) {
    NumThreadsGuard guard(threads);
    for (const Tensor& p : {x, w, b}) p.set_grad(Tensor());
    const Tensor y = mt::batch_norm_relu(x, w, b, {.pool = Pool2dOptions{.kernel_size = 2}});
    y.backward(full(y.sizes(), 0.5));
    return std::vector<std::vector<float>>{y.to_vector<float>(), x.grad().to_vector<float>(),
                                           w.grad().to_vector<float>(), b.grad().to_vector<float>()};
  };
  CHECK(once(1) == once(2));
}

TEST_CASE("gradcheck: batch_norm_relu in training (batch statistics) and eval, with and without the pool") {
  Generator gen(3);
  const Tensor x = (randn({2, 3, 4, 4}, gen, {.dtype = kFloat64}) + 0.3).requires_grad_();
  const Tensor w = from_vector(std::vector<double>{1.2, -0.8, 0.5}, {3}).requires_grad_();
  const Tensor b = from_vector(std::vector<double>{0.1, 0.3, -0.2}, {3}).requires_grad_();
  const Tensor rm = from_vector(std::vector<double>{0.2, -0.1, 0.4}, {3});
  const Tensor rv = from_vector(std::vector<double>{1.5, 0.7, 2.2}, {3});
  for (const auto& pool : {std::optional<Pool2dOptions>(), std::optional<Pool2dOptions>(Pool2dOptions{.kernel_size = 2})}) {
    for (bool training : {true, false}) {
      INFO("pool ", pool.has_value(), " training ", training);
      const GradcheckResult r = gradcheck(
          [&](const std::vector<Tensor>& p) {
            BatchNormReluOptions o{.pool = pool};
            if (!training) o.running_mean = rm, o.running_var = rv;
            return mt::batch_norm_relu(p[0], p[1], p[2], o);
          },
          {x, w, b});
      CHECK_MESSAGE(r.ok, r.message);
    }
  }
}

TEST_CASE("batch_norm_relu refuses what its kernels do not take, in one line") {
  const Tensor x = ones({2, 3, 4, 4});
  CHECK_FALSE(raw::batch_norm_relu_applies(x, Pool2dOptions{.kernel_size = 2, .padding = 1}));
  CHECK_FALSE(raw::batch_norm_relu_applies(ones({2, 3, 4}), std::nullopt));
  CHECK_THROWS_WITH_AS(mt::batch_norm_relu(x, Tensor(), Tensor(), {.pool = Pool2dOptions{.kernel_size = 2, .ceil_mode = true}}),
                       doctest::Contains("batch_norm_relu: needs a float32 or float64 (N, C, H, W) input"), Error);
  CHECK_THROWS_WITH_AS(mt::batch_norm_relu(x, ones({4}), Tensor(), {}),
                       doctest::Contains("weight, bias and the running statistics must be (3)"), Error);
  CHECK_THROWS_WITH_AS(mt::batch_norm_relu(ones({1, 3, 1, 1}), Tensor(), Tensor(), {}),
                       doctest::Contains("expected more than 1 value per channel"), Error);
  // A pool the kernels do not take runs composed, through F::batch_norm_relu.
  const Pool2dOptions padded{.kernel_size = 3, .stride = 2, .padding = 1};
  const Inputs in(kFloat64);
  const Tensor fused = nn::F::batch_norm_relu(in.x, Tensor(), Tensor(), in.w, in.b, {.training = true}, padded);
  const Tensor composed =
      max_pool2d(relu(nn::F::batch_norm(in.x, Tensor(), Tensor(), in.w, in.b, {.training = true})), padded);
  check_close(fused, composed, 0.0);
  // Parameters of another dtype than x: whatever the composition does (a result or an error), so
  // does F::batch_norm_relu, because it composes too.
  const Tensor x32 = in.x.detach().to(kFloat32);
  const auto outcome = [&](bool fused_op) -> std::optional<Tensor> {
    try {
      const nn::F::BatchNormFuncOptions o{.training = true};
      if (fused_op) return nn::F::batch_norm_relu(x32, Tensor(), Tensor(), in.w, in.b, o, Pool2dOptions{.kernel_size = 2});
      return max_pool2d(relu(nn::F::batch_norm(x32, Tensor(), Tensor(), in.w, in.b, o)), Pool2dOptions{.kernel_size = 2});
    } catch (const Error&) {
      return std::nullopt;
    }
  };
  const std::optional<Tensor> mixed_fused = outcome(true), mixed_composed = outcome(false);
  REQUIRE(mixed_fused.has_value() == mixed_composed.has_value());
  if (mixed_fused) check_close(*mixed_fused, *mixed_composed, 0.0);
}

namespace {

// A conv block, the CNN preset's: conv -> BN -> ReLU -> pool, and the same modules called one by one.
struct Block {
  std::shared_ptr<nn::Conv2d> conv = std::make_shared<nn::Conv2d>(2, 4, 3, nn::Conv2dLayerOptions{.padding = 1});
  std::shared_ptr<nn::BatchNorm2d> bn = std::make_shared<nn::BatchNorm2d>(4);
  std::shared_ptr<nn::ReLU> act = std::make_shared<nn::ReLU>();
  std::shared_ptr<nn::MaxPool2d> pool = std::make_shared<nn::MaxPool2d>(2);
  nn::Sequential seq{conv, bn, act, pool};
  Tensor one_by_one(const Tensor& x) { return (*pool)((*act)((*bn)((*conv)(x)))); }
};

// A reducer for 2 "ranks" whose other rank has no values: its sum is the local tensor, so synced
// statistics equal the local ones, and it counts its calls.
class LoneReducer : public nn::BatchStatsReducer {
 public:
  Tensor sum(const Tensor& t) override {
    ++calls;
    return t;
  }
  int world_size() const override { return 2; }
  int rank() const override { return 0; }
  int calls = 0;
};

}  // namespace

TEST_CASE("Sequential runs BatchNorm2d, ReLU, MaxPool2d fused, with the results of calling them one by one") {
  manual_seed(4);
  Block fused, reference;
  reference.seq.load_state_dict(fused.seq.state_dict());
  Generator gen(8);
  const Tensor x = randn({3, 2, 8, 8}, gen);
  for (int step = 0; step < 2; ++step) {  // two training steps: the running statistics move twice
    const Tensor y = fused.seq(x), want = reference.one_by_one(x);
    CHECK(y.grad_fn()->name() == "BatchNormReluBackward");
    check_close(y, want, 2e-5);
    y.sum().backward(), want.sum().backward();
    check_close(fused.conv->weight.grad(), reference.conv->weight.grad(), 2e-5);
    check_close(fused.bn->weight.grad(), reference.bn->weight.grad(), 2e-5);
  }
  const NamedTensors got = fused.seq.state_dict(), want = reference.seq.state_dict();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(got[i].first);
    check_close(got[i].second, want[i].second, 1e-6);  // the running statistics and num_batches_tracked too
  }
  fused.seq.eval(), reference.seq.eval();
  check_close(fused.seq(x), reference.one_by_one(x), 2e-5);

  SUBCASE("a hook on the ReLU sees its input: that run is not fused") {
    int seen = 0;
    fused.act->register_forward_hook([&](nn::Module&, const Tensor& in, const Tensor&) -> std::optional<Tensor> {
      ++seen;
      CHECK(in.sizes() == Shape({3, 4, 8, 8}));
      return std::nullopt;
    });
    check_close(fused.seq(x), reference.one_by_one(x), 2e-5);
    CHECK(seen == 1);
  }
  SUBCASE("synchronised statistics are not fused: the reducer is asked") {
    auto reducer = std::make_shared<LoneReducer>();
    fused.seq.train(), reference.seq.train();
    fused.bn->stats_reducer = reducer;
    const Tensor y = fused.seq(x);
    CHECK(reducer->calls == 1);
    CHECK(y.grad_fn()->name() == "MaxPool2dBackward");
    check_close(y, reference.one_by_one(x), 2e-5);
  }
}
