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
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/ops.h"
#include "distributed/ddp/ddp.h"
#include "distributed/ddp/ddp_join.h"
#include "distributed/process_group/process_group_local.h"
#include "distributed/store/tcp_store.h"
#include "distributed/zero/zero.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
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
