// Note [Last bucket] (distributed/ddp/reducer.cpp) on a small GPT, whose token embedding (tied to the
// head) and positions get their gradients last: the last bucket holds them and little else, so the
// buckets before it, most of the bytes, are launched while backward still computes; the layout
// changes when gradients are communicated, never what they are (bit for bit at world 2, against
// the layout without the rule and against a single bucket).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

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

// 55,168 bytes of float32 gradients: four blocks of 13,120, the embeddings 2,560, ln_f 128.
constexpr nn::GPTOptions kSmallGPT{.vocab = 32, .context = 8, .dim = 16, .layers = 4, .heads = 2};
constexpr double kBytes = 1.0 / (1024 * 1024);  // one byte, in the MiB of DDPOptions' caps
constexpr double kNoCap = 1024 * 1024;           // 1 TiB: larger than any model here
// The GPT preset's proportions: the caps are about 0.3 of the model, as 1 MiB is of its 3.3 MB.
constexpr DDPOptions kEnds{.bucket_cap_mb = kNoCap, .first_bucket_cap_mb = 16384 * kBytes,
                           .last_bucket_cap_mb = 16384 * kBytes};
constexpr DDPOptions kWithoutLastCap{.bucket_cap_mb = kNoCap, .first_bucket_cap_mb = 16384 * kBytes,
                                     .last_bucket_cap_mb = 0};
constexpr DDPOptions kOneBucket{.bucket_cap_mb = kNoCap, .first_bucket_cap_mb = kNoCap, .last_bucket_cap_mb = 0};

std::shared_ptr<nn::GPT> make_gpt() {
  manual_seed(7);
  return std::make_shared<nn::GPT>(kSmallGPT);
}

struct Tokens {
  Tensor idx, targets;  // (rows, 8) int64
};
Tokens make_tokens(int64_t rows) {
  Generator gen(13);
  const auto draw = [&] { return (rand({rows, 8}, gen) * 31.99).to(kInt64); };
  Tokens t{draw(), draw()};
  return t;
}

Tensor loss_of(nn::Module& model, const Tokens& t) {
  return nn::F::cross_entropy(model.forward(t.idx).reshape({-1, kSmallGPT.vocab}), t.targets.reshape({-1}));
}

int64_t total(const std::vector<int64_t>& bytes) {
  int64_t sum = 0;
  for (int64_t b : bytes) sum += b;
  return sum;
}

bool holds(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Every parameter's .grad, as bits.
std::vector<std::vector<uint32_t>> gradient_bits(const nn::Module& model) {
  std::vector<std::vector<uint32_t>> out;
  for (const auto& [name, p] : model.named_parameters()) {
    const std::vector<float> g = p.grad().to_vector<float>();
    std::vector<uint32_t> bits(g.size());
    std::memcpy(bits.data(), g.data(), g.size() * sizeof(float));
    out.push_back(std::move(bits));
  }
  return out;
}

}  // namespace

TEST_CASE("DDP: the last bucket begins where the last gradients fit its cap, and the bucket before it closes there") {
  auto model = make_gpt();
  DistributedDataParallel ddp(model, std::make_shared<ProcessGroupLocal>(), kEnds);
  const DDPStats& s = ddp.stats();
  REQUIRE(s.bucket_bytes.size() == 3);
  CHECK(s.bucket_parameters[0].front() == "ln_f.bias");  // Note [Buckets]: reverse registration order
  CHECK(s.bucket_bytes[0] <= 16384);
  CHECK(s.bucket_parameters[2].back() == "tok_emb.weight");
  CHECK(holds(s.bucket_parameters[2], "pos_emb.weight"));
  CHECK(s.bucket_bytes[2] <= 16384);
  const Tensor next = ddp.bucket_layout()[1].parameters.back();  // the one before the last bucket's first
  CHECK(s.bucket_bytes[2] + next.numel() * 4 > 16384);
  CHECK(total(s.bucket_bytes) == 55168);

  // Without the cap the layout is the one before the rule: the first bucket, then all the rest.
  auto plain = make_gpt();
  DistributedDataParallel without(plain, std::make_shared<ProcessGroupLocal>(), kWithoutLastCap);
  REQUIRE(without.stats().bucket_bytes.size() == 2);
  CHECK(without.stats().bucket_bytes[0] == s.bucket_bytes[0]);

  // A last slot larger than the cap is the last bucket on its own; a cap of 0 is no cap.
  auto alone = make_gpt();
  DistributedDataParallel tight(alone, std::make_shared<ProcessGroupLocal>(),
                                {.bucket_cap_mb = kNoCap, .first_bucket_cap_mb = kNoCap, .last_bucket_cap_mb = kBytes});
  REQUIRE(tight.stats().bucket_parameters.size() == 2);
  CHECK(tight.stats().bucket_parameters[1] == std::vector<std::string>{"tok_emb.weight"});
  auto off = make_gpt();
  DistributedDataParallel no_cap(off, std::make_shared<ProcessGroupLocal>(),
                                 {.bucket_cap_mb = kNoCap, .first_bucket_cap_mb = kNoCap, .last_bucket_cap_mb = 0});
  CHECK(no_cap.stats().bucket_parameters.size() == 1);
}

