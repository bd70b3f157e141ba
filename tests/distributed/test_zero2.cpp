// ZeRO-2 (distributed/zero/zero.h, Note [ZeRO-2: only the shard stays]): training equals plain DDP's
// over 20 steps, with SGD momentum and AdamW, gradients clipped over the shards, at 2, 3 and 4 ranks,
// on a model with a tied weight, an unused parameter and a parameter count no world size divides;
// no_sync accumulation equals plain DDP's; and between steps each rank holds 1/N of the gradients,
// as the CPU allocator counts them. The case names start with "DDP: " so that they also run on MPI
// (tests/CMakeLists.txt; Note [Tests under mpirun] in multiprocess.h).
#include <doctest/doctest.h>

#include <cmath>

#include "distributed/ddp/ddp.h"
#include "distributed/store/tcp_store.h"
#include "distributed/zero/zero.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tensor/generator.h"

using namespace mt;
using namespace mt::dist;

namespace {

const bool kNoBackend = !test::group_backend_available();

constexpr nn::GPTOptions kTiny{.vocab = 32, .context = 8, .dim = 16, .layers = 2, .heads = 2};

// A tiny GPT (its head is its token embedding, Note [Tied embedding]) and a parameter of 5 elements
// that forward never uses, so find_unused_parameters must mark it; with it the parameter count is odd.
class TiedWithUnused : public nn::Module {
 public:
  TiedWithUnused() {
    manual_seed(3);
    gpt_ = register_module("gpt", std::make_shared<nn::GPT>(kTiny));
    Generator gen(4);
    unused_ = register_parameter("unused", randn({5}, gen));
  }
  Tensor forward(const Tensor& idx) override { return gpt_->forward(idx); }

 private:
  std::shared_ptr<nn::GPT> gpt_;
  Tensor unused_;
};

// 2 KiB buckets: the parameters spread over many buckets, shards cut through parameters, and buckets
// whose sizes no world size divides have tails (Note [ZeRO shards]).
constexpr DDPOptions kOptions{.bucket_cap_mb = 2048.0 / (1024 * 1024), .first_bucket_cap_mb = 2048.0 / (1024 * 1024),
                              .find_unused_parameters = true};

enum class Kind { SgdMomentum, AdamW };

std::unique_ptr<optim::Optimizer> make_optimizer(Kind kind, const nn::Module& model) {
  if (kind == Kind::SgdMomentum)
    return std::make_unique<optim::SGD>(model.parameters(), optim::SGDOptions{.lr = 0.2, .momentum = 0.9});
  return std::make_unique<optim::AdamW>(model.parameters(), optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
}

// Rank `rank`'s 2 rows of step `step`'s batch of token windows, the same batch on every rank.
Tensor loss_on(DistributedDataParallel& ddp, int64_t step, int rank, int world) {
  Generator gen(100 + static_cast<uint64_t>(step));
  const Tensor idx = (rand({2 * world, 8}, gen) * 31.99).to(kInt64), targets = (rand({2 * world, 8}, gen) * 31.99).to(kInt64);
  const Tensor logits = ddp.forward(idx.narrow(0, 2 * rank, 2));
  return nn::F::cross_entropy(logits.reshape({-1, kTiny.vocab}), targets.narrow(0, 2 * rank, 2).reshape({-1}));
}

// One step; `clip` > 0 clips first (over the shards under ZeRO). Returns the norm before clipping.
double train_step(DistributedDataParallel& ddp, optim::Optimizer& opt, int64_t step, int rank, int world, double clip) {
  opt.zero_grad();
  loss_on(ddp, step, rank, world).backward();
  const double norm = clip > 0 ? opt.clip_grad_norm(clip) : 0.0;
  opt.step();
  return norm;
}

void check_close(const nn::Module& got, const nn::Module& want, double tol, const std::string& what) {
  const NamedTensors a = got.named_parameters(), b = want.named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> u = a[i].second.to_vector<float>(), v = b[i].second.to_vector<float>();
    for (size_t k = 0; k < u.size(); ++k)
      MT_CHECK(std::abs(u[k] - v[k]) <= tol * (1 + std::abs(v[k])), what, ": ", b[i].first, "[", k, "] is ", u[k],
               ", expected ", v[k]);
  }
}

}  // namespace

TEST_CASE("DDP: ZeRO-2 trains like plain DDP for 20 steps, SGD momentum and AdamW clipped, tied and unused "
          "parameters, at 2, 3 and 4 ranks" * doctest::skip(kNoBackend)) {
  for (const int world : {2, 3, 4})
    for (const Kind kind : {Kind::SgdMomentum, Kind::AdamW}) {
      CAPTURE(world);
      const int port = find_free_port();
      test::run_ranks(world, [&](int rank) {
        auto pg = test::join_group(rank, world, port);
        auto plain_model = std::make_shared<TiedWithUnused>(), zero_model = std::make_shared<TiedWithUnused>();
        int64_t params = 0;
        for (const Tensor& p : zero_model->parameters()) params += p.numel();
        MT_CHECK(params % world != 0, "the model's ", params, " parameters must not divide among ", world, " ranks");
        auto plain = std::make_shared<DistributedDataParallel>(plain_model, pg, kOptions);
        auto zddp = std::make_shared<DistributedDataParallel>(zero_model, pg, kOptions);
        const auto plain_opt = make_optimizer(kind, *plain_model);
        ZeroRedundancyOptimizer zero(zddp, make_optimizer(kind, *zero_model), {.stage = 2});
        MT_CHECK(zddp->stats().comm_hook == "zero2", "the ZeRO-2 hook is registered, got ", zddp->stats().comm_hook);
        for (int64_t step = 0; step < 20; ++step) {
          const double clip = 0.1;  // below the gradient norm: the norm over the shards must be the whole one
          const double want = train_step(*plain, *plain_opt, step, rank, world, clip);
          const double got = train_step(*zddp, zero, step, rank, world, clip);
          MT_CHECK(std::abs(got - want) <= 1e-5 * want, "step ", step, ": ZeRO-2's gradient norm ", got, ", plain ", want);
          MT_CHECK(want > clip, "the test's clipping must bite: norm ", want);
          // Between steps no bucket is held: every .grad is undefined (Note [Buckets that live for
          // one backward]).
          for (const Tensor& p : zero_model->parameters())
            MT_CHECK(!p.grad().defined(), "a parameter holds a gradient after the ZeRO-2 step");
        }
        check_close(*zero_model, *plain_model, 2e-5, "rank " + std::to_string(rank) + " after 20 steps");
      }, std::chrono::seconds(120));
    }
}

