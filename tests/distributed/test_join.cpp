// Join (distributed/ddp/ddp_join.h, Note [Join]): ranks with different numbers of batches train through
// DDP and end together, every replica bit-for-bit the same, and equal to one process that applies,
// step by step, the average (over the whole world) of the gradients of the ranks that had a batch.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/ops.h"
#include "distributed/ddp/ddp.h"
#include "distributed/ddp/ddp_join.h"
#include "distributed/ddp/sync_batchnorm.h"
#include "distributed/store/tcp_store.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "optim/sgd.h"
#include "tensor/generator.h"
#include "uneven_batches.h"

using namespace mt;
using namespace mt::dist;

namespace {

const bool kNoBackend = !test::group_backend_available();

std::shared_ptr<nn::Sequential> make_model() {
  manual_seed(4);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 5), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(5, 2));
}

constexpr uint64_t kSeed = 100;  // of the batches (test::uneven_batch)

}  // namespace

TEST_CASE("DDP: Join lets ranks with uneven batches finish together, with the same replicas" *
          doctest::skip(kNoBackend)) {
  for (const int world : {2, 3}) {
    CAPTURE(world);
    const int port = find_free_port();
    test::run_ranks(world, [&](int rank) {
      auto pg = test::join_group(rank, world, port);
      auto model = make_model();
      DistributedDataParallel ddp(model, pg);
      optim::SGD opt(ddp.parameters(), {.lr = 0.1});
      int64_t shadowed = 0;
      {
        Join join(ddp, {.step = [&] { opt.step(); }});
        for (int b = 0; b < test::uneven_batches_of(rank); ++b) {
          MT_CHECK(join.step() == world - (b >= 2 ? b - 1 : 0), "active ranks at step ", b);
          ddp.zero_grad();
          const auto [x, y] = test::uneven_batch(kSeed, rank, b);
          nn::F::mse_loss(ddp.forward(x), y).backward();
          opt.step();
        }
        shadowed = join.join();
      }
      MT_CHECK(shadowed == test::uneven_batches_of(world - 1) - test::uneven_batches_of(rank), "rank ", rank,
               " shadowed ", shadowed);
      ddp.check_replicas("after the uneven epoch");

      // The reference: one process, each step the sum of the active ranks' gradients over world.
      auto ref = make_model();
      optim::SGD ref_opt(ref->parameters(), {.lr = 0.1});
      test::train_uneven_reference(*ref, ref_opt, world, kSeed);
      test::check_parameters_near(*model, *ref, 1e-6);
    });
  }
}

// Note [Join]: a joined rank has no batch to run SyncBatchNorm's statistics all-reduce with, so the
// others' forward would pair it with the wrong collective. Refused when the Join is made, on every rank.
TEST_CASE("DDP: Join refuses a model with SyncBatchNorm, saying to give every rank equal batches" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    auto pg = test::join_group(rank, 2, port);
    manual_seed(4);
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 5),
                                                  std::make_shared<nn::BatchNorm1d>(5), std::make_shared<nn::Linear>(5, 2));
    MT_CHECK(convert_sync_batchnorm(*model, pg) == 1, "one BatchNorm to synchronise");
    DistributedDataParallel ddp(model, pg);
    std::string message;
    try {
      Join join(ddp, {});
    } catch (const Error& e) {
      message = e.what();
    }
    MT_CHECK(message.find("Join cannot shadow SyncBatchNorm's statistics all-reduce") != std::string::npos &&
                 message.find("same number of batches") != std::string::npos,
             "expected Join to refuse SyncBatchNorm, got: ", message);
  });
}
