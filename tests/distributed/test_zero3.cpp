// ZeRO-3, fully sharded data parallel (distributed/zero/fsdp.h): training equals plain DDP's over 20
// steps, with SGD momentum and AdamW (two param groups), gradients clipped over the shards, at 2, 3
// and 4 ranks, on a tiny GPT with a tied head, an unused parameter and a parameter count no world
// size divides; no_sync accumulation equals plain DDP's; between steps each rank holds 1/N of the
// parameters, as the CPU allocator counts them, and the units' parameters hold no bytes; the
// consolidated state dicts equal plain DDP's and resume bit-exactly, and plain DDP's state (so a
// checkpoint of any world size) carries on under ZeRO-3 as under plain DDP. The case names start with
// "DDP: " so that they also run on MPI (Note [Tests under mpirun] in multiprocess.h).
#include <doctest/doctest.h>

#include <cmath>

#include "distributed/ddp/ddp.h"
#include "distributed/store/tcp_store.h"
#include "distributed/zero/fsdp.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tensor/generator.h"

using namespace mt;
using namespace mt::dist;

namespace {

const bool kNoBackend = !test::group_backend_available();

constexpr nn::GPTOptions kTiny{.vocab = 32, .context = 8, .dim = 16, .layers = 2, .heads = 2};

// A tiny GPT (its head is its token embedding, Note [Tied embedding]: a parameter of the root unit)
// and a parameter of 5 elements that forward never uses; with it the parameter count is odd.
class TiedWithUnused : public nn::Module {
 public:
  TiedWithUnused() {
    manual_seed(3);
    gpt_ = register_module("gpt", std::make_shared<nn::GPT>(kTiny));
    Generator gen(4);
    unused_ = register_parameter("unused", randn({5}, gen));
  }
  Tensor forward(const Tensor& idx) override { return (*gpt_)(idx); }

 private:
  std::shared_ptr<nn::GPT> gpt_;
  Tensor unused_;
};

constexpr DDPOptions kPlain{.bucket_cap_mb = 2048.0 / (1024 * 1024), .find_unused_parameters = true};

enum class Kind { SgdMomentum, AdamW };

// AdamW in two groups, as mini_train's GPT has it (matrices decay, the rest not): the pieces of a
// unit's shard belong to different groups.
std::unique_ptr<optim::Optimizer> make_optimizer(Kind kind, const nn::Module& model) {
  if (kind == Kind::SgdMomentum)
    return std::make_unique<optim::SGD>(model.parameters(), optim::SGDOptions{.lr = 0.2, .momentum = 0.9});
  std::vector<Tensor> decay, rest;
  for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : rest).push_back(p);
  auto opt = std::make_unique<optim::AdamW>(decay, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
  opt->add_param_group(rest, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0});
  return opt;
}

// Rank `rank`'s 2 rows of step `step`'s batch of token windows, the same batch on every rank.
Tensor loss_on(nn::Module& net, int64_t step, int rank, int world) {
  Generator gen(100 + static_cast<uint64_t>(step));
  const Tensor idx = (rand({2 * world, 8}, gen) * 31.99).to(kInt64), targets = (rand({2 * world, 8}, gen) * 31.99).to(kInt64);
  const Tensor logits = net.forward(idx.narrow(0, 2 * rank, 2));
  return nn::F::cross_entropy(logits.reshape({-1, kTiny.vocab}), targets.narrow(0, 2 * rank, 2).reshape({-1}));
}

double train_step(nn::Module& net, optim::Optimizer& opt, int64_t step, int rank, int world, double clip) {
  opt.zero_grad();
  loss_on(net, step, rank, world).backward();
  const double norm = clip > 0 ? opt.clip_grad_norm(clip) : 0.0;
  opt.step();
  return norm;
}

void check_close(const NamedTensors& got, const NamedTensors& want, double tol, const std::string& what) {
  MT_CHECK(got.size() == want.size(), what, ": ", got.size(), " tensors, expected ", want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    MT_CHECK(got[i].first == want[i].first, what, ": '", got[i].first, "' where '", want[i].first, "' was expected");
    const std::vector<float> u = got[i].second.to_vector<float>(), v = want[i].second.to_vector<float>();
    for (size_t k = 0; k < u.size(); ++k)
      MT_CHECK(std::abs(u[k] - v[k]) <= tol * (1 + std::abs(v[k])), what, ": ", want[i].first, "[", k, "] is ", u[k],
               ", expected ", v[k]);
  }
}

