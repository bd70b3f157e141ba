// DDP comm hooks (distributed/ddp/comm_hook.h): the fp16- and bf16-compression hooks leave exactly
// the rounded average they promise (on Gloo, and on MPI when run under mpirun: their names start with
// "DDP: "), a user's hook sees every bucket once per step in launch order, hooks are registered
// before the first backward or not at all, and ZeRO refuses to share DDP with another hook.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <string>

#include "autograd/ops.h"
#include "distributed/ddp/ddp.h"
#include "distributed/process_group/process_group_local.h"
#include "distributed/store/tcp_store.h"
#include "distributed/zero/zero.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "optim/sgd.h"
#include "tensor/generator.h"
#include "tensor/half.h"

using namespace mt;
using namespace mt::dist;
using namespace std::chrono_literals;

namespace {

const bool kNoBackend = !test::group_backend_available();  // Gloo, or MPI under mpirun

std::shared_ptr<nn::Linear> make_linear() {
  manual_seed(3);
  return std::make_shared<nn::Linear>(5, 4);
}

// This rank's examples: rank r has its own inputs, so the ranks' gradients differ.
Tensor input_of(int rank) {
  Generator gen(100 + rank);
  return mul(randn({8, 5}, gen), 3.0);
}

// The gradients one rank computes on its own, without DDP: name -> flat float values.
std::vector<std::vector<float>> local_gradients(int rank) {
  auto model = make_linear();
  model->forward(input_of(rank)).pow(2).mean().backward();
  std::vector<std::vector<float>> grads;
  for (const auto& [name, p] : model->named_parameters()) grads.push_back(p.grad().to_vector<float>());
  return grads;
}

float to_half_and_back(float x) { return half_to_float(float_to_half(x)); }
float to_bf16_and_back(float x) { return bfloat16_to_float(float_to_bfloat16(x)); }

// A compression hook, and the 16-bit format it rounds through.
struct Compression {
  std::string hook;          // make_comm_hook's name
  float (*round)(float);     // float32 -> the 16-bit format -> float32
  float unit;                // the largest relative error of one rounding: 2^-11 (float16), 2^-8 (bfloat16)
  float subnormal_error;     // and the largest absolute one, below the format's normal range
};

// Note [fp16 compression] and Note [bf16 compression]: each rank divides its gradient by 2 in
// float32 and rounds it to the 16-bit format; the backend sums the two halves in float32 and rounds
// once more; the result is cast back to float32 exactly. So every gradient is that value bit for
// bit, a 16-bit number, and within three roundings of the float32 mean: the two halves, then their
// sum.
void check_rounded_average(const Compression& c) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    auto model = make_linear();
    DistributedDataParallel ddp(model, test::join_group(rank, 2, port));
    ddp.register_comm_hook(make_comm_hook(c.hook));
    MT_CHECK(ddp.stats().comm_hook == c.hook, "comm_hook is ", ddp.stats().comm_hook, ", not ", c.hook);
    ddp.forward(input_of(rank)).pow(2).mean().backward();

    const auto g0 = local_gradients(0), g1 = local_gradients(1);
    const NamedTensors params = model->named_parameters();
    bool differs_from_fp32 = false;
    for (size_t i = 0; i < params.size(); ++i) {
      const std::vector<float> got = params[i].second.grad().to_vector<float>();
      for (size_t k = 0; k < got.size(); ++k) {
        const float half0 = g0[i][k] / 2, half1 = g1[i][k] / 2;
        const float want = c.round(c.round(half0) + c.round(half1));
        MT_CHECK(got[k] == want, params[i].first, "[", k, "] is ", got[k], ", expected ", want);
        MT_CHECK(got[k] == c.round(got[k]), params[i].first, "[", k, "] = ", got[k], " is not a ", c.hook, " value");
        const float exact = (g0[i][k] + g1[i][k]) / 2;
        const float bound = c.unit * (std::abs(half0) + std::abs(half1) + std::abs(got[k])) + 3 * c.subnormal_error;
        MT_CHECK(std::abs(got[k] - exact) <= bound, params[i].first, "[", k, "] = ", got[k],
                 " is more than three roundings from the float32 mean ", exact);
        differs_from_fp32 |= got[k] != exact;
      }
    }
    MT_CHECK(differs_from_fp32, "no gradient was rounded: the hook did not compress");
  });
}

}  // namespace

