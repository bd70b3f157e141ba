// The harness of examples/ddp_from_scratch.cpp, which alone includes it: the model and the data every
// version trains on, the Sync interface the versions implement (and what it measures), training
// the versions side by side, and forking the ranks. The versions themselves, the lessons, are in
// the .cpp.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "minitrain.h"
#include "trace/tracer.h"  // trace::now_ns: the clock of Work::finished_ns

namespace ddp_from_scratch {

using namespace mt;
using Clock = std::chrono::steady_clock;


constexpr int64_t kBatchPerRank = 32, kIn = 64, kHidden = 256, kOut = 16, kLayers = 6;
constexpr int kWarmupSteps = 2, kTimedSteps = 20;
constexpr float kLr = 0.05f;  // SGD without momentum, every version (v6 writes its update out)
constexpr int64_t kBucketBytes = 512 * 1024;  // v4: at most 512 KiB a bucket, 5 buckets for this model

// x: (B, 64) -> 6 × [Linear(256), ReLU] -> Linear(16) -> (B, 16). Made alike on every rank
// (manual_seed), so every version starts from the same weights.
std::shared_ptr<nn::Sequential> make_model() {
  manual_seed(7);
  auto model = std::make_shared<nn::Sequential>();
  int64_t width = kIn;
  for (int i = 0; i < kLayers; ++i, width = kHidden) {
    model->push_back(std::make_shared<nn::Linear>(width, kHidden));
    model->push_back(std::make_shared<nn::ReLU>());
  }
  model->push_back(std::make_shared<nn::Linear>(kHidden, kOut));
  return model;
}

// Step `step`'s global batch, and this rank's rows of it: x: (B, 64)  y: (B, 16), B = kBatchPerRank.
void batch_of_rank(int step, int rank, int world, Tensor& x, Tensor& y) {
  Generator gen(1000 + step);
  const Tensor gx = randn({kBatchPerRank * world, kIn}, gen), gy = randn({kBatchPerRank * world, kOut}, gen);
  x = gx.narrow(0, rank * kBatchPerRank, kBatchPerRank).contiguous();
  y = gy.narrow(0, rank * kBatchPerRank, kBatchPerRank).contiguous();
}

// Each is a Sync: it is set up once on the model's parameters, may act during backward (hooks),
// and finish() leaves every .grad holding the mean over ranks of the ranks' gradients.
//
// Why the mean: every rank computed the gradient of its own mean loss over B rows. The mean of
// those over R ranks is the gradient of the mean loss over all R·B rows, what one process with the
// whole batch would compute. So the optimizer step, and the weights after it, are the same on every
// rank: nothing else is ever sent. ReduceOp::Avg is the sum over ranks divided by R.

//
// Note [Overlap from the timeline]: a version's overlap is measured, not inferred: every collective
// it launches is recorded with its bytes, and after the step the bytes whose collective had
// finished (Work::finished_ns, when the backend completed it) by the end of loss.backward() count
// as hidden. A collective launched after backward (v1, v2) cannot be hidden; one launched from a
// hook is hidden only if the backend moved it while backward computed (Gloo's own thread needs a
// free core; MPI's progress thread wakes for 64 KiB and more). The library's figure is its
// DDPStats, which counts the same way (Note [Overlap] in distributed/ddp/ddp_stats.h).
struct Sync {
  virtual ~Sync() = default;
  virtual void finish() = 0;  // after loss.backward(), before opt.step()
  virtual bool updates_parameters() const { return false; }  // v6 steps the parameters itself

  struct Launched {
    std::shared_ptr<dist::Work> work;
    int64_t bytes = 0;
  };
  std::vector<Launched> launched;  // this step's collectives, in launch order
  int64_t collectives = 0, bytes = 0, hidden_bytes = 0, steps = 0;  // summed over the timed steps

