// GradScaler in data-parallel training (distributed/ddp/found_inf.h, Note [One found-inf for all
// ranks]): an inf that only one rank sees (put into its gradient after DDP's all-reduce, or into its
// own ZeRO-2 or ZeRO-3 shard) makes every rank skip the step and back off identically, and the parameters stay
// the same bits on every rank; without the shared flag the same run parts the ranks. The case names
// start with "DDP: " so that they also run on MPI (Note [Tests under mpirun] in multiprocess.h).
#include <doctest/doctest.h>

#include <functional>
#include <limits>

#include "distributed/ddp/ddp.h"
#include "distributed/ddp/found_inf.h"
#include "distributed/store/tcp_store.h"
#include "distributed/zero/fsdp.h"
#include "distributed/zero/zero.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "optim/adam.h"
#include "optim/grad_scaler.h"
#include "tensor/generator.h"
#include "tensor/raw_ops.h"

using namespace mt;
using namespace mt::dist;

namespace {

const bool kNoBackend = !test::group_backend_available();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::shared_ptr<nn::Linear> make_linear() {
  manual_seed(3);
  return std::make_shared<nn::Linear>(5, 4);
}

// This rank's examples: the ranks' gradients differ before the all-reduce.
Tensor loss_on(nn::Module& wrapped, int rank, int step) {
  Generator gen(100 + 10 * static_cast<uint64_t>(step) + static_cast<uint64_t>(rank));
  return wrapped.forward(mul(randn({8, 5}, gen), 3.0)).pow(2).mean();
}

// Named tensors' values, flattened, one after another.
Tensor flat(const NamedTensors& named) {
  std::vector<float> all;
  for (const auto& [name, t] : named)
    for (float x : t.to_vector<float>()) all.push_back(x);
  return from_vector(all, {static_cast<int64_t>(all.size())});
}

// Whether every rank holds the same bits in `mine` (a collective).
bool same_on_every_rank(ProcessGroup& pg, const Tensor& mine) {
  std::vector<Tensor> all;
  for (int r = 0; r < pg.size(); ++r) all.push_back(empty_like(mine));
  pg.allgather(all, mine)->wait();
  for (const Tensor& other : all)
    if (other.to_vector<float>() != mine.to_vector<float>()) return false;
  return true;
}

// Sets element 0 of the first gradient `opt` steps from to inf, on this rank only.
void poison(optim::Optimizer& opt) {
  const std::vector<Tensor> grads = opt.step_gradients();
  MT_CHECK(!grads.empty() && grads.front().numel() > 0, "no gradient to poison");
  raw::fill_(raw::narrow(grads.front().flatten(), 0, 0, 1), kInf);
}

// Three steps, the second with an inf on rank 1 only. Returns whether the ranks ended alike.
// `share`: the scaler asks any_rank_found_inf; `zero_stage`: 0 for plain DDP with Adam, 1 or 2 for
// ZeroRedundancyOptimizer, 3 for FullyShardedDataParallel with FsdpOptimizer.
bool run_with_an_inf_on_rank_1(int rank, int world, int port, bool share, int zero_stage) {
  auto model = make_linear();
  auto pg = test::join_group(rank, world, port);
  std::unique_ptr<optim::Optimizer> opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 0.01});
  std::shared_ptr<nn::Module> wrapped;
  std::function<Tensor()> params = [&] { return flat(model->named_parameters()); };
  if (zero_stage == 3) {
    auto fsdp = std::make_shared<FullyShardedDataParallel>(model, pg);
    opt = std::make_unique<FsdpOptimizer>(fsdp, std::move(opt));
    params = [fsdp] { return flat(fsdp->full_state_dict()); };  // the parameters live in shards: gathered
    wrapped = fsdp;
  } else {
    auto ddp = std::make_shared<DistributedDataParallel>(model, pg);
    if (zero_stage > 0) opt = std::make_unique<ZeroRedundancyOptimizer>(ddp, std::move(opt), ZeroOptions{.stage = zero_stage});
    wrapped = ddp;
  }
  optim::GradScaler scaler({.growth_interval = 2});
  if (share) scaler.set_found_inf_reduction(any_rank_found_inf(pg));

  std::vector<bool> stepped;
  Tensor before_skip;
  for (int step = 0; step < 3; ++step) {
    opt->zero_grad();
    scaler.scale(loss_on(*wrapped, rank, step)).backward();
    if (step == 1) {
      before_skip = params();
      if (rank == 1) poison(*opt);
    }
    stepped.push_back(scaler.step(*opt));
    scaler.update();
    if (step == 1 && share) {
      MT_CHECK(params().to_vector<float>() == before_skip.to_vector<float>(),
               "rank ", rank, ": the skipped step changed the parameters");
    }
  }
  const bool alike = same_on_every_rank(*pg, params());
  if (share) {
    MT_CHECK(stepped == std::vector<bool>({true, false, true}), "rank ", rank, ": stepped ", stepped[0], stepped[1],
             stepped[2], ", expected 1 0 1");
    // 2^16, then a back-off to 2^15, then one clean step (growth_interval 2: no growth yet).
    MT_CHECK(scaler.get_scale() == 32768.0f && scaler.growth_tracker() == 1, "rank ", rank, ": scale ",
             scaler.get_scale(), ", growth tracker ", scaler.growth_tracker());
  }
  return alike;
}

}  // namespace

TEST_CASE("DDP: with the found-inf flag shared, an inf on one rank makes every rank skip and back off alike, "
          "under plain DDP, ZeRO-2 and ZeRO-3" * doctest::skip(kNoBackend)) {
  for (int world : {2, 3}) {
    for (int zero_stage : {0, 2, 3}) {
      INFO(world, " ranks, ZeRO stage ", zero_stage, " (0: plain DDP)");
      const int port = find_free_port();
      test::run_ranks(world, [&](int rank) {
        MT_CHECK(run_with_an_inf_on_rank_1(rank, world, port, true, zero_stage), "rank ", rank,
                 ": the ranks' parameters differ");
      });
    }
  }
}

TEST_CASE("DDP: without the shared flag, the same inf parts the ranks" * doctest::skip(kNoBackend)) {
  // The counterpart of the case above, so that it is known to fail when the flag is not shared.
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    MT_CHECK(!run_with_an_inf_on_rank_1(rank, 2, port, false, 0), "rank ", rank,
             ": the ranks stayed alike although only rank 1 skipped");
  });
}