TEST_CASE("DDP: the fp16 comm hook leaves the float16-rounded average of the ranks' gradients" *
          doctest::skip(kNoBackend)) {
  // float16 has 11 significant bits; below 2^-14 its steps are 2^-24, so a rounding errs by 2^-25.
  check_rounded_average({.hook = "fp16", .round = to_half_and_back, .unit = 0x1p-11f, .subnormal_error = 0x1p-25f});
}

TEST_CASE("DDP: the bf16 comm hook leaves the bfloat16-rounded average of the ranks' gradients" *
          doctest::skip(kNoBackend)) {
  // bfloat16 has 8 significant bits and float32's exponent range.
  check_rounded_average({.hook = "bf16", .round = to_bf16_and_back, .unit = 0x1p-8f, .subnormal_error = 0});
}

TEST_CASE("DDP: bfloat16 collectives: all-reduce (Sum, Avg, Max, small and large), reduce-scatter, allgather, "
          "broadcast" * doctest::skip(kNoBackend)) {
  // The values are small integers, so every pairwise sum is exact in bfloat16 (integers up to 256)
  // and the expected results are closed forms, whatever order a backend adds in.
  for (int world : {2, 3}) {
    const int port = find_free_port();
    test::run_ranks(world, [&](int rank) {
      auto pg = test::join_group(rank, world, port);
      const int n = world;
      auto all_equal = [](const Tensor& t, float want, const char* what) {
        MT_CHECK(t.dtype() == kBFloat16, what, " changed the dtype to ", t.dtype());
        for (float x : t.to_vector<float>()) MT_CHECK(x == want, what, " gave ", x, ", expected ", want);
      };
      Tensor t = full({5}, rank + 1.0).to(kBFloat16);
      pg->allreduce(t, ReduceOp::Sum)->wait();
      all_equal(t, n * (n + 1) / 2.0f, "Sum");
      t = full({5}, rank + 1.0).to(kBFloat16);
      pg->allreduce(t, ReduceOp::Avg)->wait();
      all_equal(t, (n + 1) / 2.0f, "Avg");
      t = full({5}, rank + 1.0).to(kBFloat16);
      pg->allreduce(t, ReduceOp::Max)->wait();
      all_equal(t, static_cast<float>(n), "Max");

      // 300 KB: past Gloo's gather-and-add size, so its halving-doubling runs on bfloat16 too.
      const int64_t big = 150000;
      std::vector<float> mine(big), want(big);
      for (int64_t i = 0; i < big; ++i) {
        mine[i] = static_cast<float>(i % 16 + rank);
        want[i] = static_cast<float>(n * (i % 16) + n * (n - 1) / 2);
      }
      Tensor large = from_vector(mine, {big}).to(kBFloat16);
      pg->allreduce(large, ReduceOp::Sum)->wait();
      MT_CHECK(large.to_vector<float>() == want, "the large bfloat16 Sum differs");

      Tensor shards = full({3 * n}, rank + 1.0).to(kBFloat16), own = zeros({3}, {.dtype = kBFloat16});
      pg->reduce_scatter(own, shards, ReduceOp::Sum)->wait();
      all_equal(own, n * (n + 1) / 2.0f, "reduce_scatter");
      Tensor gathered = zeros({2 * n}, {.dtype = kBFloat16});
      pg->allgather_into(gathered, full({2}, rank + 0.5).to(kBFloat16))->wait();
      const std::vector<float> g = gathered.to_vector<float>();
      for (int r = 0; r < n; ++r) MT_CHECK(g[2 * r] == r + 0.5f && g[2 * r + 1] == r + 0.5f, "allgather_into slot ", r);
      Tensor b = full({4}, rank == 1 ? 3.25 : 0.0).to(kBFloat16);
      pg->broadcast(b, 1)->wait();
      all_equal(b, 3.25f, "broadcast");
    });
  }
}

namespace {

// A group that only says it has 13 ranks: the bf16 hook must refuse it before any collective.
class ThirteenRanks : public ProcessGroup {
 public:
  ThirteenRanks() : ProcessGroup(0, 13, std::chrono::seconds(1)) {}
  std::string backend() const override { return "none"; }

