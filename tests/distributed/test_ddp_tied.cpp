// DDP with tied weights: a GPT whose output head is its token embedding (Note [Tied embedding] in
// nn/transformer.h) has one parameter used twice. Its post-accumulate-grad hook must fire once,
// after both contributions, so its bucket is reduced once, with the summed gradient: in a world of
// one, DDP then trains exactly like the plain model, and two ranks on halves of a batch train like
// one process on the whole batch.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"
#include "distributed/ddp/ddp.h"
#include "distributed/process_group/process_group_local.h"
#include "distributed/store/tcp_store.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "optim/sgd.h"
#include "tensor/generator.h"

using namespace mt;
using namespace mt::dist;

namespace {

constexpr nn::GPTOptions kTiny{.vocab = 32, .context = 8, .dim = 16, .layers = 2, .heads = 2};
// Small buckets (4 KiB): the 30 parameters spread over several buckets, the tied one among them.
constexpr DDPOptions kSmallBuckets{.bucket_cap_mb = 4096.0 / (1024 * 1024), .first_bucket_cap_mb = 4096.0 / (1024 * 1024)};

std::shared_ptr<nn::GPT> make_gpt() {
  manual_seed(3);
  return std::make_shared<nn::GPT>(kTiny);
}

struct Tokens {
  Tensor idx, targets;  // (world·b, 8) int64
};
Tokens make_tokens(int64_t rows) {
  Generator gen(9);
  const auto draw = [&] { return (rand({rows, 8}, gen) * 31.99).to(kInt64); };
  Tokens t{draw(), draw()};
  return t;
}

Tensor loss_of(nn::Module& model, const Tensor& idx, const Tensor& targets) {
  return nn::F::cross_entropy(model.forward(idx).reshape({-1, kTiny.vocab}), targets.reshape({-1}));
}

// The plain model, `steps` SGD steps on all rows.
std::shared_ptr<nn::GPT> reference(const Tokens& t, int steps) {
  auto model = make_gpt();
  optim::SGD opt(model->parameters(), {.lr = 0.5});
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    loss_of(*model, t.idx, t.targets).backward();
    opt.step();
  }
  return model;
}

double max_param_diff(const nn::Module& a, const nn::Module& b) {
  const NamedTensors pa = a.named_parameters(), pb = b.named_parameters();
  MT_CHECK(pa.size() == pb.size(), "parameter counts differ");
  double m = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    const std::vector<float> u = pa[i].second.to_vector<float>(), v = pb[i].second.to_vector<float>();
    for (size_t k = 0; k < u.size(); ++k) m = std::max(m, double(std::abs(u[k] - v[k])));
  }
  return m;
}

}  // namespace

TEST_CASE("DDP: a tied weight is reduced once, with both uses' gradients, in a world of one") {
  const Tokens t = make_tokens(4);
  auto model = make_gpt();
  DistributedDataParallel ddp(model, std::make_shared<ProcessGroupLocal>(), kSmallBuckets);
  const auto& buckets = ddp.stats().bucket_parameters;
  REQUIRE(buckets.size() >= 3);
  int listed = 0;
  for (const auto& names : buckets) listed += static_cast<int>(std::count(names.begin(), names.end(), "tok_emb.weight"));
  CHECK(listed == 1);
  int hook_calls = 0;
  model->tok_emb->weight.register_post_accumulate_grad_hook([&](const Tensor&) { ++hook_calls; });
  optim::SGD opt(ddp.parameters(), {.lr = 0.5});
  for (int step = 0; step < 2; ++step) {
    ddp.zero_grad();
    loss_of(ddp, t.idx, t.targets).backward();
    opt.step();
  }
  CHECK(hook_calls == 2);  // once per backward
  CHECK(ddp.stats().allreduces == 2 * static_cast<int64_t>(buckets.size()));
  CHECK(max_param_diff(*model, *reference(t, 2)) == 0.0);
}

TEST_CASE("DDP: two ranks with a tied weight train like one process on the whole batch" *
          doctest::skip(!test::group_backend_available())) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    const Tokens all = make_tokens(4);
    auto model = make_gpt();
    DistributedDataParallel ddp(model, test::join_group(rank, 2, port), kSmallBuckets);
    optim::SGD opt(ddp.parameters(), {.lr = 0.5});
    const Tensor idx = all.idx.narrow(0, 2 * rank, 2), targets = all.targets.narrow(0, 2 * rank, 2);
    for (int step = 0; step < 2; ++step) {
      ddp.zero_grad();
      loss_of(ddp, idx, targets).backward();
      opt.step();
    }
    const double diff = max_param_diff(*model, *reference(all, 2));
    MT_CHECK(diff < 1e-5, "rank ", rank, ": parameters differ from one process's by ", diff);
  });
}
