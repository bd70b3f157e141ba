// Join (distributed/ddp/ddp_join.h) with ZeRO-1 and ZeRO-2 (distributed/zero/zero.h): ranks with
// different numbers of batches train with a ZeroRedundancyOptimizer and end together, every replica
// bit-for-bit the same, and equal to one process running plain Adam on each step's average over the
// whole world. A joined rank's shadow backward goes through the same ZeroHook (zero gradients
// reduce-scattered into the active ranks' shards; under ZeRO-2 its buckets are allocated for it and
// released after), and its JoinOptions::step is the ZeRO step: its own shard's update, then the
// all-gather the active ranks' steps wait for; clipping over the shards, a collective, runs in
// both, as docs/ddp.md says it must. The case name starts with "DDP: " and holds "ZeRO-", so it
// also runs on MPI at 2, 3 and 4 ranks (tests/CMakeLists.txt). A Join without a step is refused
// under ZeRO: the active ranks would wait in an all-gather the joined one skips.
//
// Under ZeRO-3 (FullyShardedDataParallel, Note [FSDP Join]) the same uneven epoch, with SGD momentum
// and with AdamW, clipped, at 2 and 3 ranks, ends in the parameters that plain DDP with a Join
// reaches on the same batches (float tolerance): the joined rank's replayed all-gathers and
// reduce-scatters of zeros, and its FsdpOptimizer step, stand in for its missing batches exactly.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/ops.h"
#include "distributed/ddp/ddp.h"
#include "distributed/ddp/ddp_join.h"
#include "distributed/process_group/process_group_local.h"
#include "distributed/store/tcp_store.h"
#include "distributed/zero/fsdp.h"
#include "distributed/zero/zero.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/sgd.h"
#include "tensor/generator.h"
#include "uneven_batches.h"

using namespace mt;
using namespace mt::dist;

namespace {

const bool kNoBackend = !test::group_backend_available();

// A 3-16-16-2 MLP in buckets of about 300 bytes: several buckets, shards that cut parameters and,
// at 3 ranks, buckets with tails (Note [ZeRO shards]).
std::shared_ptr<nn::Sequential> make_model() {
  manual_seed(6);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 16), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(16, 2));
}
constexpr DDPOptions kSmallBuckets{.bucket_cap_mb = 300.0 / (1024 * 1024),
                                  .first_bucket_cap_mb = 300.0 / (1024 * 1024)};
constexpr optim::AdamOptions kAdam{.lr = 0.01, .weight_decay = 0.01};
constexpr double kClip = 0.05;  // below the gradients' norm, so clipping bites

constexpr uint64_t kSeed = 200;  // of the batches (test::uneven_batch)

enum class Kind { SgdMomentum, AdamW };

