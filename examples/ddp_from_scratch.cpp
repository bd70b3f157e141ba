// Data parallelism built from scratch, in the four steps a course takes, against the public API only
// (a ProcessGroup's all-reduce, tensors, post-accumulate-grad hooks). It is the way into
// distributed/ddp/reducer.cpp: each version adds one idea the library's DistributedDataParallel uses.
//
//   v1  all-reduce every gradient after backward          correct, one collective per parameter
//   v2  one flat buffer                                    one collective, plus two copies
//   v3  hooks launch each all-reduce during backward       communication overlaps computation
//   v4  buckets, launched in order as they fill            few collectives, and overlap
//
// Every version trains the same model from the same weights on the same data; the program prints
// each one's step time and how much of its communication it hid, checks that all four (and the
// library's DDP) end with the same weights on every rank, and exits non-zero if they do not.
// Overlap needs the collective to advance while backward computes. Gloo runs it on its own thread
// (which needs a free core). MPI moves it only inside MPI calls: ProcessGroupMPI's progress thread,
// woken by a collective of 64 KiB or more (each of v4's buckets), makes them every 20 µs until
// nothing is in flight; a smaller one (v3's biases and last weight) issued while the thread sleeps
// moves only when this rank next enters the group, such as the next launch (Note [Progress thread]
// in distributed/process_group/mpi/process_group_mpi.cpp). So how much is hidden depends on the
// backend and the machine; the weights never do.
//
//   build/example_ddp_from_scratch [ranks]   forks `ranks` (default 2) processes that meet over Gloo
//   mpirun -np 2 build/example_ddp_from_scratch   each process is one rank, over MPI
//
// Not here: what the library adds on top (gradients that *are* bucket views, so no copy; unused
// parameters; no_sync; fp16 compression; checks that the ranks agree): see docs/ddp.md.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "minitrain.h"

using namespace mt;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int64_t kBatchPerRank = 32, kIn = 64, kHidden = 256, kOut = 16, kLayers = 6;
constexpr int kWarmupSteps = 2, kTimedSteps = 20;
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

// ---- the four versions ------------------------------------------------------------------------
// Each is a Sync: it is set up once on the model's parameters, may act during backward (hooks),
// and finish() leaves every .grad holding the mean over ranks of the ranks' gradients.
//
// Why the mean: every rank computed the gradient of its own mean loss over B rows. The mean of
// those over R ranks is the gradient of the mean loss over all R·B rows, what one process with the
// whole batch would compute. So the optimizer step, and the weights after it, are the same on every
// rank: nothing else is ever sent. ReduceOp::Avg is the sum over ranks divided by R.

struct Sync {
  virtual ~Sync() = default;
  virtual void finish() = 0;  // after loss.backward(), before opt.step()
};

// v1: after backward, all-reduce each gradient on its own, one after the other.
// Simple and correct. But each collective pays the fixed cost of a round trip between the ranks
// (tens of microseconds over loopback TCP, more between machines) however small the tensor, and
// while it runs nothing computes: all communication is added to the step.
struct PerParameter : Sync {
  std::shared_ptr<dist::ProcessGroup> pg;
  std::vector<Tensor> params;
  PerParameter(std::shared_ptr<dist::ProcessGroup> group, std::vector<Tensor> ps)
      : pg(std::move(group)), params(std::move(ps)) {}
  void finish() override {
    for (Tensor& p : params) {
      Tensor g = p.grad();
      pg->allreduce(g, dist::ReduceOp::Avg)->wait();
    }
  }
};

// v2: copy every gradient into one flat buffer, all-reduce it once, copy the means back.
// One round trip instead of one per parameter, and one large message, which is what networks are
// fast at. The price: two copies of all the gradients, and still nothing overlaps, because the
// buffer is complete only when backward is.
struct FlatBuffer : Sync {
  std::shared_ptr<dist::ProcessGroup> pg;
  std::vector<Tensor> params;
  Tensor flat;  // (Σ numel): every gradient, one after the other
  FlatBuffer(std::shared_ptr<dist::ProcessGroup> group, std::vector<Tensor> ps)
      : pg(std::move(group)), params(std::move(ps)) {
    int64_t total = 0;
    for (const Tensor& p : params) total += p.numel();
    flat = zeros({total});
  }
  void finish() override {
    NoGradGuard no_grad;
    int64_t at = 0;
    for (const Tensor& p : params) flat.narrow(0, at, p.numel()).copy_(p.grad().flatten()), at += p.numel();
    pg->allreduce(flat, dist::ReduceOp::Avg)->wait();
    at = 0;
    for (const Tensor& p : params) p.grad().copy_(flat.narrow(0, at, p.numel()).view(p.sizes())), at += p.numel();
  }
};