  std::shared_ptr<dist::Work> record(std::shared_ptr<dist::Work> work, const Tensor& t) {
    launched.push_back({work, t.numel() * static_cast<int64_t>(sizeof(float))});
    return work;
  }
  // After finish(): what this step's collectives did, against the end of its backward.
  void account(int64_t backward_end_ns, bool timed) {
    for (const Launched& l : launched) {
      if (!timed) continue;
      ++collectives, bytes += l.bytes;
      if (l.work->finished_ns() > 0 && l.work->finished_ns() <= backward_end_ns) hidden_bytes += l.bytes;
    }
    steps += timed;
    launched.clear();
  }
};

// ---- training and measuring ---------------------------------------------------------------------

using MakeSync = std::function<std::unique_ptr<Sync>(const std::vector<Tensor>& params)>;
using Wrap = std::function<std::shared_ptr<nn::Module>(std::shared_ptr<nn::Module>)>;

// One version in training: its own model (every one starts from the same weights), its Sync and
// its optimizer. `net` is what forward runs: the model, or the library's DDP wrapped around it.
struct Version {
  std::string name;
  std::shared_ptr<nn::Module> model = make_model();
  std::unique_ptr<Sync> sync;
  std::shared_ptr<nn::Module> net;
  optim::SGD opt{model->parameters(), {.lr = kLr}};
  std::vector<double> times_ms;

  Version(std::string n, const MakeSync& make_sync, const Wrap& wrap = nullptr)
      : name(std::move(n)), sync(make_sync(model->parameters())), net(wrap ? wrap(model) : model) {}

  void step(const Tensor& x, const Tensor& y, bool timed) {
    static nn::MSELoss loss_fn;
    model->zero_grad(/*set_to_none=*/false);
    loss_fn(net->forward(x), y).backward();
    const int64_t backward_end = trace::now_ns();
    sync->finish();
    sync->account(backward_end, timed);
    if (!sync->updates_parameters()) opt.step();
  }
  double step_ms() const {
    std::vector<double> t = times_ms;
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    return t[t.size() / 2];
  }
  std::vector<float> weights() const {  // every parameter, flattened, in order
    std::vector<float> out;
    for (const Tensor& p : model->parameters()) {
      const auto v = p.contiguous().to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
};

// Trains all versions side by side: every step, each runs once in turn, all ranks starting it
// together (a barrier, not timed), so a change of load on the machine hits every version alike.
void train(dist::ProcessGroup& pg, const std::vector<Version*>& versions) {
  for (int step = 0; step < kWarmupSteps + kTimedSteps; ++step) {
    Tensor x, y;
    batch_of_rank(step, pg.rank(), pg.size(), x, y);
    for (Version* v : versions) {
      pg.barrier()->wait();
      const auto start = Clock::now();
      v->step(x, y, step >= kWarmupSteps);
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      if (step >= kWarmupSteps) v->times_ms.push_back(ms);
    }
  }
}

// Note [Equal weights]: at two ranks every version must end with exactly the weights of v1. A sum
// of two floats is one rounding whichever rank adds, and dividing by 2 is exact, so how the
// gradients were packed (or the library's dividing before summing) changes no bit. With more ranks
// the order of the additions depends on how a backend cuts a buffer into chunks, and the last bits
// may differ: then 1e-5 relative is allowed.
double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = a[i], y = b[i];
    worst = std::max(worst, std::abs(x - y) / (1.0 + std::abs(x)));
  }
  return worst;
}

// Without a launcher, fork `world` ranks that meet through a FileStore in a fresh temporary
// folder (no port to pick), over Gloo. The parent only waits and reports.
int fork_ranks(int world, const std::function<int(std::shared_ptr<dist::ProcessGroup>)>& run_rank) {
  if (!dist::ProcessGroupGloo::is_available()) {
    std::printf("skipped: this build has no Gloo; run it under mpirun instead\n");
    return 77;
  }
  std::string folder = (std::filesystem::temp_directory_path() / "ddp_from_scratch.XXXXXX").string();
  if (::mkdtemp(folder.data()) == nullptr) return std::perror("mkdtemp"), 1;
  const std::string path = folder + "/store";
  std::fflush(stdout);
  std::vector<pid_t> children;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = ::fork();
    if (pid < 0) return std::perror("fork"), 1;
    if (pid == 0) {
      int code = 1;
      try {
        // A rank that fails leaves the others waiting for it: a minute, not the default five.
        const std::chrono::seconds timeout(60);
        auto store = std::make_shared<dist::FileStore>(dist::FileStoreOptions{.path = path, .timeout = timeout});
        code = run_rank(dist::init_process_group({.backend = "gloo",
                                                  .rendezvous = {.rank = rank, .world_size = world},
                                                  .timeout = timeout,
                                                  .store = store}));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
      }
      std::fflush(stdout);
      ::_exit(code);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (const pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::remove(path.c_str());
  ::rmdir(folder.c_str());
  if (failed) std::fprintf(stderr, "ddp_from_scratch: %d of %d ranks failed\n", failed, world);
  return failed ? 1 : 0;
}

}  // namespace ddp_from_scratch
