// bench_guards: what DDP's desync guard (Note [Desync guard] in distributed/fault/desync_guard.cpp) costs
// per bucket and step. Two figures, wall and CPU time of this thread (bench/timing.h):
//   guard_us           writing one bucket's guard before its all-reduce and checking it after
//   ddp_seed_step_us   a DDP step of the seed job (Linear(10, 1), batch 32, MSE, SGD lr 0.01) in a
//                      world of one (ProcessGroupLocal), for scale: the same work as a rank of a
//                      larger world without the all-reduce (a world of one skips the guard: one
//                      rank cannot disagree with itself)
// The step the guard is compared with is the 2-rank seed step of bench/ddp.sh (MPI's is the
// shortest, being mostly this local work); the seed job has one bucket, so one guard per step. The
// guard's other cost, DesyncGuard::kElements more elements per all-reduce, shows in bench_allreduce
// (11 against 1,000 floats: within the noise of one message).
// Not measured here: more buckets (the cost is per bucket), GPU buckets (a copy each way).
#include <cstdio>

#include "distributed/fault/detail/desync_guard.h"
#include "minitrain.h"
#include "timing.h"

int main() {
  using namespace mt;
  auto pg = std::make_shared<dist::ProcessGroupLocal>();

  Tensor bucket = zeros({11 + dist::detail::DesyncGuard::kElements});
  dist::detail::DesyncGuard g(bucket.narrow(0, 11, dist::detail::DesyncGuard::kElements), 1, kFloat32);
  int64_t step = 0;
  const bench::Timing guard_t = bench::time_per_call([&] {
    const dist::detail::BucketPoint point{.step = step++, .bucket = 0, .buckets = 1, .numel = 11,
                                          .dtype = static_cast<int64_t>(kFloat32)};
    g.write(point);
    g.check(*pg, point);
  });
  bench::report("minitrain", "guard_us", bench::micros, guard_t);

  manual_seed(0);
  auto model = std::make_shared<nn::Linear>(10, 1);
  dist::DistributedDataParallel ddp(model, pg);
  optim::SGD opt(ddp.parameters(), {.lr = 0.01});
  Generator gen(1);
  const Tensor x = randn({32, 10}, gen), y = randn({32, 1}, gen);
  const bench::Timing step_t = bench::time_per_call([&] {
    ddp.zero_grad();
    nn::F::mse_loss(ddp.forward(x), y).backward();
    opt.step();
  });
  bench::report("minitrain", "ddp_seed_step_us", bench::micros, step_t);
  bench::report_cpu_share("minitrain");
  return 0;
}
