// DDP's buffer broadcast (Note [Buffer broadcast] in distributed/ddp/buffer_sync.cpp): two real ranks
// (Gloo over loopback, or MPI under mpirun: Note [Tests under mpirun] in multiprocess.h) train a
// Linear → BatchNorm1d model on different data. With broadcast_buffers (the default) every training
// forward starts from rank 0's running statistics, bit for bit; with it off they drift apart; a rank
// that ran out of data (Join) still takes part in the broadcasts.
#include <doctest/doctest.h>

#include <cstring>

#include "distributed/ddp/ddp.h"
#include "distributed/ddp/ddp_join.h"
#include "distributed/store/tcp_store.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "optim/sgd.h"
#include "tensor/generator.h"

using namespace mt;
using namespace mt::dist;

namespace {

const bool kNoBackend = !test::group_backend_available();

// Linear(4 → 3) → BatchNorm1d(3). forward records the BatchNorm's buffers as they are when the
// forward starts, i.e. after DDP's broadcast and before this batch updates them.
struct ProbedNet : nn::Module {
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::BatchNorm1d> bn;
  NamedTensors seen;  // running_mean, running_var, num_batches_tracked at the start of the last forward

  explicit ProbedNet(uint64_t seed) {
    manual_seed(seed);
    fc = register_module("fc", std::make_shared<nn::Linear>(4, 3));
    bn = register_module("bn", std::make_shared<nn::BatchNorm1d>(3));
  }
  Tensor forward(const Tensor& x) override {
    seen.clear();
    for (const auto& [name, b] : bn->named_buffers()) seen.emplace_back(name, b.clone());
    return bn->forward(fc->forward(x));
  }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor u = a.contiguous(), v = b.contiguous();
  return u.dtype() == v.dtype() && u.sizes() == v.sizes() &&
         std::memcmp(u.raw_data(), v.raw_data(), static_cast<size_t>(u.numel()) * element_size(u.dtype())) == 0;
}

// For each tensor: whether every rank's copy is bit for bit rank 0's (an allgather per tensor).
std::vector<bool> equal_to_rank0(ProcessGroup& pg, const NamedTensors& tensors) {
  std::vector<bool> out;
  for (const auto& [name, t] : tensors) {
    std::vector<Tensor> all;
    pg.allgather(all, t)->wait();
    bool same = true;
    for (const Tensor& theirs : all) same = same && same_bits(theirs, all[0]);
    out.push_back(same);
  }
  return out;
}

// One SGD step of `ddp` on this rank's own batch (different on each rank: seed 100 + rank + 10·step).
void train_step(DistributedDataParallel& ddp, optim::SGD& opt, int rank, int step) {
  Generator gen(static_cast<uint64_t>(100 + rank + 10 * step));
  const Tensor x = randn({8, 4}, gen).mul_(static_cast<float>(1 + rank));  // rank 1's batch: twice the spread
  const Tensor y = randn({8, 3}, gen);
  ddp.zero_grad();
  nn::F::mse_loss(ddp.forward(x), y).backward();
  opt.step();
}

}  // namespace

TEST_CASE("DDP: with broadcast_buffers every training forward starts from rank 0's BatchNorm buffers" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    auto model = std::make_shared<ProbedNet>(rank + 1);
    auto pg = test::join_group(rank, 2, port);
    DistributedDataParallel ddp(model, pg);  // broadcast_buffers: on by default
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    NamedTensors rank0_after;  // rank 0's buffers after the previous step
    for (int step = 0; step < 4; ++step) {
      train_step(ddp, opt, rank, step);
      for (bool same : equal_to_rank0(*pg, model->seen))
        MT_CHECK(same, "step ", step, ": a forward started from buffers that are not rank 0's");
      if (!rank0_after.empty())
        for (size_t i = 0; i < rank0_after.size(); ++i) {
          std::vector<Tensor> all;
          pg->allgather(all, rank0_after[i].second)->wait();
          MT_CHECK(same_bits(model->seen[i].second, all[0]), "step ", step, ": ", rank0_after[i].first,
                   " at the start of the forward is not what rank 0 held after the previous step");
        }
      // Each rank's forward moved the statistics with its own batch: they differ now (which is why
      // the broadcast is needed), except the step counter.
      const std::vector<bool> after = equal_to_rank0(*pg, model->bn->named_buffers());
      MT_CHECK(!after[0] && !after[1] && after[2], "step ", step, ": after the forward, the ranks' running "
               "statistics should differ (their batches do) and num_batches_tracked agree");
      rank0_after.clear();
      for (const auto& [name, b] : model->bn->named_buffers()) rank0_after.emplace_back(name, b.clone());
    }
    MT_CHECK(model->bn->num_batches_tracked.to_vector<int64_t>()[0] == 4, "four training forwards");
  });
}

TEST_CASE("DDP: with broadcast_buffers off the ranks' BatchNorm statistics drift apart" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    auto model = std::make_shared<ProbedNet>(rank + 1);
    auto pg = test::join_group(rank, 2, port);
    DistributedDataParallel ddp(model, pg, {.broadcast_buffers = false});
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    for (int step = 0; step < 3; ++step) {
      train_step(ddp, opt, rank, step);
      const std::vector<bool> same = equal_to_rank0(*pg, model->seen);
      // Step 0 starts from the initial buffers (zeros, ones, 0) on both ranks; later ones from each
      // rank's own history.
      MT_CHECK(same[0] == (step == 0) && same[1] == (step == 0) && same[2],
               "step ", step, ": without the broadcast each rank keeps its own running statistics");
    }
  });
}

TEST_CASE("DDP: a rank that joined takes part in the buffer broadcasts of the others' steps" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    auto model = std::make_shared<ProbedNet>(1);
    auto pg = test::join_group(rank, 2, port);
    DistributedDataParallel ddp(model, pg);
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    Join join(ddp, {.step = [&] { opt.step(); }});
    const int batches = rank == 0 ? 1 : 3;  // rank 0 joins first: it is still the broadcast's source
    for (int step = 0; step < batches; ++step) {
      join.step();
      train_step(ddp, opt, rank, step);
    }
    join.join();
    // Rank 1's last forward started from rank 0's buffers (those after rank 0's only step).
    std::vector<Tensor> all;
    const Tensor mean = rank == 0 ? model->bn->running_mean.clone() : model->seen[0].second;
    pg->allgather(all, mean)->wait();
    MT_CHECK(same_bits(all[0], all[1]), "rank 1's forwards after rank 0 joined must start from rank 0's buffers");
    ddp.check_replicas("after join");
  });
}