NamedTensors sorted(const optim::StateDict& state) { return NamedTensors(state.begin(), state.end()); }

}  // namespace

TEST_CASE("DDP: ZeRO-3 trains like plain DDP for 20 steps, SGD momentum and AdamW clipped, tied and unused "
          "parameters, at 2, 3 and 4 ranks" * doctest::skip(kNoBackend)) {
  for (const int world : {2, 3, 4})
    for (const Kind kind : {Kind::SgdMomentum, Kind::AdamW}) {
      CAPTURE(world);
      const int port = find_free_port();
      test::run_ranks(world, [&](int rank) {
        auto pg = test::join_group(rank, world, port);
        auto plain_model = std::make_shared<TiedWithUnused>(), sharded_model = std::make_shared<TiedWithUnused>();
        int64_t params = 0;
        for (const Tensor& p : sharded_model->parameters()) params += p.numel();
        MT_CHECK(params % world != 0, "the model's ", params, " parameters must not divide among ", world, " ranks");
        auto plain = std::make_shared<DistributedDataParallel>(plain_model, pg, kPlain);
        const auto plain_opt = make_optimizer(kind, *plain_model);
        auto full_opt = make_optimizer(kind, *sharded_model);
        auto fsdp = std::make_shared<FullyShardedDataParallel>(sharded_model, pg);
        FsdpOptimizer opt(fsdp, std::move(full_opt));
        MT_CHECK(fsdp->units().size() == 3 && fsdp->units()[0].name == "gpt.blocks.0" && fsdp->units()[2].name.empty(),
                 "a unit per transformer block and the root, got ", fsdp->units().size(), " units");
        for (int64_t step = 0; step < 20; ++step) {
          const double clip = 0.1;  // below the gradient norm: the norm over the shards must be the whole one
          const double want = train_step(*plain, *plain_opt, step, rank, world, clip);
          const double got = train_step(*fsdp, opt, step, rank, world, clip);
          MT_CHECK(std::abs(got - want) <= 1e-5 * want, "step ", step, ": ZeRO-3's gradient norm ", got, ", plain ", want);
          MT_CHECK(want > clip, "the test's clipping must bite: norm ", want);
          for (const auto& [name, p] : sharded_model->named_parameters())  // Note [Gather, then free]
            MT_CHECK(p.storage()->released() && !p.grad().defined(), "'", name, "' is whole or has a gradient between steps");
        }
        check_close(fsdp->full_state_dict(), plain_model->state_dict(), 2e-5, "rank " + std::to_string(rank) + " after 20 steps");
      }, std::chrono::seconds(120));
    }
}

TEST_CASE("DDP: ZeRO-3 accumulates no_sync micro-batches like plain DDP" * doctest::skip(kNoBackend)) {
  for (const int world : {2, 3}) {
    CAPTURE(world);
    const int port = find_free_port();
    test::run_ranks(world, [&](int rank) {
      auto pg = test::join_group(rank, world, port);
      auto plain_model = std::make_shared<TiedWithUnused>(), sharded_model = std::make_shared<TiedWithUnused>();
      auto plain = std::make_shared<DistributedDataParallel>(plain_model, pg, kPlain);
      const auto plain_opt = make_optimizer(Kind::SgdMomentum, *plain_model);
      auto full_opt = make_optimizer(Kind::SgdMomentum, *sharded_model);
      auto fsdp = std::make_shared<FullyShardedDataParallel>(sharded_model, pg);
      FsdpOptimizer opt(fsdp, std::move(full_opt));
      for (int64_t step = 0; step < 4; ++step) {
        {
          plain_opt->zero_grad();
          {
            auto guard = plain->no_sync();
            (loss_on(*plain, 2 * step, rank, world) * 0.5).backward();
          }
          (loss_on(*plain, 2 * step + 1, rank, world) * 0.5).backward();
          plain_opt->step();
        }
        {
          auto guard = fsdp->no_sync();
          (loss_on(*fsdp, 2 * step, rank, world) * 0.5).backward();  // summed in the flat gradients, not reduced
        }
        (loss_on(*fsdp, 2 * step + 1, rank, world) * 0.5).backward();  // reduce-scatters both micro-batches
        opt.step();
      }
      check_close(fsdp->full_state_dict(), plain_model->state_dict(), 2e-5,
                  "rank " + std::to_string(rank) + " after 4 accumulated steps");
    }, std::chrono::seconds(60));
  }
}