std::unique_ptr<optim::Optimizer> make_optimizer(Kind kind, const nn::Module& model) {
  if (kind == Kind::SgdMomentum)
    return std::make_unique<optim::SGD>(model.parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  return std::make_unique<optim::AdamW>(model.parameters(), optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
}

// This rank's uneven epoch through `wrapper` (a DistributedDataParallel or a
// FullyShardedDataParallel) inside a Join, clipped; returns the steps it shadowed.
template <class Wrapper>
int64_t train_uneven_joined(Wrapper& wrapper, optim::Optimizer& opt, int rank, int world) {
  const auto clip_and_step = [&] {
    MT_CHECK(opt.clip_grad_norm(kClip) > kClip, "the test's clipping must bite");
    opt.step();
  };
  Join join(wrapper, {.step = clip_and_step});
  for (int b = 0; b < test::uneven_batches_of(rank); ++b) {
    MT_CHECK(join.step() == world - (b >= 2 ? b - 1 : 0), "active ranks at step ", b);
    opt.zero_grad();
    const auto [x, y] = test::uneven_batch(kSeed, rank, b);
    nn::F::mse_loss(wrapper.forward(x), y).backward();
    clip_and_step();
  }
  return join.join();
}

}  // namespace

TEST_CASE("DDP: Join with ZeRO-1 and ZeRO-2 lets ranks with uneven batches finish together, with the same "
          "replicas" * doctest::skip(kNoBackend)) {
  for (const int stage : {1, 2})
  for (const int world : {2, 3}) {
    CAPTURE(stage);
    CAPTURE(world);
    const int port = find_free_port();
    test::run_ranks(world, [&](int rank) {
      auto pg = test::join_group(rank, world, port);
      auto model = make_model();
      auto ddp = std::make_shared<DistributedDataParallel>(model, pg, kSmallBuckets);
      ZeroRedundancyOptimizer opt(ddp, std::make_unique<optim::Adam>(model->parameters(), kAdam), {.stage = stage});
      MT_CHECK(ddp->stats().bucket_parameters.size() >= 3, "the test wants several buckets, got ",
               ddp->stats().bucket_parameters.size());
      int64_t shadowed = 0;
      {
        const auto clip_and_step = [&] {
          MT_CHECK(opt.clip_grad_norm(kClip) > kClip, "the test's clipping must bite");
          opt.step();
        };
        Join join(*ddp, {.step = clip_and_step});
        for (int b = 0; b < test::uneven_batches_of(rank); ++b) {
          MT_CHECK(join.step() == world - (b >= 2 ? b - 1 : 0), "active ranks at step ", b);
          opt.zero_grad();
          const auto [x, y] = test::uneven_batch(kSeed, rank, b);
          nn::F::mse_loss(ddp->forward(x), y).backward();
          clip_and_step();
        }
        shadowed = join.join();
      }
      MT_CHECK(shadowed == test::uneven_batches_of(world - 1) - test::uneven_batches_of(rank), "rank ", rank,
               " shadowed ", shadowed);
      ddp->check_replicas("after the uneven epoch under ZeRO-" + std::to_string(stage));

      // The reference: one process with plain Adam, each step the sum of the active ranks'
      // gradients over the world (the joined ranks' zeros included), clipped.
      auto ref = make_model();
      optim::Adam ref_opt(ref->parameters(), kAdam);
      test::train_uneven_reference(*ref, ref_opt, world, kSeed,
                                   [&] { optim::clip_grad_norm_(ref->parameters(), kClip); });
      test::check_parameters_near(*model, *ref, 1e-5);
    });
  }
}

TEST_CASE("Join refuses a ZeRO-1 model without JoinOptions::step, in one line") {
  auto model = make_model();
  auto ddp = std::make_shared<DistributedDataParallel>(model, std::make_shared<ProcessGroupLocal>());
  Join plain(*ddp);  // plain DDP: allowed (the joined replicas would only fall behind)
  plain.join();
  ZeroRedundancyOptimizer opt(ddp, std::make_unique<optim::Adam>(model->parameters(), kAdam));
  CHECK_THROWS_WITH_AS(Join(*ddp, JoinOptions{}), doctest::Contains("JoinOptions::step must be set"), Error);
  Join with_step(*ddp, {.step = [&] { opt.step(); }});
  CHECK(with_step.join() == 0);  // world 1: nobody else to shadow
}

TEST_CASE("DDP: Join with ZeRO-3 (FSDP) lets ranks with uneven batches finish together, equal to plain DDP's "
          "Join" * doctest::skip(kNoBackend)) {
  for (const Kind kind : {Kind::SgdMomentum, Kind::AdamW})
  for (const int world : {2, 3}) {
    CAPTURE(static_cast<int>(kind));
    CAPTURE(world);
    const int port = find_free_port();
    test::run_ranks(world, [&](int rank) {
      auto pg = test::join_group(rank, world, port);
      auto model = make_model();
      auto full_opt = make_optimizer(kind, *model);
      auto fsdp = std::make_shared<FullyShardedDataParallel>(model, pg);
      MT_CHECK(fsdp->units().size() == 4, "the test wants a unit per Linear (prefetch between them), got ",
               fsdp->units().size());
      FsdpOptimizer opt(fsdp, std::move(full_opt));
      const int64_t shadowed = train_uneven_joined(*fsdp, opt, rank, world);
      MT_CHECK(shadowed == test::uneven_batches_of(world - 1) - test::uneven_batches_of(rank), "rank ", rank,
               " shadowed ", shadowed);
      const NamedTensors got = fsdp->full_state_dict();  // a collective

      // The reference: the same model and batches under plain DDP with a Join.
      auto ref = make_model();
      auto ddp = std::make_shared<DistributedDataParallel>(ref, pg);
      const auto ref_opt = make_optimizer(kind, *ref);
      train_uneven_joined(*ddp, *ref_opt, rank, world);
      const NamedTensors want = ref->named_parameters();
      MT_CHECK(got.size() == want.size(), "state dict of ", got.size(), " entries, expected ", want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        MT_CHECK(got[i].first == want[i].first, got[i].first, " where ", want[i].first, " was expected");
        const std::vector<float> u = got[i].second.to_vector<float>(), v = want[i].second.to_vector<float>();
        for (size_t k = 0; k < u.size(); ++k)
          MT_CHECK(std::abs(u[k] - v[k]) <= 1e-5, got[i].first, "[", k, "] is ", u[k], ", plain DDP's ", v[k]);
      }
    });
  }
}

TEST_CASE("Join refuses a ZeRO-3 model without JoinOptions::step, in one line") {
  auto model = make_model();
  auto full_opt = std::make_unique<optim::Adam>(model->parameters(), kAdam);
  auto fsdp = std::make_shared<FullyShardedDataParallel>(model, std::make_shared<ProcessGroupLocal>());
  FsdpOptimizer opt(fsdp, std::move(full_opt));
  CHECK_THROWS_WITH_AS(Join(*fsdp, JoinOptions{}), doctest::Contains("JoinOptions::step"), Error);
  Join with_step(*fsdp, {.step = [&] { opt.step(); }});
  CHECK(with_step.join() == 0);  // world 1: nobody else to shadow
}
