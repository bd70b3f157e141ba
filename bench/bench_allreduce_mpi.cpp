// bench_allreduce_mpi: ProcessGroupMPI beside ProcessGroupGloo, two ranks on this machine, in the
// same run, interleaved repetition by repetition so that both see the same load:
//   1. one allreduce (issue + wait, Sum, float32) of 11, 1,000 and 203,530 floats (the seed model's
//      gradient, a small bucket, the Fashion-MNIST MLP's gradient; as bench_allreduce.cpp);
//   2. a DDP training step (zero_grad, forward, loss, backward with its all-reduces, SGD step):
//        seed  Linear(10, 1), batch 32 per rank, MSE, SGD lr 0.01
//        mlp   784-256-10 with ReLU, batch 128 per rank, cross-entropy, SGD lr 0.01 momentum 0.9
//        mlp_2buckets  the same with the last layer in a bucket of its own (overlap)
//        mlp4  784-512-512-512-10 with ReLU, batch 64 per rank, in 4 buckets (one per weight matrix)
//      with DDPStats' split of the step: backward, finalize's wait (communication left exposed after
//      backward) and the share of the gradient bytes whose all-reduce completed during backward
//      (Note [Overlap] in distributed/ddp/ddp_stats.h), printed as `<backend>_ddp_<workload>_overlap_pct`.
//
// Run it as an MPI job (as root, OpenMPI wants OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1):
//   mpirun -np 2 build/bench/bench_allreduce_mpi
// Both ranks build both groups: MPI's from the launcher, Gloo's at a TCPStore on 127.0.0.1 whose
// free port rank 0 picks and sends to rank 1 over MPI. Every loop runs an iteration count rank 0
// chose, so the ranks issue the same collectives.
//
// Output (rank 0): `minitrain <backend>_<what> <median>` lines on stdout; min/max on stderr.
// Not measured here: more than two ranks, other machines, PyTorch (bench/run.sh).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "minitrain.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kReps = 7;
constexpr double kRepSeconds = 0.25;

double seconds_of(const std::function<void()>& fn, int64_t iters) {
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < iters; ++i) fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Rank 0 decides, everyone follows (same collectives on every rank).
int64_t agree(mt::dist::ProcessGroup& pg, int64_t value) {
  mt::Tensor t = mt::from_vector(std::vector<int64_t>{value}, {1});
  pg.broadcast(t, 0)->wait();
  return t.to_vector<int64_t>()[0];
}

struct Case {
  std::string name;                                  // "mpi_allreduce_11_us"
  mt::dist::ProcessGroup* pg;                        // the group its iteration count is agreed on
  std::function<void()> fn;
  double scale;                                      // seconds -> reported unit
  std::function<std::string(double per_call)> note;  // extra stderr detail, after the runs
  int64_t iters = 0;
  std::vector<double> per_call{};
};

// Warm-up picks each case's iteration count; then kReps rounds, each running every case once.
void run(std::vector<Case>& cases, int rank) {
  for (Case& c : cases) {
    const double warm = seconds_of(c.fn, 20) / 20;
    c.iters = agree(*c.pg, std::max<int64_t>(1, static_cast<int64_t>(kRepSeconds / warm)));
  }
  for (int r = 0; r < kReps; ++r)
    for (Case& c : cases) c.per_call.push_back(seconds_of(c.fn, c.iters) / static_cast<double>(c.iters));
  if (rank != 0) return;
  for (Case& c : cases) {
    std::sort(c.per_call.begin(), c.per_call.end());
    const double median = c.per_call[kReps / 2];
    std::printf("minitrain %s %.4g\n", c.name.c_str(), median * c.scale);
    std::fprintf(stderr, "# %-28s median %.4g, min %.4g, max %.4g (%d reps x %lld)%s\n", c.name.c_str(),
                 median * c.scale, c.per_call.front() * c.scale, c.per_call.back() * c.scale, kReps,
                 static_cast<long long>(c.iters), c.note ? c.note(median).c_str() : "");
  }
  std::fflush(stdout);
}

