// DDP comm hooks (distributed/ddp/comm_hook.h): the fp16-compression hook leaves exactly the rounded
// average it promises (on Gloo, and on MPI when run under mpirun: its name starts with "DDP: "), a user's hook sees every bucket once per step in launch order, and hooks are
// registered before the first backward or not at all.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>

#include "autograd/ops.h"
#include "distributed/ddp/ddp.h"
#include "distributed/process_group/process_group_local.h"
#include "distributed/store/tcp_store.h"
#include "multiprocess.h"
#include "nn/nn.h"
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

}  // namespace

TEST_CASE("DDP: the fp16 comm hook leaves the float16-rounded average of the ranks' gradients" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    auto model = make_linear();
    DistributedDataParallel ddp(model, test::join_group(rank, 2, port));
    ddp.register_comm_hook(std::make_shared<Fp16CompressHook>());
    CHECK(ddp.stats().comm_hook == "fp16");
    ddp.forward(input_of(rank)).pow(2).mean().backward();

    // Note [fp16 compression]: each rank divides by 2 in float32, rounds to half; Gloo sums the two
    // halves in float32 and rounds once more; the result is cast back to float32 exactly.
    const auto g0 = local_gradients(0), g1 = local_gradients(1);
    const NamedTensors params = model->named_parameters();
    bool differs_from_fp32 = false;
    for (size_t i = 0; i < params.size(); ++i) {
      const std::vector<float> got = params[i].second.grad().to_vector<float>();
      for (size_t k = 0; k < got.size(); ++k) {
        const float want = to_half_and_back(to_half_and_back(g0[i][k] / 2) + to_half_and_back(g1[i][k] / 2));
        MT_CHECK(got[k] == want, params[i].first, "[", k, "] is ", got[k], ", expected ", want);
        const float exact = (g0[i][k] + g1[i][k]) / 2;
        MT_CHECK(std::abs(got[k] - exact) <= std::abs(exact) * 2e-3f + 1e-6f, "too far from ", exact);
        differs_from_fp32 |= got[k] != exact;
      }
    }
    MT_CHECK(differs_from_fp32, "no gradient was rounded: the hook did not compress");
  });
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
  CHECK_THROWS_WITH_AS(make_comm_hook("powersgd"), doctest::Contains("unknown DDP comm hook 'powersgd'"), Error);
}