// At world 2: with the rule, every bucket but the last is launched before the last gradient
// arrives, and they hold over 60 % of the bytes; without it, under 30 %. Three steps, so the
// rebuild in the observed order (Note [Bucket rebuild]) has run.
TEST_CASE("DDP: with a small last bucket, most of a GPT's bytes are launched before its embedding's gradient "
          "arrives" * doctest::skip(!test::group_backend_available())) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    const Tokens all = make_tokens(4);
    const Tokens mine{all.idx.narrow(0, 2 * rank, 2), all.targets.narrow(0, 2 * rank, 2)};
    const std::shared_ptr<ProcessGroup> pg = test::join_group(rank, 2, port);
    for (const DDPOptions& options : {kEnds, kWithoutLastCap}) {
      auto model = make_gpt();
      DistributedDataParallel ddp(model, pg, options);
      optim::SGD opt(ddp.parameters(), {.lr = 0.5});
      for (int step = 0; step < 3; ++step) {
        opt.zero_grad();
        loss_of(ddp, mine).backward();
        opt.step();
      }
      const DDPStats& s = ddp.stats();
      const size_t last = s.bucket_bytes.size() - 1;
      MT_CHECK(s.timed_backwards > 0, "no timed backward");
      MT_CHECK(holds(s.bucket_parameters[last], "tok_emb.weight") && holds(s.bucket_parameters[last], "pos_emb.weight"),
               "the embeddings should be in the last bucket");
      const int64_t before_last = total(s.bucket_bytes) - s.bucket_bytes[last];
      MT_CHECK(s.launched_early_bytes == before_last * s.timed_backwards, "launched early: ",
               s.launched_early_bytes, " bytes over ", s.timed_backwards, " backwards; the buckets before the last "
               "hold ", before_last);
      for (size_t b = 0; b < last; ++b)
        MT_CHECK(s.bucket_times[b].launched <= s.bucket_times[last].ready, "bucket ", b, " launched after the last "
                 "gradient arrived");
      const double early = s.launched_early_fraction();
      if (options.last_bucket_cap_mb > 0) {
        MT_CHECK(s.bucket_bytes.size() == 3 && early >= 0.6, "with the last bucket capped: ", s.bucket_bytes.size(),
                 " buckets, ", early * 100, " % launched early");
      } else {
        MT_CHECK(s.bucket_bytes.size() == 2 && early < 0.3, "without the cap: ", s.bucket_bytes.size(),
                 " buckets, ", early * 100, " % launched early");
      }
    }
  });
}

TEST_CASE("DDP: the last bucket's cap leaves the reduced gradients bit for bit what they are without it and in "
          "one bucket" * doctest::skip(!test::group_backend_available())) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    const Tokens all = make_tokens(4);
    const Tokens mine{all.idx.narrow(0, 2 * rank, 2), all.targets.narrow(0, 2 * rank, 2)};
    const std::shared_ptr<ProcessGroup> pg = test::join_group(rank, 2, port);
    struct Run {
      std::shared_ptr<nn::GPT> model;
      std::shared_ptr<DistributedDataParallel> ddp;
      std::shared_ptr<optim::SGD> opt;
    };
    std::vector<Run> runs;
    for (const DDPOptions& options : {kEnds, kWithoutLastCap, kOneBucket}) {
      Run r{make_gpt(), nullptr, nullptr};
      r.ddp = std::make_shared<DistributedDataParallel>(r.model, pg, options);
      r.opt = std::make_shared<optim::SGD>(r.ddp->parameters(), optim::SGDOptions{.lr = 0.5});
      runs.push_back(r);
    }
    MT_CHECK(runs[0].ddp->stats().bucket_bytes.size() == 3 && runs[1].ddp->stats().bucket_bytes.size() == 2 &&
                 runs[2].ddp->stats().bucket_bytes.size() == 1,
             "the three layouts should have 3, 2 and 1 buckets");
    for (int step = 0; step < 3; ++step) {  // the second forward rebuilds (Note [Bucket rebuild])
      std::vector<std::vector<std::vector<uint32_t>>> grads;
      for (Run& r : runs) {
        r.opt->zero_grad();
        loss_of(*r.ddp, mine).backward();
        grads.push_back(gradient_bits(*r.model));
        r.opt->step();
      }
      MT_CHECK(grads[0] == grads[1], "step ", step, ": gradients differ from the layout without the last cap");
      MT_CHECK(grads[0] == grads[2], "step ", step, ": gradients differ from one bucket's");
    }
  });
}