TEST_CASE("DDP: ZeRO-2 accumulates no_sync micro-batches in the buckets like plain DDP" * doctest::skip(kNoBackend)) {
  for (const int world : {2, 3}) {
    CAPTURE(world);
    const int port = find_free_port();
    test::run_ranks(world, [&](int rank) {
      auto pg = test::join_group(rank, world, port);
      auto plain_model = std::make_shared<TiedWithUnused>(), zero_model = std::make_shared<TiedWithUnused>();
      auto plain = std::make_shared<DistributedDataParallel>(plain_model, pg, kOptions);
      auto zddp = std::make_shared<DistributedDataParallel>(zero_model, pg, kOptions);
      const auto plain_opt = make_optimizer(Kind::SgdMomentum, *plain_model);
      ZeroRedundancyOptimizer zero(zddp, make_optimizer(Kind::SgdMomentum, *zero_model), {.stage = 2});
      for (int64_t step = 0; step < 4; ++step) {
        const auto accumulate = [&](DistributedDataParallel& ddp, optim::Optimizer& opt) {
          opt.zero_grad();
          {
            auto guard = ddp.no_sync();
            (loss_on(ddp, 2 * step, rank, world) * 0.5).backward();  // summed in the buckets, not reduced
          }
          (loss_on(ddp, 2 * step + 1, rank, world) * 0.5).backward();  // reduces both micro-batches
          opt.step();
        };
        accumulate(*plain, *plain_opt);
        accumulate(*zddp, zero);
      }
      check_close(*zero_model, *plain_model, 2e-5, "rank " + std::to_string(rank) + " after 4 accumulated steps");
    }, std::chrono::seconds(60));
  }
}

TEST_CASE("DDP: ZeRO-2 holds 1/N of the gradients per rank between steps, as the allocator counts it, at 2 and 4 "
          "ranks" * doctest::skip(kNoBackend)) {
  for (const int world : {2, 4}) {
    CAPTURE(world);
    const int port = find_free_port();
    test::run_ranks(world, [&](int rank) {
      auto pg = test::join_group(rank, world, port);
      // What stays allocated after two steps, beyond the model itself: the gradients (plain SGD keeps
      // no state), with one model alive at a time.
      const auto held = [&](int stage) -> double {
        manual_seed(1);
        auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(64, 256), std::make_shared<nn::ReLU>(),
                                                      std::make_shared<nn::Linear>(256, 63));
        const size_t before = cpu_memory_stats().bytes_in_use;
        auto ddp = std::make_shared<DistributedDataParallel>(model, pg, DDPOptions{.bucket_cap_mb = 0.02});
        std::unique_ptr<optim::Optimizer> opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1});
        if (stage > 0) opt = std::make_unique<ZeroRedundancyOptimizer>(ddp, std::move(opt), ZeroOptions{.stage = stage});
        for (int64_t step = 0; step < 2; ++step) {
          Generator gen(5 + static_cast<uint64_t>(step));
          const Tensor x = randn({4, 64}, gen), y = randn({4, 63}, gen);
          opt->zero_grad();
          nn::F::mse_loss(ddp->forward(x), y).backward();
          opt->step();
        }
        return static_cast<double>(cpu_memory_stats().bytes_in_use - before);
      };
      int64_t params = 0;
      for (const Tensor& p : nn::Linear(64, 256).parameters()) params += p.numel();
      for (const Tensor& p : nn::Linear(256, 63).parameters()) params += p.numel();
      const double plain = held(0), zero1 = held(1), zero2 = held(2), grads = 4.0 * params;
      // Plain DDP and ZeRO-1 hold every gradient (the buckets); ZeRO-2 a quarter of them at 4 ranks,
      // plus the tails (under N elements per bucket) and the desync guards' copies.
      MT_CHECK(plain >= grads && plain < 1.02 * grads, "plain DDP holds ", plain, " bytes for ", grads, " of gradients");
      MT_CHECK(zero1 >= grads && zero1 < 1.02 * grads, "ZeRO-1 holds ", zero1, " bytes for ", grads, " of gradients");
      MT_CHECK(zero2 >= grads / world && zero2 < 1.05 * grads / world, "ZeRO-2 on rank ", rank, " holds ", zero2,
               " bytes, expected about ", grads / world, " (1/", world, " of ", grads, ")");
    }, std::chrono::seconds(60));
  }
}
