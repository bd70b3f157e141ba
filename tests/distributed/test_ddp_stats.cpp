// DDPStats (distributed/ddp/ddp_stats.h) on two real ranks (Gloo, or MPI under mpirun): each bucket's
// timeline is ordered and its exposed times add up to finalize's wait (Note [Overlap]); a bucket that
// completes while backward still computes counts as hidden; the rank that is late is named
// (Note [Straggler attribution]); what was launched before the last gradient; and --ddp-stats' lines.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "distributed/ddp/ddp.h"
#include "distributed/store/tcp_store.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "tensor/generator.h"

using namespace mt;
using namespace mt::dist;
using namespace std::chrono_literals;

namespace {

const bool kNoBackend = !test::group_backend_available();

// A 6-16-16-3 MLP whose six parameters fall into 4 buckets under a 300-byte cap:
// [4.bias, 4.weight, 2.bias], [2.weight], [0.bias], [0.weight].
std::shared_ptr<nn::Sequential> make_mlp() {
  manual_seed(1);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(16, 3));
}
constexpr DDPOptions kFourBuckets{.bucket_cap_mb = 300.0 / (1024 * 1024), .first_bucket_cap_mb = 300.0 / (1024 * 1024)};

}  // namespace

TEST_CASE("DDP: stats give each bucket's ready, launch, done and exposed time, and name the late rank" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    auto model = make_mlp();
    DistributedDataParallel ddp(model, test::join_group(rank, 2, port), kFourBuckets);
    MT_CHECK(ddp.stats().bucket_times.size() == 4, "expected 4 buckets, got ", ddp.stats().bucket_times.size());
    // 0.bias's hook sleeps 20 ms: buckets 0 and 1, launched before it, can complete meanwhile and
    // are seen complete at the next hook or when finalize begins (Note [Progress]).
    model->named_parameters()[1].second.register_post_accumulate_grad_hook(
        [](const Tensor&) { std::this_thread::sleep_for(20ms); });
    Generator gen(10 + rank);
    const Tensor x = randn({4, 6}, gen), y = randn({4, 3}, gen);
    const int steps = 3;
    for (int step = 0; step < steps; ++step) {
      ddp.zero_grad();
      const Tensor loss = nn::F::mse_loss(ddp.forward(x), y);
      if (rank == 1) std::this_thread::sleep_for(30ms);  // rank 1's gradients arrive 30 ms late
      loss.backward();
    }
    const DDPStats& s = ddp.stats();
    MT_CHECK(s.timed_backwards == steps, "timed backwards: ", s.timed_backwards);
    double exposed = 0;
    int64_t hidden_bytes = 0;
    for (size_t b = 0; b < 4; ++b) {
      const DDPBucketTimes& t = s.bucket_times[b];
      MT_CHECK(t.ready <= t.launched && t.launched <= t.done, "bucket ", b, ": ready ", t.ready, ", launched ",
               t.launched, ", done ", t.done, " out of order");
      if (b > 0) MT_CHECK(s.bucket_times[b - 1].launched <= t.launched, "bucket ", b, " launched before ", b - 1);
      exposed += t.exposed;
      hidden_bytes += t.hidden * s.bucket_bytes[b];
    }
    MT_CHECK(exposed <= s.finalize_wait_seconds + 1e-9, "exposed ", exposed, " > finalize wait ",
             s.finalize_wait_seconds);
    MT_CHECK(hidden_bytes == s.hidden_bytes, "hidden bytes ", s.hidden_bytes, ", buckets say ", hidden_bytes);
    // Launched before the last gradient arrived: buckets 0 and 1, and bucket 2 ([0.bias]) when its
    // gradient comes before 0.weight's, the last bucket's; the last bucket never.
    const bool bias_first = s.bucket_times[2].ready < s.bucket_times[3].ready;
    const int64_t early = s.bucket_bytes[0] + s.bucket_bytes[1] + (bias_first ? s.bucket_bytes[2] : 0);
    MT_CHECK(s.launched_early_bytes == early * steps, "launched early: ", s.launched_early_bytes, " bytes, expected ",
             early * steps);
    // Rank 1, the late one, launches what rank 0 has launched long before: its buckets 0 and 1
    // complete during its 20 ms sleep. Rank 0's wait for rank 1, so they need not.
    if (rank == 1) {
      MT_CHECK(s.bucket_times[0].hidden == steps && s.bucket_times[1].hidden == steps,
               "buckets 0 and 1 had 20 ms to complete during backward, hidden in ", s.bucket_times[0].hidden,
               " and ", s.bucket_times[1].hidden, " of ", steps, " backwards");
      MT_CHECK(s.overlap_fraction() > 0 && s.overlap_fraction() <= 1, "overlap ", s.overlap_fraction());
    }

    const std::vector<BucketArrival> arrivals = ddp.bucket_arrivals();  // a collective
    MT_CHECK(arrivals.size() == 4, "one arrival per bucket, got ", arrivals.size());
    for (size_t b = 0; b < 4; ++b)
      MT_CHECK(arrivals[b].last_rank == 1 && arrivals[b].lateness_seconds > 0.015 &&
                   arrivals[b].lateness_seconds < 0.5,
               "bucket ", b, ": expected rank 1 about 30 ms late, got rank ", arrivals[b].last_rank, " ",
               arrivals[b].lateness_seconds * 1e3, " ms");
    const std::string text = describe_ddp_stats(s, arrivals);
    MT_CHECK(text.find("DDP: 4 buckets, ") == 0 && text.find("DDP: bucket 3 (384 bytes, 1 parameters)") !=
                 std::string::npos && text.find("last gradient from rank 1") != std::string::npos,
             "unexpected --ddp-stats text:\n", text);
  });
}
