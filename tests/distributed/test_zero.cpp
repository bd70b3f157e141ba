// ZeRO-1 (distributed/zero/zero.h): training equals plain DDP's, step after step, with SGD momentum and
// Adam (with gradient clipping over the shards) at 2 and 3 ranks; each rank holds about 1/N of the optimizer state, as the CPU allocator
// counts it; and a checkpoint is the plain optimizer's state, so a run resumes bit-exactly at the
// same world size and carries on at another, under ZeRO-1 and ZeRO-2 alike (ZeRO-2's own tests are in
// test_zero2.cpp). The case names start with "DDP: " so that they also
// run on MPI (tests/CMakeLists.txt; Note [Tests under mpirun] in multiprocess.h).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "distributed/ddp/ddp.h"
#include "distributed/process_group/process_group_local.h"
#include "distributed/store/tcp_store.h"
#include "distributed/zero/zero.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "nn/safetensors.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tensor/generator.h"

using namespace mt;
using namespace mt::dist;

namespace {

const bool kNoBackend = !test::group_backend_available();

// A 6-16-16-3 MLP, initialised from `seed`.
std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed, int64_t width = 16) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, width), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(width, width), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(width, 3));
}

// About 300 bytes: the MLP's parameters spread over several buckets, so shards cut through
// parameters and, at 3 ranks, buckets have tails (Note [ZeRO shards]).
constexpr DDPOptions kSmallBuckets{.bucket_cap_mb = 300.0 / (1024 * 1024), .first_bucket_cap_mb = 300.0 / (1024 * 1024)};

enum class Kind { SgdMomentum, Adam };

std::unique_ptr<optim::Optimizer> make_optimizer(Kind kind, const nn::Module& model) {
  if (kind == Kind::SgdMomentum) return std::make_unique<optim::SGD>(model.parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  return std::make_unique<optim::Adam>(model.parameters(), optim::AdamOptions{.lr = 0.01, .weight_decay = 0.01});
}

// One step of rank `rank`'s slice (4 rows) of step `step`'s batch, the same batch on every rank;
// with clip > 0 the gradients are clipped to that norm first (over the shards under ZeRO). Returns
// the norm before clipping (0 without).
double train_step(DistributedDataParallel& ddp, optim::Optimizer& opt, int64_t step, int rank, int world,
                  double clip = 0) {
  Generator gen(100 + static_cast<uint64_t>(step));
  const Tensor x = randn({4 * world, 6}, gen), y = randn({4 * world, 3}, gen);
  ddp.zero_grad();
  nn::F::mse_loss(ddp.forward(x.narrow(0, 4 * rank, 4)), y.narrow(0, 4 * rank, 4)).backward();
  double norm = 0;
  if (clip > 0) {
    auto* zero = dynamic_cast<ZeroRedundancyOptimizer*>(&opt);
    norm = zero ? zero->clip_grad_norm(clip) : optim::clip_grad_norm_(ddp.module()->parameters(), clip);
  }
  opt.step();
  return norm;
}

void check_close(const nn::Module& got, const nn::Module& want, double tol, const std::string& what) {
  const NamedTensors a = got.named_parameters(), b = want.named_parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> u = a[i].second.to_vector<float>(), v = b[i].second.to_vector<float>();
    for (size_t k = 0; k < u.size(); ++k)
      MT_CHECK(std::abs(u[k] - v[k]) <= tol, what, ": ", b[i].first, "[", k, "] is ", u[k], ", expected ", v[k]);
  }
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.sizes() == y.sizes() && x.dtype() == y.dtype() &&
         std::memcmp(x.raw_data(), y.raw_data(), x.numel() * element_size(x.dtype())) == 0;
}

void check_same_state(const optim::StateDict& got, const optim::StateDict& want, const std::string& what) {
  MT_CHECK(got.size() == want.size(), what, ": ", got.size(), " entries, expected ", want.size());
  for (const auto& [key, value] : want) {
    const auto it = got.find(key);
    MT_CHECK(it != got.end(), what, ": no '", key, "'");
    MT_CHECK(same_bits(it->second, value), what, ": '", key, "' differs");
  }
}

// A file name the ranks of one test run share: the mpirun job's id, or the forking process's pid
// (computed before the fork).
std::string temp_path(const std::string& name) {
  const char* job = std::getenv("PMIX_NAMESPACE");
  const std::string id = test::mpi_mode() && job ? std::string(job) : std::to_string(::getpid());
  return std::filesystem::temp_directory_path() / ("mt-zero-" + id + "-" + name);
}

}  // namespace

