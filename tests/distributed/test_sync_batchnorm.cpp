// SyncBatchNorm and convert_sync_batchnorm (distributed/ddp/sync_batchnorm.h, Note [Sync batch norm] in
// nn/batchnorm.cpp): N real ranks (Gloo over loopback, or MPI under mpirun: Note [Tests under
// mpirun] in multiprocess.h), each with batch b, give the same outputs, input gradients, parameter
// gradients (summed over the ranks) and running statistics as one BatchNorm in one process on the
// combined batch N·b, in float64; and DDP training a converted model matches one process.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "autograd/ops.h"
#include "distributed/ddp/ddp.h"
#include "distributed/store/tcp_store.h"
#include "distributed/ddp/sync_batchnorm.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "optim/sgd.h"
#include "tensor/generator.h"

using namespace mt;
using namespace mt::dist;

namespace {

const bool kNoBackend = !test::group_backend_available();

constexpr int64_t kB = 4, kC = 3, kL = 5;  // per-rank batch, channels, length: inputs (b, C, L)

// The combined batch, the same on every rank: x (world·b, C, L) float64 with a per-channel offset,
// the upstream gradient g like it (the loss is Σ y·g), and the affine parameters (C).
struct Data {
  Tensor x, g, weight, bias;
};
Data make_data(int world) {
  Generator gen(7);
  const TensorOptions f64{.dtype = kFloat64};
  Tensor x = randn({world * kB, kC, kL}, gen, f64) * 2.0 + randn({1, kC, 1}, gen, f64);
  return {x, randn({world * kB, kC, kL}, gen, f64), randn({kC}, gen, f64), randn({kC}, gen, f64)};
}

template <typename BN>
void set_affine(BN& bn, const Data& d) {
  bn.to(kFloat64);
  bn.weight.detach().copy_(d.weight);
  bn.bias.detach().copy_(d.bias);
}

void check_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  const std::vector<double> u = got.contiguous().to_vector<double>(), v = want.contiguous().to_vector<double>();
  MT_CHECK(u.size() == v.size(), what, ": ", u.size(), " values, expected ", v.size());
  for (size_t i = 0; i < u.size(); ++i)
    MT_CHECK(std::abs(u[i] - v[i]) <= tol * (1 + std::abs(v[i])), what, "[", i, "] is ", u[i], ", expected ", v[i]);
}

}  // namespace

TEST_CASE("DDP: SyncBatchNorm over N ranks with batch b equals BatchNorm on batch N·b in one process" *
          doctest::skip(kNoBackend)) {
  for (const auto& [world, converted] : {std::pair{2, false}, std::pair{3, false}, std::pair{2, true}}) {
    CAPTURE(world);
    CAPTURE(converted);
    const Data d = make_data(world);
    // The reference: one process, the whole batch, two training forwards (running statistics move
    // twice), backward of the second, then an eval forward.
    nn::BatchNorm1d ref(kC);
    set_affine(ref, d);
    const Tensor xr = d.x.clone().requires_grad_();
    ref.forward(d.x);
    const Tensor yr = ref.forward(xr);
    sum(yr * d.g).backward();
    ref.eval();
    const Tensor yr_eval = ref.forward(d.x);

    const int port = find_free_port();
    test::run_ranks(world, [&](int rank) {
      auto pg = test::join_group(rank, world, port);
      std::shared_ptr<nn::BatchNorm> made;
      if (converted) {  // a BatchNorm1d inside a model, switched by convert_sync_batchnorm
        auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::BatchNorm1d>(kC));
        MT_CHECK(convert_sync_batchnorm(*model, pg) == 1, "one BatchNorm converted");
        made = std::dynamic_pointer_cast<nn::BatchNorm>(model->children()[0]);
      } else {
        made = std::make_shared<SyncBatchNorm>(kC, pg);
      }
      nn::BatchNorm& bn = *made;
      set_affine(bn, d);
      const Tensor mine = d.x.narrow(0, rank * kB, kB).clone();
      const Tensor x = mine.clone().requires_grad_();
      bn.forward(mine);
      const Tensor y = bn.forward(x);
      sum(y * d.g.narrow(0, rank * kB, kB)).backward();
      const std::string r = "rank " + std::to_string(rank) + ": ";
      check_close(y, yr.narrow(0, rank * kB, kB), 1e-12, r + "output");
      check_close(x.grad(), xr.grad().narrow(0, rank * kB, kB), 1e-10, r + "input gradient");
      for (const auto& [name, p] : bn.named_parameters()) {
        Tensor total = p.grad().clone();  // this rank's share of Σ_ranks loss
        pg->allreduce(total, ReduceOp::Sum)->wait();
        const Tensor want = name == "weight" ? ref.weight.grad() : ref.bias.grad();
        check_close(total, want, 1e-10, r + name + " gradient summed over the ranks");
      }
      check_close(bn.running_mean, ref.running_mean, 1e-12, r + "running_mean");
      check_close(bn.running_var, ref.running_var, 1e-12, r + "running_var");
      MT_CHECK(bn.num_batches_tracked.item() == 2, r, "num_batches_tracked is ", bn.num_batches_tracked.item());
      bn.eval();
      check_close(bn.forward(mine), yr_eval.narrow(0, rank * kB, kB), 1e-12, r + "eval output");
    });
  }
}

