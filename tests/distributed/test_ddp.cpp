// DistributedDataParallel: two or four real ranks (Gloo over loopback, or MPI under mpirun: Note
// [Tests under mpirun] in multiprocess.h) train exactly like one process on the combined batch;
// gradient accumulation under no_sync; parameters without gradient; models that differ between
// ranks; and a world of one.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "autograd/ops.h"
#include "distributed/ddp/ddp.h"
#include "distributed/process_group/process_group_local.h"
#include "distributed/store/tcp_store.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "optim/sgd.h"
#include "tensor/generator.h"

using namespace mt;
using namespace mt::dist;
using namespace std::chrono_literals;

namespace {

// Gloo between fork()ed ranks, or MPI when the binary was started by mpirun (Note [Tests under
// mpirun] in multiprocess.h).
const bool kNoBackend = !test::group_backend_available();

std::shared_ptr<ProcessGroup> join(int rank, int world, int port) { return test::join_group(rank, world, port); }

// A 6-16-16-3 MLP, initialised from `seed`.
std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(16, 3));
}

// About 300 bytes: the MLP's six parameters (12 to 1024 bytes of gradient) fall into 4 buckets.
constexpr DDPOptions kSmallBuckets{.bucket_cap_mb = 300.0 / (1024 * 1024), .first_bucket_cap_mb = 300.0 / (1024 * 1024)};

// The combined batch: world·b examples (two ranks unless said), the same on every rank. Rank r trains
// on rows [r·b, (r+1)·b).
struct Batch {
  Tensor x, y;  // x: (world·b, 6)  y: (world·b, 3)
};
Batch make_batch(int64_t b, int64_t world = 2) {
  Generator gen(42);
  return {randn({world * b, 6}, gen), randn({world * b, 3}, gen)};
}

void check_close(const nn::Module& got, const nn::Module& want, double tol, const std::string& what) {
  const NamedTensors a = got.named_parameters(), b = want.named_parameters();
  MT_CHECK(a.size() == b.size(), what, ": parameter counts differ");
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> u = a[i].second.to_vector<float>(), v = b[i].second.to_vector<float>();
    for (size_t k = 0; k < u.size(); ++k)
      MT_CHECK(std::abs(u[k] - v[k]) <= tol, what, ": ", b[i].first, "[", k, "] is ", u[k], ", expected ", v[k]);
  }
}

// The single-process reference: rank 0's initial model (seed 1), `steps` SGD steps on the whole batch.
std::shared_ptr<nn::Sequential> reference(const Batch& batch, int steps) {
  auto model = make_mlp(1);
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    nn::F::mse_loss(model->forward(batch.x), batch.y).backward();
    opt.step();
  }
  return model;
}

}  // namespace

TEST_CASE("DDP: 2 or 4 ranks on slices of a batch train exactly like one process on the whole batch" *
          doctest::skip(kNoBackend)) {
  for (const int world : {2, 4}) {
    CAPTURE(world);
    const int port = find_free_port();
    test::run_ranks(world, [&](int rank) {
      const int64_t b = 4;
      const Batch batch = make_batch(b, world);
      auto model = make_mlp(rank + 1);  // different on each rank: DDP's broadcast must fix that
      DistributedDataParallel ddp(model, join(rank, world, port), kSmallBuckets);
      MT_CHECK(ddp.stats().bucket_bytes.size() >= 3, "expected 3+ buckets, got ", ddp.stats().bucket_bytes.size());
      MT_CHECK(ddp.stats().bucket_parameters[0][0] == "4.bias",
               "the first bucket starts with the last parameter, got ", ddp.stats().bucket_parameters[0][0]);
      optim::SGD opt(ddp.parameters(), {.lr = 0.1});
      const Tensor x = batch.x.narrow(0, rank * b, b), y = batch.y.narrow(0, rank * b, b);
      for (int step = 0; step < 3; ++step) {
        ddp.zero_grad();
        nn::F::mse_loss(ddp.forward(x), y).backward();
        opt.step();
      }
      check_close(*model, *reference(batch, 3), 1e-5, "rank " + std::to_string(rank));
      const int64_t buckets = static_cast<int64_t>(ddp.stats().bucket_bytes.size());
      MT_CHECK(ddp.stats().allreduces == 3 * buckets, "one all-reduce per bucket per step, got ",
               ddp.stats().allreduces);
    });
  }
}