TEST_CASE("DDP: ZeRO-1 trains like plain DDP, with SGD momentum and Adam, at 2 and 3 ranks" *
          doctest::skip(kNoBackend)) {
  for (const int world : {2, 3})
    for (const Kind kind : {Kind::SgdMomentum, Kind::Adam}) {
      CAPTURE(world);
      const int port = find_free_port();
      test::run_ranks(world, [&](int rank) {
        auto pg = test::join_group(rank, world, port);
        auto plain_model = make_mlp(1), zero_model = make_mlp(rank + 1);  // DDP broadcasts rank 0's
        auto plain = std::make_shared<DistributedDataParallel>(plain_model, pg, kSmallBuckets);
        auto zddp = std::make_shared<DistributedDataParallel>(zero_model, pg, kSmallBuckets);
        const auto plain_opt = make_optimizer(kind, *plain_model);
        ZeroRedundancyOptimizer zero(zddp, make_optimizer(kind, *zero_model));
        MT_CHECK(zddp->stats().comm_hook == "zero", "the ZeRO hook is registered, got ", zddp->stats().comm_hook);
        for (int64_t step = 0; step < 4; ++step) {
          // Adam's run clips to a norm the gradients exceed: the norm over the shards must be the whole one.
          const double clip = kind == Kind::Adam ? 0.05 : 0.0;
          const double want = train_step(*plain, *plain_opt, step, rank, world, clip);
          const double got = train_step(*zddp, zero, step, rank, world, clip);
          MT_CHECK(std::abs(got - want) <= 1e-6 * want, "step ", step, ": ZeRO's gradient norm ", got, ", plain ", want);
          MT_CHECK(clip == 0 || want > clip, "the test's clipping must bite: norm ", want);
          check_close(*zero_model, *plain_model, 1e-6, "rank " + std::to_string(rank) + " after step " +
                                                            std::to_string(step));
        }
        // Gradients read zero after a ZeRO step (their buckets carried the all-gather).
        for (const Tensor& p : zero_model->parameters())
          for (float g : p.grad().to_vector<float>()) MT_CHECK(g == 0.0f, "a gradient is not zero after the ZeRO step");
      }, std::chrono::seconds(60));
    }
}

TEST_CASE("DDP: ZeRO-1 at 2 ranks keeps half the optimizer state per rank, as the allocator counts it" *
          doctest::skip(kNoBackend)) {
  const int world = 2, port = find_free_port();
  test::run_ranks(world, [&](int rank) {
    auto pg = test::join_group(rank, world, port);
    // Measured around the first step, with one model alive at a time.
    const auto measure = [&](bool zero) -> double {
      auto model = make_mlp(1, 128);
      auto ddp = std::make_shared<DistributedDataParallel>(model, pg);
      std::unique_ptr<optim::Optimizer> opt = make_optimizer(Kind::Adam, *model);
      if (zero) opt = std::make_unique<ZeroRedundancyOptimizer>(ddp, std::move(opt));
      Generator gen(5);
      const Tensor x = randn({4, 6}, gen), y = randn({4, 3}, gen);
      ddp->zero_grad();
      nn::F::mse_loss(ddp->forward(x), y).backward();
      const size_t before = cpu_memory_stats().bytes_in_use;
      opt->step();
      return static_cast<double>(cpu_memory_stats().bytes_in_use - before);
    };
    const double plain = measure(false), zero = measure(true);
    int64_t params = 0;
    for (const Tensor& p : make_mlp(1, 128)->parameters()) params += p.numel();
    // Plain Adam: two float32 buffers per parameter (a little more: the allocator counts requests).
    MT_CHECK(plain >= 8.0 * params && plain < 8.0 * params * 1.05, "plain Adam state on rank ", rank, ": ", plain,
             " bytes for ", params, " parameters");
    MT_CHECK(zero <= 0.55 * plain && zero >= 0.45 * plain, "ZeRO-1 Adam state on rank ", rank, ": ", zero,
             " bytes, plain DDP ", plain, " (expected about half)");
  });
}