TEST_CASE("DDP: ZeRO-3 holds 1/N of the parameters per rank between steps, and peaks far below plain DDP, as the "
          "allocator counts it, at 2 and 4 ranks" * doctest::skip(kNoBackend)) {
  for (const int world : {2, 4}) {
    CAPTURE(world);
    const int port = find_free_port();
    test::run_ranks(world, [&](int rank) {
      auto pg = test::join_group(rank, world, port);
      // Sixteen layers of 128 -> 128: a unit each, an empty root.
      constexpr int kLayers = 16;
      const auto make_model = [] {
        manual_seed(1);
        auto model = std::make_shared<nn::Sequential>();
        for (int i = 0; i < kLayers; ++i) model->push_back(std::make_shared<nn::Linear>(128, 128));
        return model;
      };
      // Two SGD steps (no state); returns (held after them, peak during them) beyond what was in use before.
      const auto measure = [&](bool sharded) -> std::pair<double, double> {
        const size_t before = cpu_memory_stats().bytes_in_use;
        auto model = make_model();
        std::shared_ptr<nn::Module> net;
        std::unique_ptr<optim::Optimizer> opt;
        std::shared_ptr<FullyShardedDataParallel> fsdp;
        if (sharded) {
          fsdp = std::make_shared<FullyShardedDataParallel>(model, pg);
          opt = std::make_unique<FsdpOptimizer>(fsdp, std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1}));
          net = fsdp;
        } else {
          net = std::make_shared<DistributedDataParallel>(model, pg);
          opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1});
        }
        reset_cpu_peak_memory();
        for (int64_t step = 0; step < 2; ++step) {
          Generator gen(5 + static_cast<uint64_t>(step));
          const Tensor x = randn({4, 128}, gen), y = randn({4, 128}, gen);
          opt->zero_grad();
          nn::F::mse_loss(net->forward(x), y).backward();
          opt->step();
        }
        return {static_cast<double>(cpu_memory_stats().bytes_in_use - before),
                static_cast<double>(cpu_memory_stats().peak_bytes_in_use - before)};
      };
      const auto [plain_held, plain_peak] = measure(false);
      const auto [held, peak] = measure(true);
      int64_t params = 0;
      for (const Tensor& p : make_model()->parameters()) params += p.numel();
      const double model_bytes = 4.0 * static_cast<double>(params);
      // Between steps: this rank's shards only (SGD keeps no state, the gradients are spent), plus
      // the padding, under N elements per unit. Plain DDP: the whole parameters and gradients.
      MT_CHECK(held >= model_bytes / world && held < 1.05 * model_bytes / world, "ZeRO-3 on rank ", rank, " holds ", held,
               " bytes, expected about ", model_bytes / world, " (1/", world, " of ", model_bytes, ")");
      MT_CHECK(plain_held >= 2 * model_bytes, "plain DDP holds ", plain_held, " bytes for ", 2 * model_bytes,
               " of parameters and gradients");
      // During a step: the shards of the parameters and of their reduced gradients (1/N each), and a
      // few units whole at a time: the one computing and the prefetched one, the flat gradients of
      // the one computing and of the one being reduce-scattered, a fresh weight gradient and a
      // collective's buffer; never the whole model.
      const double unit = model_bytes / kLayers, bound = 2 * model_bytes / world + 6 * unit;
      MT_CHECK(peak < bound && peak < plain_peak, "ZeRO-3 on rank ", rank, " peaked at ", peak, " bytes, expected under ",
               bound, " (2/", world, " of ", model_bytes, " and 6 units); plain DDP at ", plain_peak);
    }, std::chrono::seconds(60));
  }
}