 protected:
  std::shared_ptr<Work> run_allreduce(Tensor&, ReduceOp, const std::string&) override { MT_FAIL("no collectives"); }
  std::shared_ptr<Work> run_broadcast(Tensor&, int, const std::string&) override { MT_FAIL("no collectives"); }
  std::shared_ptr<Work> run_allgather(std::vector<Tensor>&, const Tensor&, const std::string&) override {
    MT_FAIL("no collectives");
  }
  std::shared_ptr<Work> run_barrier(const std::string&) override { MT_FAIL("no collectives"); }
  std::shared_ptr<Work> run_reduce_scatter(Tensor&, const Tensor&, ReduceOp, const std::string&) override {
    MT_FAIL("no collectives");
  }
  std::shared_ptr<Work> run_allgather_into(Tensor&, const Tensor&, const std::string&) override {
    MT_FAIL("no collectives");
  }
};

}  // namespace

TEST_CASE("comm hook: the bf16 hook refuses more ranks than its desync guard stays exact for") {
  ThirteenRanks pg;
  GradBucket bucket{.index = 0, .buffer = zeros({16})};
  Bf16CompressHook bf16;
  CHECK_THROWS_WITH_AS(bf16.launch(pg, bucket), doctest::Contains("bf16 comm hook: 13 ranks is more than the 12"),
                       Error);
}

TEST_CASE("comm hook: ZeRO and a compression hook refuse to share a DDP model, in either order") {
  auto model = make_linear();
  auto ddp = std::make_shared<DistributedDataParallel>(model, std::make_shared<ProcessGroupLocal>());
  ddp->register_comm_hook(std::make_shared<Bf16CompressHook>());
  CHECK_THROWS_WITH_AS(ZeroRedundancyOptimizer(ddp, std::make_unique<optim::SGD>(model->parameters(),
                                                                                optim::SGDOptions{.lr = 0.1})),
                       doctest::Contains("has the 'bf16' comm hook; ZeRO reduce-scatters"), Error);

  auto ddp2 = std::make_shared<DistributedDataParallel>(model, std::make_shared<ProcessGroupLocal>());
  ZeroRedundancyOptimizer zero(ddp2, std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1}));
  CHECK_THROWS_WITH_AS(ddp2->register_comm_hook(std::make_shared<Bf16CompressHook>()),
                       doctest::Contains("already has the 'zero' hook"), Error);
}

namespace {

// A user's hook: the default all-reduce, recording which buckets it saw.
class RecordingHook : public AllreduceHook {
 public:
  std::string name() const override { return "recording"; }
  std::shared_ptr<Work> launch(ProcessGroup& pg, GradBucket& bucket) override {
    launched.push_back(bucket.index);
    return AllreduceHook::launch(pg, bucket);
  }
  void finish(ProcessGroup&, GradBucket& bucket) override { finished.push_back(bucket.index); }
  std::vector<size_t> launched, finished;
};

}  // namespace

TEST_CASE("comm hook: a user's hook sees every bucket once per step, in launch order, then finishes each") {
  manual_seed(5);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 64), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(64, 2));
  const double cap = 300.0 / (1024 * 1024);  // a few hundred bytes: several buckets
  DistributedDataParallel ddp(model, std::make_shared<ProcessGroupLocal>(),
                              {.bucket_cap_mb = cap, .first_bucket_cap_mb = cap});
  auto hook = std::make_shared<RecordingHook>();
  ddp.register_comm_hook(hook);
  const size_t buckets = ddp.stats().bucket_bytes.size();
  REQUIRE(buckets >= 3);
  std::vector<size_t> in_order;
  for (size_t b = 0; b < buckets; ++b) in_order.push_back(b);
  for (int step = 0; step < 2; ++step) {
    ddp.zero_grad();
    ddp.forward(ones({4, 3})).sum().backward();
  }
  std::vector<size_t> twice = in_order;
  twice.insert(twice.end(), in_order.begin(), in_order.end());
  CHECK(hook->launched == twice);
  CHECK(hook->finished == twice);
  CHECK(ddp.stats().comm_hook == "recording");

  CHECK_THROWS_WITH_AS(ddp.register_comm_hook(std::make_shared<Fp16CompressHook>()),
                       doctest::Contains("before the first backward"), Error);
  CHECK_THROWS_WITH_AS(make_comm_hook("powersgd"), doctest::Contains("unknown DDP comm hook 'powersgd' (allreduce, fp16, "
                                                                     "bf16)"), Error);
}