TEST_CASE("DDP: SyncBatchNorm merges the ranks' Welford statistics: float32 data of mean 1000 and std 0.04" *
          doctest::skip(kNoBackend)) {
  // Two ranks with batches of 3 and 5 rows (x: (8, C, L) float32), rank 1's rows shifted by 0.05:
  // the merge must weight each rank by its count and add the spread between the ranks' means.
  constexpr int64_t kRows[] = {3, 5};
  Generator gen(11);
  const Tensor shift = from_vector(std::vector<float>{0, 0, 0, 0.05f, 0.05f, 0.05f, 0.05f, 0.05f}, {8, 1, 1});
  const Tensor x = randn({8, kC, kL}, gen) * 0.03 + 1000.0 + shift;
  // The float64 reference over the whole batch (momentum 1: the running statistics are the batch's).
  const Tensor x64 = x.to(kFloat64);
  const Tensor mean = x64.mean({0, 2}, true);                      // (1, C, 1)
  const Tensor var = ((x64 - mean) * (x64 - mean)).mean({0, 2}, true);  // (1, C, 1), biased
  const double n = 8 * kL, eps = 1e-5;
  const Tensor y_ref = (x64 - mean) / sqrt(var + eps);
  // The data is hard: Σx²/n − mean² in float32 is off by more than the variance itself.
  const Tensor naive = (x * x).mean({0, 2}) - x.mean({0, 2}) * x.mean({0, 2});
  const std::vector<double> naive_v = naive.to_vector<double>(), var_v = var.to_vector<double>();
  for (size_t c = 0; c < var_v.size(); ++c) CHECK(std::abs(naive_v[c] - var_v[c]) > var_v[c]);

  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    SyncBatchNorm bn(kC, test::join_group(rank, 2, port), {.eps = eps, .momentum = 1.0});
    const Tensor mine = x.narrow(0, rank == 0 ? 0 : kRows[0], kRows[rank]);
    const std::string r = "rank " + std::to_string(rank) + ": ";
    const Tensor y = bn.forward(mine);
    check_close(y, y_ref.narrow(0, rank == 0 ? 0 : kRows[0], kRows[rank]), 1e-2, r + "output");
    check_close(bn.running_mean, mean.view({kC}), 1e-6, r + "running_mean");
    check_close(bn.running_var / (var.view({kC}) * (n / (n - 1))), ones({kC}, {.dtype = kFloat64}), 1e-3,
                r + "running_var relative to the float64 one");
  });
}

TEST_CASE("DDP: SyncBatchNorm rejects a wrong channel count, naming the layer and both shapes" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    SyncBatchNorm bn(kC, test::join_group(rank, 2, port));
    try {
      bn.forward(zeros({kB, kC + 1, kL}));
    } catch (const Error& e) {
      const std::string m = e.what();
      MT_CHECK(m.find("SyncBatchNorm") != std::string::npos && m.find("(N, 3, ...)") != std::string::npos &&
                   m.find("[4, 4, 5]") != std::string::npos,
               "unexpected message: ", m);
      return;
    }
    MT_FAIL("a (4, 4, 5) input to SyncBatchNorm(3) was accepted");
  });
}

TEST_CASE("DDP: a model converted with convert_sync_batchnorm trains under DDP like one process on the whole batch" *
          doctest::skip(kNoBackend)) {
  // Linear(3 → 3) → BatchNorm1d(3) → Linear(3 → 2), float64; rank r trains on rows [r·b, (r+1)·b).
  // The per-rank losses are means over b rows and DDP averages, so the reference trains on the mean
  // over all 2·b rows. The sync all-reduces run inside backward, between DDP's bucket all-reduces.
  const auto make_model = [] {
    manual_seed(3);
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(kC, kC), std::make_shared<nn::BatchNorm1d>(kC),
                                                  std::make_shared<nn::Linear>(kC, 2));
    model->to(kFloat64);
    return model;
  };
  Generator gen(11);
  const Tensor x = randn({2 * kB, kC}, gen, {.dtype = kFloat64}), y = randn({2 * kB, 2}, gen, {.dtype = kFloat64});
  auto ref = make_model();
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.1});
  for (int step = 0; step < 3; ++step) {
    ref_opt.zero_grad();
    nn::F::mse_loss(ref->forward(x), y).backward();
    ref_opt.step();
  }
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    auto pg = test::join_group(rank, 2, port);
    auto model = make_model();
    MT_CHECK(convert_sync_batchnorm(*model, pg) == 1, "one BatchNorm converted");
    DistributedDataParallel ddp(model, pg, {.bucket_cap_mb = 1e-4, .first_bucket_cap_mb = 1e-4});  // several buckets
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    for (int step = 0; step < 3; ++step) {
      ddp.zero_grad();
      nn::F::mse_loss(ddp.forward(x.narrow(0, rank * kB, kB)), y.narrow(0, rank * kB, kB)).backward();
      opt.step();
    }
    const NamedTensors got = model->state_dict(), want = ref->state_dict();
    for (size_t i = 0; i < want.size(); ++i)
      check_close(got[i].second.to(kFloat64), want[i].second.to(kFloat64), 1e-10,
                  "rank " + std::to_string(rank) + ": " + want[i].first);
  });
}