// One DDP training step's pieces, for one backend.
struct Trainer {
  std::shared_ptr<mt::dist::DistributedDataParallel> ddp;
  std::unique_ptr<mt::optim::SGD> opt;
  mt::Tensor x, y;
  bool classify = false;
  void step() {
    ddp->zero_grad();
    const mt::Tensor out = ddp->forward(x);
    (classify ? mt::nn::F::cross_entropy(out, y) : mt::nn::F::mse_loss(out, y)).backward();
    opt->step();
  }
  // "; 1 bucket, per step: backward 410 us, finalize wait 20 us, ..."
  std::string split() const {
    const auto& s = ddp->stats();
    const double n = static_cast<double>(std::max<int64_t>(1, s.timed_backwards));
    char text[256];
    std::snprintf(text, sizeof text, "; %zu bucket(s), per step: backward (hooks to finalize) %.4g us, finalize "
                  "wait (exposed) %.4g us, communication %.4g us; %.0f%% of the bytes reduced during backward "
                  "(Note [Overlap])", s.bucket_bytes.size(), s.backward_seconds / n * 1e6,
                  s.finalize_wait_seconds / n * 1e6, s.comm_seconds / n * 1e6, 100 * s.overlap_fraction());
    return text;
  }
};

enum class Workload { Seed, Mlp, Mlp2Buckets, Mlp4 };

// Mlp2Buckets: the MLP's last layer (10 KB of gradient) in a bucket of its own, so that its
// all-reduce runs while backward computes the first layer's gradients (the default 1 MiB first
// bucket holds all 813 KB, launched at the last hook: no overlap).
// Mlp4: a cap of 1.1 MiB gives buckets [fc4, fc3.bias] (22 KB), [fc3.weight, fc2.bias],
// [fc2.weight, fc1.bias] (1 MiB each) and [fc1.weight] (1.6 MB): three launch during backward.
Trainer make_trainer(std::shared_ptr<mt::dist::ProcessGroup> pg, Workload workload) {
  using namespace mt;
  Trainer t;
  manual_seed(1);
  std::shared_ptr<nn::Module> model;
  dist::DDPOptions options;
  int64_t batch = 128;
  if (workload == Workload::Seed) {
    model = std::make_shared<nn::Linear>(10, 1);
  } else if (workload == Workload::Mlp4) {
    model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 512), std::make_shared<nn::ReLU>(),
                                             std::make_shared<nn::Linear>(512, 512), std::make_shared<nn::ReLU>(),
                                             std::make_shared<nn::Linear>(512, 512), std::make_shared<nn::ReLU>(),
                                             std::make_shared<nn::Linear>(512, 10));
    options = {.bucket_cap_mb = 1.1, .first_bucket_cap_mb = 0.05};
    batch = 64;
  } else {
    model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
                                             std::make_shared<nn::Linear>(256, 10));
    if (workload == Workload::Mlp2Buckets) options = {.first_bucket_cap_mb = 0.05};
  }
  const bool mlp = workload != Workload::Seed;
  t.ddp = std::make_shared<dist::DistributedDataParallel>(model, pg, options);
  t.opt = std::make_unique<optim::SGD>(t.ddp->parameters(),
                                       optim::SGDOptions{.lr = 0.01, .momentum = mlp ? 0.9 : 0.0});
  Generator gen(100 + pg->rank());
  if (mlp) {
    t.x = randn({batch, 784}, gen);
    std::vector<int64_t> labels(static_cast<size_t>(batch));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 7 + pg->rank()) % 10);
    t.y = from_vector(labels, {batch});
    t.classify = true;
  } else {
    t.x = randn({32, 10}, gen);
    t.y = randn({32, 1}, gen);
  }
  return t;
}

}  // namespace