TEST_CASE("DDP: ZeRO-3's consolidated state dicts equal plain DDP's and resume bit-exactly, and plain DDP's state "
          "resumes under ZeRO-3, at 2 and 3 ranks" *
          doctest::skip(kNoBackend)) {
  for (const int world : {2, 3}) {
    CAPTURE(world);
    const int port = find_free_port();
    test::run_ranks(world, [&](int rank) {
      auto pg = test::join_group(rank, world, port);
      auto plain_model = std::make_shared<TiedWithUnused>(), sharded_model = std::make_shared<TiedWithUnused>();
      auto plain = std::make_shared<DistributedDataParallel>(plain_model, pg, kPlain);
      const auto plain_opt = make_optimizer(Kind::AdamW, *plain_model);
      auto full_opt = make_optimizer(Kind::AdamW, *sharded_model);
      auto fsdp = std::make_shared<FullyShardedDataParallel>(sharded_model, pg);
      FsdpOptimizer opt(fsdp, std::move(full_opt));
      for (int64_t step = 0; step < 3; ++step) {
        train_step(*plain, *plain_opt, step, rank, world, 0);
        train_step(*fsdp, opt, step, rank, world, 0);
      }
      const NamedTensors model_state = fsdp->full_state_dict();
      const optim::StateDict opt_state = opt.state_dict();
      check_close(model_state, plain_model->state_dict(), 2e-5, "the consolidated model");
      check_close(sorted(opt_state), sorted(plain_opt->state_dict()), 2e-5, "the consolidated optimizer state");
      // The local pieces cover every parameter exactly once over the ranks.
      double local = 0, total = 0;
      for (const ShardPiece& s : fsdp->local_state_dict()) local += static_cast<double>(s.data.numel());
      for (const Tensor& p : plain_model->parameters()) total += static_cast<double>(p.numel());
      Tensor sum = full({1}, local, {.dtype = kFloat64});
      pg->allreduce(sum)->wait();
      MT_CHECK(sum.item() == total, "the ranks' local pieces hold ", sum.item(), " elements of ", total);
      // This rank's optimizer pieces are the consolidated state's elements at their offsets.
      for (const ShardPiece& s : opt.local_state_dict()) {
        const Tensor& whole = opt_state.at(s.name);
        const Tensor want = s.shape.size() == 0 ? whole : whole.reshape({-1}).narrow(0, s.offset, s.data.numel());
        MT_CHECK(want.to_vector<float>() == s.data.to_vector<float>(), "the local piece of '", s.name, "' at ",
                 s.offset, " differs from the consolidated state");
      }
      // Resume: a fresh model and optimizer from the consolidated state continue exactly as the run did.
      auto resumed_model = std::make_shared<TiedWithUnused>();
      resumed_model->load_state_dict(model_state);
      auto resumed_full = make_optimizer(Kind::AdamW, *resumed_model);
      resumed_full->load_state_dict(opt_state);
      auto resumed = std::make_shared<FullyShardedDataParallel>(resumed_model, pg);
      FsdpOptimizer resumed_opt(resumed, std::move(resumed_full));
      for (int64_t step = 3; step < 5; ++step) {
        train_step(*fsdp, opt, step, rank, world, 0);
        train_step(*resumed, resumed_opt, step, rank, world, 0);
      }
      check_close(resumed->full_state_dict(), fsdp->full_state_dict(), 0.0, "the resumed run");
      // A checkpoint does not depend on the world size: plain DDP's state (what the consolidated
      // state equals, above, at any world size) loaded into ZeRO-3 carries on as plain DDP does.
      auto from_plain_model = std::make_shared<TiedWithUnused>();
      from_plain_model->load_state_dict(plain_model->state_dict());
      auto from_plain_full = make_optimizer(Kind::AdamW, *from_plain_model);
      from_plain_full->load_state_dict(plain_opt->state_dict());
      auto from_plain = std::make_shared<FullyShardedDataParallel>(from_plain_model, pg);
      FsdpOptimizer from_plain_opt(from_plain, std::move(from_plain_full));
      for (int64_t step = 3; step < 6; ++step) {
        train_step(*plain, *plain_opt, step, rank, world, 0);
        train_step(*from_plain, from_plain_opt, step, rank, world, 0);
      }
      check_close(from_plain->full_state_dict(), plain_model->state_dict(), 2e-5, "ZeRO-3 resumed from plain DDP's state");
    }, std::chrono::seconds(60));
  }
}
