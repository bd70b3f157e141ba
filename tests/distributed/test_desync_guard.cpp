// The desync guard (Note [Desync guard] in distributed/fault/desync_guard.cpp): it never fires when every
// rank is at the same point, whatever the world size, bucket dtype and comm hook (fp16, bf16: its
// sums must be exact); it fires on every rank alike, naming each rank's point, when the ranks are at different
// steps; and a rank that ran out of batches while its peers all-reduce a bucket is named by every
// rank at once, itself included, instead of getting a wrong sum (Note [Collective guard]).
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "autograd/ops.h"
#include "distributed/ddp/comm_hook.h"
#include "distributed/ddp/ddp.h"
#include "distributed/fault/detail/desync_guard.h"
#include "distributed/process_group/process_group_local.h"
#include "distributed/store/tcp_store.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "optim/sgd.h"
#include "tensor/generator.h"

using namespace mt;
using namespace mt::dist;
using namespace std::chrono_literals;

namespace {

const bool kNoBackend = !test::group_backend_available();

// One bucket's all-reduce as DDP runs it: a few gradients, then the guard, through `hook`.
void guarded_allreduce(ProcessGroup& pg, CommHook& hook, DType dtype, const dist::detail::BucketPoint& point) {
  const int64_t n = point.numel;
  Tensor buffer = zeros({n + dist::detail::DesyncGuard::kElements}, {.dtype = dtype});
  dist::detail::DesyncGuard guard(buffer.narrow(0, n, dist::detail::DesyncGuard::kElements), pg.size(),
                                  hook.wire_dtype(dtype));
  guard.write(point);
  GradBucket bucket{.index = static_cast<size_t>(point.bucket), .buffer = buffer};
  hook.launch(pg, bucket)->wait();
  hook.finish(pg, bucket);
  guard.check(pg, point);
}

}  // namespace

TEST_CASE("DDP: the desync guard's sums are exact: it never fires on ranks at the same point" *
          doctest::skip(kNoBackend)) {
  for (int world = 1; world <= 5; ++world) {
    CAPTURE(world);
    const int port = find_free_port();
    test::run_ranks(world, [&](int rank) {
      auto pg = world == 1 ? std::make_shared<ProcessGroupLocal>() : test::join_group(rank, world, port);
      AllreduceHook plain;
      for (int64_t step = 0; step < 60; ++step) {
        Fp16CompressHook fp16;  // it keeps a half copy per bucket index; these buckets change size
        Bf16CompressHook bf16;
        const dist::detail::BucketPoint point{.step = step, .bucket = step % 3, .buckets = 3, .numel = 5 + step,
                                        .dtype = static_cast<int64_t>(kFloat32)};
        guarded_allreduce(*pg, plain, kFloat32, point);
        guarded_allreduce(*pg, fp16, kFloat32, point);
        guarded_allreduce(*pg, bf16, kFloat32, point);
        guarded_allreduce(*pg, plain, kFloat64, point);
      }
    }, 60s);
  }
}

TEST_CASE("DDP: the desync guard fails every rank at once, naming each rank's step, when they differ" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    auto pg = test::join_group(rank, 2, port);
    AllreduceHook plain;
    // Same bucket, same size: only the step differs, as after a rank that skipped one.
    const dist::detail::BucketPoint point{.step = 7 + rank, .bucket = 0, .buckets = 1, .numel = 4,
                                    .dtype = static_cast<int64_t>(kFloat32)};
    try {
      guarded_allreduce(*pg, plain, kFloat32, point);
    } catch (const Error& e) {
      const std::string message = e.what();
      MT_CHECK(message.find("rank 0: step 7, bucket 0 of 1 (4 float32); rank 1: step 8, bucket 0 of 1") !=
                   std::string::npos, message);
      return;
    }
    MT_FAIL("the guard let ranks at steps 7 and 8 through");
  });
}

// Uneven inputs without a Join (Note [Collective guard]): the last rank has one batch less and goes on
// to its end-of-epoch all-reduce, of 4 floats: with its guard, the same 13 floats on the wire as the
// others' next bucket (4 gradients + 9 guard elements). Every rank fails within seconds, naming that
// rank, and the rank that ran out keeps its own values instead of a wrong sum.
TEST_CASE("DDP: a rank that ran out of batches is named by every rank within seconds, and gets no wrong sum" *
          doctest::skip(kNoBackend)) {
  for (const int world : {2, 4}) {
    CAPTURE(world);
    const int port = find_free_port();
    test::run_ranks(world, [&](int rank) {
      auto pg = test::join_group(rank, world, port);
      manual_seed(3);
      auto model = std::make_shared<nn::Linear>(3, 1);  // 4 gradients + the guard: one bucket of 13 floats
      DistributedDataParallel ddp(model, pg);
      Generator gen(5);
      const Tensor x = randn({4, 3}, gen), y = randn({4, 1}, gen);
      const int last = world - 1;
      const int batches = rank == last ? 2 : 3;
      const std::string named = "rank " + std::to_string(last) + " ran out of batches";
      const auto t0 = std::chrono::steady_clock::now();
      const auto took = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
      try {
        for (int b = 0; b < batches; ++b) {
          ddp.zero_grad();
          nn::F::mse_loss(ddp.forward(x), y).backward();
        }
      } catch (const Error& e) {
        MT_CHECK(rank != last, "rank ", rank, " failed in the loop: ", e.what());
        MT_CHECK(std::string(e.what()).find(named) != std::string::npos, e.what());
        MT_CHECK(took() < 5.0, "the guard took ", took(), " s");
        return;
      }
      MT_CHECK(rank == last, "rank ", rank, "'s third bucket all-reduce went unnoticed");
      Tensor sums = full({4}, 1.0);  // the epoch's sums
      try {
        pg->allreduce(sums)->wait();
      } catch (const Error& e) {
        MT_CHECK(std::string(e.what()).find(named) != std::string::npos, e.what());
        MT_CHECK(took() < 5.0, "the guard took ", took(), " s");
        MT_CHECK(sums.to_vector<float>() == std::vector<float>(4, 1.0f), "the failed all-reduce wrote its tensor");
        return;
      }
      MT_FAIL("rank ", rank, "'s epoch all-reduce, summed with the others' bucket, returned ", sums.to_vector<float>()[0]);
    }, 60s);
  }
}