// v3: a post-accumulate-grad hook per parameter launches its all-reduce the moment its gradient
// is final, and backward goes on with the earlier layers while the collective runs.
// Autograd runs backward last layer first, so the last layer's gradients travel while the first
// layers' are still being computed. finish() only waits. allreduce() returns at once (work.h);
// until wait() the gradient belongs to the collective, and nothing else touches it.
// With `wait_at_launch` it waits for each one at once instead: the same collectives without overlap,
// to measure the overlap against.
struct OverlapPerParameter : Sync {
  std::shared_ptr<dist::ProcessGroup> pg;
  bool wait_at_launch = false;
  std::vector<std::shared_ptr<dist::Work>> in_flight;
  OverlapPerParameter(std::shared_ptr<dist::ProcessGroup> group, const std::vector<Tensor>& params, bool wait)
      : pg(std::move(group)), wait_at_launch(wait) {
    for (const Tensor& p : params) {
      p.register_post_accumulate_grad_hook([this](const Tensor& param) {
        Tensor g = param.grad();
        in_flight.push_back(pg->allreduce(g, dist::ReduceOp::Avg));
        if (wait_at_launch) in_flight.back()->wait();
      });
    }
  }
  void finish() override {
    for (auto& work : in_flight) work->wait();
    in_flight.clear();
  }
};

// v4: buckets. Parameters are grouped, in the order their gradients become ready (reverse order of
// the model), into buckets of about kBucketBytes, each with its own flat buffer. A hook copies its
// gradient into its slot of the bucket; when a bucket's last gradient arrives, the bucket is
// all-reduced. This keeps both wins: few, large messages (v2) that travel during backward (v3).
// One rule makes it safe: buckets are launched strictly in bucket order on every rank, even if a
// later one fills first, because collectives pair up across ranks by issue order (Note [Bucket
// launch order] in distributed/ddp/reducer.cpp). finish() waits, then copies the means back into .grad (the
// library avoids that copy by making each .grad a view into its bucket).
struct Buckets : Sync {
  struct Bucket {
    std::vector<Tensor> params;
    std::vector<int64_t> offsets;  // where each parameter's gradient starts in `flat`
    Tensor flat;
    size_t pending = 0;  // gradients still to arrive in this backward
    std::shared_ptr<dist::Work> work;
  };
  std::shared_ptr<dist::ProcessGroup> pg;
  bool wait_at_launch = false;  // as in v3
  std::vector<Bucket> buckets;
  size_t next_to_launch = 0;

  Buckets(std::shared_ptr<dist::ProcessGroup> group, const std::vector<Tensor>& params, bool wait)
      : pg(std::move(group)), wait_at_launch(wait) {
    // Fill buckets in reverse parameter order (the order backward makes the gradients), starting a
    // new one when the next gradient would overflow the current one.
    int64_t filled = 0;  // elements in the last bucket
    for (auto p = params.rbegin(); p != params.rend(); ++p) {
      if (buckets.empty() || (filled + p->numel()) * 4 > kBucketBytes) buckets.emplace_back(), filled = 0;
      buckets.back().params.push_back(*p), buckets.back().offsets.push_back(filled);
      filled += p->numel();
    }
    for (size_t index = 0; index < buckets.size(); ++index) {
      Bucket& b = buckets[index];
      b.flat = zeros({b.offsets.back() + b.params.back().numel()});
      b.pending = b.params.size();
      for (size_t slot = 0; slot < b.params.size(); ++slot)
        b.params[slot].register_post_accumulate_grad_hook(
            [this, index, slot](const Tensor& p) { ready(index, slot, p); });
    }
  }

  void ready(size_t index, size_t slot, const Tensor& param) {
    Bucket& b = buckets[index];
    {
      NoGradGuard no_grad;
      b.flat.narrow(0, b.offsets[slot], param.numel()).copy_(param.grad().flatten());
    }
    --b.pending;
    // Launch every full bucket from the next one in order; stop at the first that is not full.
    while (next_to_launch < buckets.size() && buckets[next_to_launch].pending == 0) {
      Bucket& full = buckets[next_to_launch++];
      full.work = pg->allreduce(full.flat, dist::ReduceOp::Avg);
      if (wait_at_launch) full.work->wait();
    }
  }

  void finish() override {
    NoGradGuard no_grad;
    for (Bucket& b : buckets) {
      b.work->wait();
      for (size_t i = 0; i < b.params.size(); ++i) {
        const Tensor& p = b.params[i];
        p.grad().copy_(b.flat.narrow(0, b.offsets[i], p.numel()).view(p.sizes()));
      }
      b.pending = b.params.size();
    }
    next_to_launch = 0;
  }
};

// No communication: each rank trains alone. Its step time is the computation every version does.
struct Alone : Sync {
  void finish() override {}
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
  optim::SGD opt{model->parameters(), {.lr = 0.05}};
  std::vector<double> times_ms;

  Version(std::string n, const MakeSync& make_sync, const Wrap& wrap = nullptr)
      : name(std::move(n)), sync(make_sync(model->parameters())), net(wrap ? wrap(model) : model) {}