int main() {
  using namespace mt::dist;
  if (!ProcessGroupMPI::is_available() || !ProcessGroupGloo::is_available()) {
    std::fprintf(stderr, "bench_allreduce_mpi: this build lacks MPI or Gloo; nothing to compare\n");
    return 0;
  }
  try {
    auto mpi = std::make_shared<ProcessGroupMPI>(ProcessGroupMPIOptions{.timeout = std::chrono::seconds(60)});
    if (mpi->size() != 2) {
      if (mpi->rank() == 0) std::fprintf(stderr, "bench_allreduce_mpi: run it as 2 ranks (mpirun -np 2)\n");
      return 1;
    }
    const int rank = mpi->rank();
    const int port = static_cast<int>(agree(*mpi, rank == 0 ? find_free_port() : 0));
    auto gloo = init_process_group({.backend = "gloo",
                                    .rendezvous = {.rank = rank, .world_size = 2, .local_rank = rank,
                                                   .local_world_size = 2, .master_addr = "127.0.0.1",
                                                   .master_port = port},
                                    .timeout = std::chrono::seconds(60)});
    if (rank == 0) std::fprintf(stderr, "# MPI thread level %s\n", ProcessGroupMPI::thread_level().c_str());

    std::vector<mt::Tensor> buffers;
    std::vector<Case> latency;
    for (const int64_t numel : {int64_t{11}, int64_t{1000}, int64_t{203530}}) {
      for (auto& [name, pg] : {std::pair<const char*, ProcessGroup*>{"mpi", mpi.get()}, {"gloo", gloo.get()}}) {
        mt::Tensor t = mt::full({numel}, 1.0);
        latency.push_back(Case{.name = std::string(name) + "_allreduce_" + std::to_string(numel) + "_us", .pg = pg,
                               .fn = [pg, t]() mutable { pg->allreduce(t)->wait(); }, .scale = 1e6, .note = {}});
      }
    }
    run(latency, rank);

    std::vector<Trainer> trainers;
    // The same MPI without its progress thread: the bucket all-reduces then advance only when DDP
    // calls into the group (Note [Progress thread] in distributed/process_group/mpi/process_group_mpi.cpp).
    auto mpi_nothread = std::make_shared<ProcessGroupMPI>(
        ProcessGroupMPIOptions{.timeout = std::chrono::seconds(60), .progress_thread = false});
    trainers.reserve(10);
    std::vector<Case> steps;
    for (const auto& [workload, kind] : {std::pair<std::string, Workload>{"seed", Workload::Seed},
                                         {"mlp", Workload::Mlp}, {"mlp_2buckets", Workload::Mlp2Buckets},
                                         {"mlp4", Workload::Mlp4}}) {
      for (auto& [name, pg] : {std::pair<const char*, std::shared_ptr<ProcessGroup>>{"mpi", mpi},
                               {"gloo", gloo}, {"mpi_nothread", mpi_nothread}}) {
        if (pg == mpi_nothread && kind != Workload::Mlp4 && kind != Workload::Mlp2Buckets) continue;
        trainers.push_back(make_trainer(pg, kind));
        Trainer* t = &trainers.back();
        steps.push_back(Case{.name = std::string(name) + "_ddp_" + workload + "_step_us",
                             .pg = pg.get(), .fn = [t] { t->step(); }, .scale = 1e6,
                             .note = [t](double) { return t->split(); }});
      }
    }
    run(steps, rank);
    if (rank == 0)
      for (size_t i = 0; i < steps.size(); ++i)  // the overlap each step case reached (Note [Overlap])
        std::printf("minitrain %s %.4g\n",
                    (steps[i].name.substr(0, steps[i].name.size() - 8) + "_overlap_pct").c_str(),
                    100 * trainers[i].ddp->stats().overlap_fraction());
    mpi->barrier()->wait();
    mpi_nothread->barrier()->wait();
    gloo->barrier()->wait();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce_mpi: %s\n", e.what());
    return 1;
  }
}