// The plain all-reduce's own guard: ranks whose all-reduces differ (here in the op alone, the same
// bytes) all fail, each naming what every rank issued; equal ones stay exact, also after many.
TEST_CASE("DDP: plain all-reduces that differ between ranks fail on every rank, naming each one" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    auto pg = test::join_group(rank, 2, port);
    for (int i = 0; i < 20; ++i) {
      Tensor f = full({3}, 0.25 * (rank + 1)), d = full({2}, 1.0 + rank, {.dtype = kFloat64});
      Tensor n = from_vector(std::vector<int64_t>{rank + 1}, {1});
      pg->allreduce(f)->wait();
      pg->allreduce(d, ReduceOp::Avg)->wait();
      pg->allreduce(n)->wait();
      MT_CHECK(f.to_vector<float>() == std::vector<float>(3, 0.75f) && d.to_vector<double>()[1] == 1.5 &&
                   n.to_vector<int64_t>()[0] == 3, "a guarded all-reduce summed wrongly");
    }
    Tensor t = full({4}, 1.0);
    try {
      pg->allreduce(t, rank == 0 ? ReduceOp::Sum : ReduceOp::Avg)->wait();
    } catch (const Error& e) {
      const std::string message = e.what();
      MT_CHECK(message.find("different collectives (rank 0: allreduce #") != std::string::npos &&
                   message.find(" (4 float32, Sum); rank 1: allreduce #") != std::string::npos &&
                   message.find(" (4 float32, Avg))") != std::string::npos, message);
      return;
    }
    MT_FAIL("the guard let a Sum and an Avg pair up");
  });
}

// Note [Guarding large all-reduces]: over 64 KiB the guard travels alone, before the tensor. Equal
// all-reduces stay exact (Sum, Avg, int64); when the last rank left its loop and all-reduces its
// results (another size, or the same bytes with another op) while the others all-reduce their next
// gradients, every rank fails within seconds naming what each issued, and every tensor keeps its
// value. Under MPI the tensor is all-reduced whatever the guard said (the backend hands it to MPI at
// once), so there only the same bytes are tried, and the tensor's value is not checked.
TEST_CASE("DDP: plain all-reduces over 64 KiB are guarded too: equal ones exact, a rank at another one named by every rank" *
          doctest::skip(kNoBackend)) {
  for (const int world : {2, 4}) {
    CAPTURE(world);
    const int port = find_free_port();
    test::run_ranks(world, [&](int rank) {
      auto pg = test::join_group(rank, world, port);
      const double sum = world * (world + 1) / 2.0;
      for (int i = 0; i < 3; ++i) {
        Tensor f = full({40000}, 1.0 + rank), d = full({20000}, 1.0 + rank, {.dtype = kFloat64});
        Tensor n = full({10000}, 1.0 + rank, {.dtype = kInt64});
        pg->allreduce(f)->wait();
        pg->allreduce(d, ReduceOp::Avg)->wait();
        pg->allreduce(n)->wait();
        MT_CHECK(f.to_vector<float>() == std::vector<float>(40000, static_cast<float>(sum)) &&
                     d.to_vector<double>() == std::vector<double>(20000, sum / world) &&
                     n.to_vector<int64_t>() == std::vector<int64_t>(10000, static_cast<int64_t>(sum)),
                 "a guarded large all-reduce summed wrongly");
      }
      const int last = world - 1;
      for (const bool same_bytes : {false, true}) {
        CAPTURE(same_bytes);
        if (test::mpi_mode() && !same_bytes) continue;  // MPI_ERR_TRUNCATE: the job would abort
        const auto t0 = std::chrono::steady_clock::now();
        // The others' next gradients: 40,000 floats, Sum; the last rank's results: 30,000 floats, or
        // the same 40,000 averaged.
        Tensor t = full({rank == last && !same_bytes ? 30000 : 40000}, 1.0 + rank);
        const ReduceOp op = rank == last && same_bytes ? ReduceOp::Avg : ReduceOp::Sum;
        try {
          pg->allreduce(t, op)->wait();
        } catch (const Error& e) {
          const std::string message = e.what(), lasts = "rank " + std::to_string(last) + ": allreduce #";
          MT_CHECK(message.find("different collectives (rank 0: allreduce #") != std::string::npos &&
                       message.find(" (40000 float32, Sum)") != std::string::npos &&
                       message.find(lasts) != std::string::npos &&
                       message.find(same_bytes ? " (40000 float32, Avg))" : " (30000 float32, Sum))") != std::string::npos,
                   message);
          MT_CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5.0, "too slow");
          MT_CHECK(test::mpi_mode() || t.to_vector<float>() == std::vector<float>(t.numel(), 1.0f + rank),
                   "the failed all-reduce wrote its tensor");
          continue;  // a failed guard leaves the group usable: every rank failed it alike
        }
        MT_FAIL("rank ", rank, ": all-reduces of different sizes or ops were summed together");
      }
    }, 60s);
  }
}