  void step(const Tensor& x, const Tensor& y) {
    static nn::MSELoss loss_fn;
    model->zero_grad(/*set_to_none=*/false);
    loss_fn(net->forward(x), y).backward();
    sync->finish();
    opt.step();
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
      v->step(x, y);
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

// One rank's whole program. Returns the exit code.
int run_rank(const std::shared_ptr<dist::ProcessGroup>& pg) {
  using Params = const std::vector<Tensor>&;
  Version alone("alone", [](Params) { return std::make_unique<Alone>(); });
  Version v1("v1 per parameter", [&](Params ps) { return std::make_unique<PerParameter>(pg, ps); });
  Version v2("v2 flat buffer", [&](Params ps) { return std::make_unique<FlatBuffer>(pg, ps); });
  Version v3_serial("v3, waiting at launch",
                    [&](Params ps) { return std::make_unique<OverlapPerParameter>(pg, ps, true); });
  Version v3("v3 hooks", [&](Params ps) { return std::make_unique<OverlapPerParameter>(pg, ps, false); });
  Version v4_serial("v4, waiting at launch", [&](Params ps) { return std::make_unique<Buckets>(pg, ps, true); });
  Version v4("v4 buckets", [&](Params ps) { return std::make_unique<Buckets>(pg, ps, false); });
  // The library's DDP averages during backward by itself: no Sync around it.
  const dist::DDPOptions ddp_options{.bucket_cap_mb = kBucketBytes / double(1 << 20)};
  const Wrap ddp = [&](std::shared_ptr<nn::Module> m) {
    return std::make_shared<dist::DistributedDataParallel>(m, pg, ddp_options);
  };
  Version library("library DDP", [](Params) { return std::make_unique<Alone>(); }, ddp);
  train(*pg, {&alone, &v1, &v2, &v3_serial, &v3, &v4_serial, &v4, &library});

  // Overlap: of what communication costs a version when every collective blocks (its serial step
  // minus the step alone), the part its overlapped step no longer pays. A difference of medians: on
  // a machine busy with other work it wobbles, and can even come out below zero.
  const auto hidden = [&](const Version& serial, const Version& overlapped) {
    const double comm = serial.step_ms() - alone.step_ms();
    return comm > 0 ? (serial.step_ms() - overlapped.step_ms()) / comm : 0.0;
  };
  if (pg->rank() == 0) {
    const auto row = [&](const Version& v, const std::string& note) {
      std::printf("  %-22s %8.2f ms   communication exposed %6.2f ms   %s\n", v.name.c_str(), v.step_ms(),
                  v.step_ms() - alone.step_ms(), note.c_str());
    };
    const auto percent = [](double f) { return std::to_string(static_cast<int>(std::lround(100 * f))) + "%"; };
    std::printf("%d ranks over %s, %zu parameters, batch %lld per rank, median step of %d:\n", pg->size(),
                pg->backend().c_str(), v1.weights().size(), static_cast<long long>(kBatchPerRank), kTimedSteps);
    std::printf("  %-22s %8.2f ms   (computation only)\n", alone.name.c_str(), alone.step_ms());
    row(v1, "nothing overlaps");
    row(v2, "nothing overlaps");
    row(v3_serial, "");
    row(v3, percent(hidden(v3_serial, v3)) + " of it hidden");
    row(v4_serial, "");
    row(v4, percent(hidden(v4_serial, v4)) + " of it hidden");
    row(library, "");
  }

  // Every version against v1, and every rank against rank 0 (Note [Equal weights]).
  const double tolerance = pg->size() <= 2 ? 0.0 : 1e-5;
  bool ok = true;
  const std::vector<float> reference = v1.weights();
  for (const Version* v : {&v2, &v3_serial, &v3, &v4_serial, &v4, &library}) {
    const double d = max_difference(reference, v->weights());
    if (d > tolerance) {
      std::fprintf(stderr, "rank %d: %s ends with other weights than v1 (max difference %g)\n", pg->rank(),
                   v->name.c_str(), d);
      ok = false;
    }
  }
  Tensor rank0 = from_vector(reference, {static_cast<int64_t>(reference.size())});
  pg->broadcast(rank0, 0)->wait();
  if (max_difference(rank0.to_vector<float>(), reference) > tolerance) {
    std::fprintf(stderr, "rank %d: its weights differ from rank 0's\n", pg->rank());
    ok = false;
  }
  if (pg->rank() == 0 && ok) std::printf("every version ends with the same weights, on every rank\n");
  return ok ? 0 : 1;
}

// Without a launcher, fork `world` ranks that meet through a FileStore in a fresh temporary
// folder (no port to pick), over Gloo. The parent only waits and reports.
int fork_ranks(int world) {
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

}  // namespace

int main(int argc, char** argv) {
  try {
    // Started by a launcher (mpirun, srun, torchrun): this process is one rank of its job.
    if (const auto job = dist::rendezvous_from_env()) return run_rank(dist::init_process_group({.rendezvous = *job}));
    const int world = argc > 1 ? std::atoi(argv[1]) : 2;
    if (world < 1) {
      std::fprintf(stderr, "ddp_from_scratch: the number of ranks must be at least 1, got '%s'\n", argv[1]);
      return 1;
    }
    return fork_ranks(world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_from_scratch: %s\n", e.what());
    return 1;
  }
}