// The same file whatever the stage: ZeRO-2's consolidated state is ZeRO-1's (Note [Consolidated ZeRO
// state]), so each stage resumes its own checkpoint and carries it on at another world size.
TEST_CASE("DDP: a ZeRO-1 or ZeRO-2 checkpoint resumes bit-exactly at 2 ranks, and carries on at 3 ranks and at 1" *
          doctest::skip(kNoBackend)) {
  for (const int stage : {1, 2}) {
    CAPTURE(stage);
    const ZeroOptions zopt{.stage = stage};
    const std::string model_file = temp_path("model.safetensors"), state_file = temp_path("optim.safetensors"),
                      straight_file = temp_path("straight.safetensors");
    // At 2 ranks: 4 steps straight; and 2 steps, a checkpoint, a fresh start from it and 2 more.
    int port = find_free_port();
    test::run_ranks(2, [&](int rank) {
      auto pg = test::join_group(rank, 2, port);
      {
        auto model = make_mlp(1);
        auto ddp = std::make_shared<DistributedDataParallel>(model, pg, kSmallBuckets);
        ZeroRedundancyOptimizer opt(ddp, make_optimizer(Kind::Adam, *model), zopt);
        for (int64_t step = 0; step < 4; ++step) train_step(*ddp, opt, step, rank, 2);
        if (rank == 0) save_safetensors(straight_file, model->state_dict());
      }
      optim::StateDict saved;
      {
        auto model = make_mlp(1);
        auto ddp = std::make_shared<DistributedDataParallel>(model, pg, kSmallBuckets);
        ZeroRedundancyOptimizer opt(ddp, make_optimizer(Kind::Adam, *model), zopt);
        for (int64_t step = 0; step < 2; ++step) train_step(*ddp, opt, step, rank, 2);
        saved = opt.state_dict();  // a collective: every rank gathers the whole state
        // The consolidated state is a plain Adam's: every parameter's moments, shaped like it.
        MT_CHECK(saved.count("state.0.exp_avg") && saved.at("state.0.exp_avg").sizes() == model->parameters()[0].sizes(),
                 "the consolidated state has parameter 0's exp_avg, shaped like it");
        if (rank == 0) {
          save_safetensors(model_file, model->state_dict());
          save_safetensors(state_file, NamedTensors(saved.begin(), saved.end()));
        }
      }
      pg->barrier()->wait();
      auto model = make_mlp(7);
      model->load_state_dict(load_safetensors(model_file).tensors);
      auto ddp = std::make_shared<DistributedDataParallel>(model, pg, kSmallBuckets);
      auto full = make_optimizer(Kind::Adam, *model);
      const NamedTensors file = load_safetensors(state_file).tensors;
      full->load_state_dict(optim::StateDict(file.begin(), file.end()));
      ZeroRedundancyOptimizer opt(ddp, std::move(full), zopt);
      check_same_state(opt.state_dict(), saved, "the resumed state on rank " + std::to_string(rank));
      for (int64_t step = 2; step < 4; ++step) train_step(*ddp, opt, step, rank, 2);
      const NamedTensors straight = load_safetensors(straight_file).tensors;
      const NamedTensors resumed = model->state_dict();
      for (size_t i = 0; i < straight.size(); ++i)
        MT_CHECK(same_bits(resumed[i].second, straight[i].second), "rank ", rank, ": ", straight[i].first,
                 " after resuming differs from the straight run");
      pg->barrier()->wait();  // every rank has read the files
    }, std::chrono::seconds(60));

    // At 3 ranks and at 1: the same checkpoint under ZeRO carries on like plain DDP loaded from it.
    for (const int world : {3, 1}) {
      CAPTURE(world);
      if (!std::filesystem::exists(state_file)) {  // under mpirun -np 3 the 2-rank part did not run
        MESSAGE("skipped: no checkpoint from the 2-rank part");
        continue;
      }
      port = find_free_port();
      const auto body = [&](int rank) {
        auto pg = world == 1 ? std::make_shared<ProcessGroupLocal>() : test::join_group(rank, world, port);
        const NamedTensors weights = load_safetensors(model_file).tensors;
        const NamedTensors file = load_safetensors(state_file).tensors;
        const optim::StateDict state(file.begin(), file.end());
        auto plain_model = make_mlp(1), zero_model = make_mlp(1);
        plain_model->load_state_dict(weights);
        zero_model->load_state_dict(weights);
        auto plain = std::make_shared<DistributedDataParallel>(plain_model, pg, kSmallBuckets);
        auto zddp = std::make_shared<DistributedDataParallel>(zero_model, pg, kSmallBuckets);
        auto plain_opt = make_optimizer(Kind::Adam, *plain_model), full = make_optimizer(Kind::Adam, *zero_model);
        plain_opt->load_state_dict(state);
        full->load_state_dict(state);
        ZeroRedundancyOptimizer zero(zddp, std::move(full), zopt);
        check_same_state(zero.state_dict(), state, "the state loaded at world " + std::to_string(world));
        for (int64_t step = 2; step < 4; ++step) {
          train_step(*plain, *plain_opt, step, rank, world);
          train_step(*zddp, zero, step, rank, world);
        }
        check_close(*zero_model, *plain_model, 1e-6, "world " + std::to_string(world) + ", rank " + std::to_string(rank));
      };
      if (world > 1) test::run_ranks(world, body, std::chrono::seconds(60));
      else if (!test::mpi_mode()) body(0);  // under mpirun every rank would run it, from files maybe not written
    }
    for (const std::string& f : {model_file, state_file, straight_file}) std::filesystem::remove(f);
  }
}

TEST_CASE("ZeRO-1: an optimizer that lacks a DDP parameter is a clear error") {
  auto model = make_mlp(1);
  auto ddp = std::make_shared<DistributedDataParallel>(model, std::make_shared<ProcessGroupLocal>());
  std::vector<Tensor> some = model->parameters();
  some.pop_back();
  CHECK_THROWS_WITH_AS(ZeroRedundancyOptimizer(ddp, std::make_unique<optim::SGD>(some, optim::SGDOptions{.lr = 0.1})),
                       doctest::Contains("of the DDP model is not in the optimizer"), Error);
}