// Note [Gradients are bucket views]: opt.zero_grad() forgets .grad; the next backward writes into
// the bucket again (the gradient destination), so the usual loop is right and copies nothing.
TEST_CASE("DDP: with opt.zero_grad() (set_to_none) .grad is the bucket view after backward, and training "
          "matches one process" * doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    const Batch batch = make_batch(4);
    auto model = make_mlp(rank + 1);
    DistributedDataParallel ddp(model, join(rank, 2, port), kSmallBuckets);
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    const Tensor x = batch.x.narrow(0, rank * 4, 4), y = batch.y.narrow(0, rank * 4, 4);
    const NamedTensors params = model->named_parameters();  // 0.weight, 0.bias, 2.weight, 2.bias, 4.weight, 4.bias
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      for (const auto& [name, p] : params) MT_CHECK(!p.grad().defined(), name, ": zero_grad must forget .grad");
      nn::F::mse_loss(ddp.forward(x), y).backward();
      // Bucket 0 holds 4.bias (3 floats), then 4.weight, then 2.bias: their .grad are its slices.
      const Tensor b4 = params[5].second.grad(), w4 = params[4].second.grad(), b2 = params[3].second.grad();
      MT_CHECK(b4.storage() == w4.storage() && w4.storage() == b2.storage(), "bucket 0's .grad share no buffer");
      MT_CHECK(static_cast<const float*>(w4.raw_data()) == static_cast<const float*>(b4.raw_data()) + 3 &&
                   static_cast<const float*>(b2.raw_data()) == static_cast<const float*>(w4.raw_data()) + 48,
               "bucket 0's .grad are not its consecutive slices");
      opt.step();
    }
    check_close(*model, *reference(batch, 3), 1e-5, "rank " + std::to_string(rank));
  });
}

TEST_CASE("DDP: no_sync accumulates micro-batches locally and the next backward reduces the sum" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    const int64_t b = 4, half = b / 2;
    const Batch batch = make_batch(b);
    auto model = make_mlp(rank + 1);
    DistributedDataParallel ddp(model, join(rank, 2, port), kSmallBuckets);
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();  // set_to_none: the next backward writes into the buckets again
      // The mean over this rank's b examples = half the mean over each micro-batch of b/2, summed.
      {
        auto guard = ddp.no_sync();
        const int64_t before = ddp.stats().allreduces;
        const Tensor x = batch.x.narrow(0, rank * b, half), y = batch.y.narrow(0, rank * b, half);
        (nn::F::mse_loss(ddp.forward(x), y) * 0.5).backward();
        MT_CHECK(ddp.stats().allreduces == before, "no_sync must not communicate");
      }
      const Tensor x = batch.x.narrow(0, rank * b + half, half), y = batch.y.narrow(0, rank * b + half, half);
      (nn::F::mse_loss(ddp.forward(x), y) * 0.5).backward();
      opt.step();
    }
    check_close(*model, *reference(batch, 2), 1e-5, "rank " + std::to_string(rank));
  });
}

namespace {

// A Linear plus a parameter that forward never uses.
struct WithUnused : nn::Module {
  WithUnused() {
    manual_seed(7);
    fc = register_module("fc", std::make_shared<nn::Linear>(6, 3));
    unused = register_parameter("unused", ones({5}));
  }
  // With use_unused, 'unused' takes part after all: y = fc(x) + 0.1·sum(unused).
  Tensor forward(const Tensor& x) override { return use_unused ? fc->forward(x) + unused.sum() * 0.1 : fc->forward(x); }
  std::shared_ptr<nn::Linear> fc;
  Tensor unused;
  bool use_unused = false;
};

}  // namespace

TEST_CASE("DDP: a parameter without gradient is an error naming it, unless find_unused_parameters" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    const Batch batch = make_batch(2);
    const Tensor x = batch.x.narrow(0, rank * 2, 2), y = batch.y.narrow(0, rank * 2, 2);
    auto pg = join(rank, 2, port);

    auto strict_model = std::make_shared<WithUnused>();
    DistributedDataParallel strict(strict_model, pg);
    std::string message;
    try {
      nn::F::mse_loss(strict.forward(x), y).backward();
    } catch (const Error& e) {
      message = e.what();
    }
    MT_CHECK(message.find("'unused' received no gradient") != std::string::npos &&
                 message.find("find_unused_parameters") != std::string::npos,
             "expected an error naming 'unused', got: ", message);

    // Allowed: fc's gradients are averaged as usual, and 'unused' gets a zero gradient.
    auto model = std::make_shared<WithUnused>();
    DistributedDataParallel ddp(model, pg, {.find_unused_parameters = true});
    for (int step = 0; step < 2; ++step) {  // twice: the counters must reset after finalize
      ddp.zero_grad();
      nn::F::mse_loss(ddp.forward(x), y).backward();
    }
    auto single = std::make_shared<WithUnused>();
    nn::F::mse_loss(single->forward(batch.x), batch.y).backward();
    const std::vector<float> got = model->fc->weight.grad().to_vector<float>();
    const std::vector<float> want = single->fc->weight.grad().to_vector<float>();
    for (size_t k = 0; k < got.size(); ++k)
      MT_CHECK(std::abs(got[k] - want[k]) <= 1e-5, "fc.weight grad [", k, "] is ", got[k], ", expected ", want[k]);
    for (float g : model->unused.grad().to_vector<float>()) MT_CHECK(g == 0.0f, "unused grad should be 0");
  });
}

// Note [Unused parameters]: an unused parameter's slot is reduced with what its .grad holds, which
// is what .grad would hold without DDP.
TEST_CASE("DDP: an unused parameter's gradient is what one process would have: zero after zero_grad, its "
          "no_sync sum, or left as it was" * doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    const Batch batch = make_batch(4);
    const auto mine = [&](int64_t from, int64_t n) {
      return std::pair{batch.x.narrow(0, rank * 4 + from, n), batch.y.narrow(0, rank * 4 + from, n)};
    };
    auto model = std::make_shared<WithUnused>();
    DistributedDataParallel ddp(model, join(rank, 2, port), {.find_unused_parameters = true});
    auto single = std::make_shared<WithUnused>();
    const auto check_unused = [&](const std::string& when) {
      const std::vector<float> got = model->unused.grad().to_vector<float>();
      const std::vector<float> want = single->unused.grad().to_vector<float>();
      for (size_t k = 0; k < got.size(); ++k)
        MT_CHECK(std::abs(got[k] - want[k]) <= 1e-6, when, ": unused grad [", k, "] is ", got[k], ", expected ",
                 want[k]);
    };

    // 1. set_to_none, then a backward without it: zero (the dropped .grad becomes a zero slot).
    model->zero_grad();  // set_to_none
    auto [x, y] = mine(0, 4);
    nn::F::mse_loss(ddp.forward(x), y).backward();
    for (float g : model->unused.grad().to_vector<float>()) MT_CHECK(g == 0.0f, "after set_to_none: not 0");

    // 2. Used in the no_sync micro-batch, unused in the synced one: the average of the local sums.
    ddp.zero_grad();
    single->zero_grad(false);
    model->use_unused = single->use_unused = true;
    {
      auto guard = ddp.no_sync();
      auto [x0, y0] = mine(0, 2);
      (nn::F::mse_loss(ddp.forward(x0), y0) * 0.5).backward();
    }
    (nn::F::mse_loss(single->forward(batch.x.narrow(0, 0, 2)), batch.y.narrow(0, 0, 2)) * 0.25).backward();
    (nn::F::mse_loss(single->forward(batch.x.narrow(0, 4, 2)), batch.y.narrow(0, 4, 2)) * 0.25).backward();
    model->use_unused = single->use_unused = false;
    auto [x1, y1] = mine(2, 2);
    (nn::F::mse_loss(ddp.forward(x1), y1) * 0.5).backward();
    check_unused("used under no_sync only");

    // 3. Not zeroed, unused again: it stays last step's average, as one process's .grad would.
    nn::F::mse_loss(ddp.forward(x), y).backward();
    check_unused("not zeroed");
  });
}

// Note [No gradient, no step]: a backward that reaches no parameter fires no hook, so DDP does not
// take part in it: nothing is communicated and it is not counted as a step.
TEST_CASE("DDP: a backward in which no parameter gets a gradient communicates nothing, and training goes on" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    const Batch batch = make_batch(4);
    auto model = make_mlp(1);
    DistributedDataParallel ddp(model, join(rank, 2, port), kSmallBuckets);
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    const Tensor x = batch.x.narrow(0, rank * 4, 4), y = batch.y.narrow(0, rank * 4, 4);
    for (int step = 0; step < 2; ++step) {
      ddp.zero_grad();
      Tensor input = x.detach();
      input.requires_grad_();
      (input * input).sum().backward();  // reaches no parameter
      MT_CHECK(ddp.stats().allreduces == step * 4 && ddp.stats().backwards == step,
               "a parameter-free backward must not communicate: ", ddp.stats().allreduces, " all-reduces");
      nn::F::mse_loss(ddp.forward(x), y).backward();
      opt.step();
    }
    check_close(*model, *reference(batch, 2), 1e-5, "rank " + std::to_string(rank));
  });
}

TEST_CASE("DDP: models that differ between ranks are a clear error at construction, not a hang" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, rank == 0 ? 16 : 8));
    std::string message;
    try {
      DistributedDataParallel ddp(model, join(rank, 2, port));
    } catch (const Error& e) {
      message = e.what();
    }
    MT_CHECK(message.find("models differ at parameter #0") != std::string::npos &&
                 message.find("rank 0 has 0.weight [16, 6]") != std::string::npos &&
                 message.find("rank 1 has 0.weight [8, 6]") != std::string::npos,
             "expected an error naming 0.weight on ranks 0 and 1, got: ", message);
  });
}

namespace {

// y = a(x) + b(2x), computing a first or b first. The engine runs the branch computed last first, so
// the two ranks' hooks fire in different orders, while the function (and its gradient) is the same.
// (b gets 2x so that a's and b's gradients differ: swapped buckets must show.)
struct TwoBranches : nn::Module {
  explicit TwoBranches(bool a_first) : a_first(a_first) {
    manual_seed(3);
    a = register_module("a", std::make_shared<nn::Linear>(6, 3));
    b = register_module("b", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override {
    if (a_first) {
      const Tensor ya = a->forward(x);
      return ya + b->forward(x * 2.0);
    }
    const Tensor yb = b->forward(x * 2.0);
    return a->forward(x) + yb;
  }
  bool a_first;
  std::shared_ptr<nn::Linear> a, b;
};

}  // namespace

TEST_CASE("DDP: buckets are reduced in index order even when the ranks' gradients arrive in different orders" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    const Batch batch = make_batch(2);
    const Tensor x = batch.x.narrow(0, rank * 2, 2), y = batch.y.narrow(0, rank * 2, 2);
    auto model = std::make_shared<TwoBranches>(/*a_first=*/rank == 0);
    // 84 bytes per branch, a cap of 90: bucket 0 = b's parameters, bucket 1 = a's, equal sizes. Were
    // they launched as they became ready, the ranks would sum a's bucket with b's without noticing.
    const double cap = 90.0 / (1024 * 1024);
    DistributedDataParallel ddp(model, join(rank, 2, port), {.bucket_cap_mb = cap, .first_bucket_cap_mb = cap});
    MT_CHECK(ddp.stats().bucket_bytes == (std::vector<int64_t>{84, 84}), "expected 2 buckets of 84 bytes");
    nn::F::mse_loss(ddp.forward(x), y).backward();
    auto single = std::make_shared<TwoBranches>(true);
    nn::F::mse_loss(single->forward(batch.x), batch.y).backward();
    const NamedTensors got = model->named_parameters(), want = single->named_parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      const std::vector<float> u = got[i].second.grad().to_vector<float>(), v = want[i].second.grad().to_vector<float>();
      for (size_t k = 0; k < u.size(); ++k)
        MT_CHECK(std::abs(u[k] - v[k]) <= 1e-5, got[i].first, " grad [", k, "] is ", u[k], ", expected ", v[k]);
    }
  });
}

TEST_CASE("DDP: a world of one (ProcessGroupLocal) trains like the plain model") {
  const Batch batch = make_batch(4);
  auto model = make_mlp(1);
  DistributedDataParallel ddp(model, std::make_shared<ProcessGroupLocal>(), kSmallBuckets);
  optim::SGD opt(ddp.parameters(), {.lr = 0.1});
  for (int step = 0; step < 3; ++step) {
    ddp.zero_grad();
    nn::F::mse_loss(ddp.forward(batch.x), batch.y).backward();
    opt.step();
  }
  check_close(*model, *reference(batch, 3), 0.0, "world of one");
  CHECK(ddp.stats().backwards == 3);
}

TEST_CASE("DDP: parameters held in ModuleList and ModuleDict are bucketed by their names, and the model's "
          "forward hooks run") {
  struct Model : nn::Module {
    Model() {
      blocks = register_module("blocks", std::make_shared<nn::ModuleList>(std::make_shared<nn::Linear>(6, 6)));
      heads = register_module("heads", std::make_shared<nn::ModuleDict>(
                                           nn::NamedModules{{"out", std::make_shared<nn::Linear>(6, 3)}}));
    }
    Tensor forward(const Tensor& x) override { return (*(*heads)["out"])((*(*blocks)[0])(x).relu()); }
    std::shared_ptr<nn::ModuleList> blocks;
    std::shared_ptr<nn::ModuleDict> heads;
  };
  manual_seed(1);
  auto model = std::make_shared<Model>();
  int forwards = 0;
  model->register_forward_hook([&](nn::Module&, const Tensor&, const Tensor&) {
    ++forwards;
    return std::nullopt;
  });
  DistributedDataParallel ddp(model, std::make_shared<ProcessGroupLocal>(), kSmallBuckets);
  std::vector<std::string> bucketed;
  for (const auto& bucket : ddp.stats().bucket_parameters) bucketed.insert(bucketed.end(), bucket.begin(), bucket.end());
  std::sort(bucketed.begin(), bucketed.end());
  CHECK(bucketed == std::vector<std::string>{"blocks.0.bias", "blocks.0.weight", "heads.out.bias", "heads.out.weight"});
  const Batch batch = make_batch(4);
  nn::F::mse_loss(ddp.forward(batch.x), batch.y).backward();  // an unreduced parameter would be an error
  CHECK(forwards == 1);
  CHECK(ddp.stats().backwards == 1);
}
