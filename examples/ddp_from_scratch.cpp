// Data parallelism built from scratch, in the six steps a course takes, against the public API only
// (a ProcessGroup's all-reduce, tensors, post-accumulate-grad hooks). It is the way into
// distributed/ddp/reducer.cpp: each version adds one idea the library's DistributedDataParallel uses.
//
//   v1  all-reduce every gradient after backward          correct, one collective per parameter
//   v2  one flat buffer                                    one collective, plus two copies
//   v3  hooks launch each all-reduce during backward       communication overlaps computation
//   v4  buckets, launched in order as they fill            few collectives, and overlap
//   v5  gradients are views of the buckets, and each       no copies: what the library does
//       bucket is divided by the world size, then summed
//   v6  reduce-scatter, update a shard, all-gather          the idea of ZeRO: each rank updates 1/R
//
// Every version trains the same model from the same weights on the same data; the program prints,
// per version, its step time, the communication it did not hide, its collectives per step and
// their size, and the share of its bytes whose collective had completed when backward ended (Note
// [Overlap from the timeline]); the library's DDP, with v4's and v5's buckets, is the last row.
// It checks that every version ends with the same weights on every rank, and exits non-zero if
// not.
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
// Not here: what the library adds on top of v5 (unused parameters, no_sync, comm hooks, the bucket
// rebuild, checks that the ranks agree): see docs/ddp.md.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "autograd/accumulate_grad.h"  // set_grad_destination
#include "ddp_from_scratch_harness.h"
#include "minitrain.h"

using namespace mt;
using namespace ddp_from_scratch;

namespace {

// ---- the six versions ------------------------------------------------------------------------
// Each is a Sync (ddp_from_scratch_harness.h): set up once on the model's parameters, it may act
// during backward (hooks), and its finish() leaves every .grad holding the mean over the ranks.

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
      record(pg->allreduce(g, dist::ReduceOp::Avg), g)->wait();
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
    record(pg->allreduce(flat, dist::ReduceOp::Avg), flat)->wait();
    at = 0;
    for (const Tensor& p : params) p.grad().copy_(flat.narrow(0, at, p.numel()).view(p.sizes())), at += p.numel();
  }
};

// v3: a post-accumulate-grad hook per parameter launches its all-reduce the moment its gradient
// is final, and backward goes on with the earlier layers while the collective runs.
// Autograd runs backward last layer first, so the last layer's gradients travel while the first
// layers' are still being computed. finish() only waits. allreduce() returns at once (work.h);
// until wait() the gradient belongs to the collective, and nothing else touches it.
struct OverlapPerParameter : Sync {
  std::shared_ptr<dist::ProcessGroup> pg;
  OverlapPerParameter(std::shared_ptr<dist::ProcessGroup> group, const std::vector<Tensor>& params)
      : pg(std::move(group)) {
    for (const Tensor& p : params) {
      p.register_post_accumulate_grad_hook([this](const Tensor& param) {
        Tensor g = param.grad();
        record(pg->allreduce(g, dist::ReduceOp::Avg), g);
      });
    }
  }
  void finish() override {
    for (Launched& l : launched) l.work->wait();
  }
};

// v4: buckets. Parameters are grouped, in the order their gradients become ready (reverse order of
// the model), into buckets of about kBucketBytes, each with its own flat buffer. A hook copies its
// gradient into its slot of the bucket; when a bucket's last gradient arrives, the bucket is
// all-reduced. This keeps both wins: few, large messages (v2) that travel during backward (v3).
// One rule makes it safe: buckets are launched strictly in bucket order on every rank, even if a
// later one fills first, because collectives pair up across ranks by issue order (Note [Bucket
// launch order] in distributed/ddp/reducer.cpp). finish() waits, then copies the means back into
// .grad.
struct Buckets : Sync {
  struct Bucket {
    std::vector<Tensor> params;
    std::vector<int64_t> offsets;  // where each parameter's gradient starts in `flat`
    Tensor flat;
    size_t pending = 0;  // gradients still to arrive in this backward
  };
  std::shared_ptr<dist::ProcessGroup> pg;
  std::vector<Bucket> buckets;
  size_t next_to_launch = 0;

  Buckets(std::shared_ptr<dist::ProcessGroup> group, const std::vector<Tensor>& params) : pg(std::move(group)) {
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

  // The hook: this parameter's gradient is final.
  virtual void ready(size_t index, size_t slot, const Tensor& param) {
    Bucket& b = buckets[index];
    {
      NoGradGuard no_grad;
      b.flat.narrow(0, b.offsets[slot], param.numel()).copy_(param.grad().flatten());
    }
    --b.pending;
    launch_full();
  }
  // Launches every full bucket from the next one in order; stops at the first that is not full.
  void launch_full() {
    while (next_to_launch < buckets.size() && buckets[next_to_launch].pending == 0) launch(buckets[next_to_launch++]);
  }
  virtual void launch(Bucket& b) { record(pg->allreduce(b.flat, dist::ReduceOp::Avg), b.flat); }

  void finish() override {
    NoGradGuard no_grad;
    for (Launched& l : launched) l.work->wait();
    for (Bucket& b : buckets) {
      copy_back(b);
      b.pending = b.params.size();
    }
    next_to_launch = 0;
  }
  virtual void copy_back(Bucket& b) {
    for (size_t i = 0; i < b.params.size(); ++i) {
      const Tensor& p = b.params[i];
      p.grad().copy_(b.flat.narrow(0, b.offsets[i], p.numel()).view(p.sizes()));
    }
  }
};

// v5: v4 without its two copies, as the library does it. Each parameter's .grad IS its slice of
// its bucket (a view), and it is the gradient's destination, so backward writes there directly
// (Note [Gradients are bucket views] in distributed/ddp/detail/reducer.h) and the hook only counts.
// And the mean is a division of each bucket by the world size, then a Sum: the same one pass over
// the bucket as Avg's division after the sum, but every rank then adds g/R, which keeps a float16
// sum of many ranks in range and rounds the same way on every backend (Note [Averaging] in
// distributed/ddp/reducer.cpp).
struct BucketViews : Buckets {
  BucketViews(std::shared_ptr<dist::ProcessGroup> group, const std::vector<Tensor>& params)
      : Buckets(std::move(group), params) {
    for (Bucket& b : buckets) point_gradients_at(b);
  }
  // Every parameter's .grad, and its gradient destination, becomes its slice of b.flat.
  static void point_gradients_at(Bucket& b) {
    for (size_t i = 0; i < b.params.size(); ++i) {
      Tensor& p = b.params[i];
      const Tensor view = b.flat.narrow(0, b.offsets[i], p.numel()).view(p.sizes());
      p.set_grad(view);
      set_grad_destination(p, view);
    }
  }
  void ready(size_t index, size_t, const Tensor&) override {
    --buckets[index].pending;
    launch_full();
  }
  void launch(Bucket& b) override {
    {
      NoGradGuard no_grad;
      b.flat.mul_(1.0 / pg->size());  // exact for a power-of-two world
    }
    record(pg->allreduce(b.flat, dist::ReduceOp::Sum), b.flat);
  }
  void copy_back(Bucket&) override {}  // the gradients are the buckets
};

// v6: sharding, the idea of ZeRO (distributed/zero/zero.h). After v5 every rank holds the whole
// mean gradient and updates every parameter, each rank exactly as the others: R copies of one piece
// of work, and of the optimizer's state. Instead each bucket is REDUCE-SCATTERED: rank r receives
// the mean of its own 1/R of the bucket only, updates those elements alone (SGD's update, written
// out as optim::SGD computes it; an optimizer with state would keep it for this 1/R only), and an
// ALL-GATHER hands every rank the updated parameters. The two together move the bytes of one
// all-reduce (it is how a ring all-reduce works inside: Note [Flat shards] in
// distributed/process_group/process_group.h), and the update and its state shrink by R. A bucket
// is padded to a multiple of R elements, so that every rank's shard has one size.
struct Sharded : BucketViews {
  float lr;
  std::vector<Tensor> params_flat;  // per bucket: its parameters, flat and padded like `flat`
  Sharded(std::shared_ptr<dist::ProcessGroup> group, const std::vector<Tensor>& params, float learning_rate)
      : BucketViews(std::move(group), params), lr(learning_rate) {
    for (Bucket& b : buckets) {
      const int64_t n = b.flat.numel(), world = pg->size(), padded = (n + world - 1) / world * world;
      if (padded != n) regrow(b, padded);
      params_flat.push_back(zeros({padded}));
    }
  }
  bool updates_parameters() const override { return true; }
  // Reduce-scatter instead of all-reduce: only this rank's shard of the mean comes back.
  void launch(Bucket& b) override {
    const int64_t shard = b.flat.numel() / pg->size();
    Tensor mine = b.flat.narrow(0, pg->rank() * shard, shard);
    record(pg->reduce_scatter(mine, b.flat, dist::ReduceOp::Avg), b.flat);
  }
  // After the waits: update this rank's shard, all-gather the parameters, put them back.
  void copy_back(Bucket& b) override {
    const size_t index = static_cast<size_t>(&b - buckets.data());
    Tensor& pf = params_flat[index];
    for (size_t i = 0; i < b.params.size(); ++i) pf.narrow(0, b.offsets[i], b.params[i].numel()).copy_(b.params[i].flatten());
    const int64_t shard = pf.numel() / pg->size(), from = pg->rank() * shard;
    auto* p = static_cast<float*>(pf.raw_data()) + from;
    const auto* g = static_cast<const float*>(b.flat.raw_data()) + from;
    for (int64_t j = 0; j < shard; ++j) p[j] = p[j] - lr * g[j];  // p = p − lr·g, as optim::SGD
    Tensor mine = pf.narrow(0, from, shard);
    pg->allgather_into(pf, mine)->wait();
    for (size_t i = 0; i < b.params.size(); ++i)
      b.params[i].copy_(pf.narrow(0, b.offsets[i], b.params[i].numel()).view(b.params[i].sizes()));
  }

 private:
  // A flat buffer of `padded` elements whose first numel() are the old one, the gradients' views
  // moved onto it.
  void regrow(Bucket& b, int64_t padded) {
    b.flat = zeros({padded});
    point_gradients_at(b);
  }
};

// No communication: each rank trains alone. Its step time is the computation every version does.
struct Alone : Sync {
  void finish() override {}
};

// Rank 0's table: per version its median step, the part of it communication added (over "alone"),
// its collectives per step with their mean size, and its overlap (Note [Overlap from the timeline]).
void report(const dist::ProcessGroup& pg, const Version& alone, const std::vector<const Version*>& versions,
            const Version& library) {
  const unsigned cores = std::thread::hardware_concurrency();
  std::printf("%d ranks over %s, %zu parameters, batch %lld per rank, median step of %d:\n", pg.size(),
              pg.backend().c_str(), alone.weights().size(), static_cast<long long>(kBatchPerRank), kTimedSteps);
  if (cores < static_cast<unsigned>(pg.size()) + 1)
    std::printf("  (this machine has %u cores for %d ranks: a collective moves while backward computes only "
                "on a core of its own, so expect little overlap here)\n", cores, pg.size());
  std::printf("  %-18s %8.2f ms   (computation only)\n", alone.name.c_str(), alone.step_ms());
  const auto row = [&](const Version& v, double collectives, double bytes, double hidden) {
    std::printf("  %-18s %8.2f ms   exposed %6.2f ms   %5.1f collectives/step of %7.1f KiB   %3.0f%% of "
                "bytes reduced before backward ended\n", v.name.c_str(), v.step_ms(), v.step_ms() - alone.step_ms(),
                collectives, bytes / 1024.0, 100.0 * hidden);
  };
  for (const Version* v : versions) {
    const Sync& s = *v->sync;
    const double steps = std::max<double>(static_cast<double>(s.steps), 1.0);
    row(*v, static_cast<double>(s.collectives) / steps, static_cast<double>(s.bytes) / std::max<double>(s.collectives, 1.0),
        s.bytes > 0 ? static_cast<double>(s.hidden_bytes) / static_cast<double>(s.bytes) : 0.0);
  }
  const auto& ddp = static_cast<const dist::DistributedDataParallel&>(*library.net);
  const dist::DDPStats& st = ddp.stats();
  int64_t bucket_bytes = 0;
  for (int64_t b : st.bucket_bytes) bucket_bytes += b;
  const double buckets = static_cast<double>(st.bucket_bytes.size());
  row(library, buckets, static_cast<double>(bucket_bytes) / std::max(buckets, 1.0), st.overlap_fraction());
}

// One rank's whole program. Returns the exit code.
int run_rank(const std::shared_ptr<dist::ProcessGroup>& pg) {
  using Params = const std::vector<Tensor>&;
  Version alone("alone", [](Params) { return std::make_unique<Alone>(); });
  Version v1("v1 per parameter", [&](Params ps) { return std::make_unique<PerParameter>(pg, ps); });
  Version v2("v2 flat buffer", [&](Params ps) { return std::make_unique<FlatBuffer>(pg, ps); });
  Version v3("v3 hooks", [&](Params ps) { return std::make_unique<OverlapPerParameter>(pg, ps); });
  Version v4("v4 buckets", [&](Params ps) { return std::make_unique<Buckets>(pg, ps); });
  Version v5("v5 bucket views", [&](Params ps) { return std::make_unique<BucketViews>(pg, ps); });
  Version v6("v6 sharded", [&](Params ps) { return std::make_unique<Sharded>(pg, ps, kLr); });
  // The library's DDP averages during backward by itself: no Sync around it. Its buckets are v4's:
  // the same cap for every bucket, the first included, and no cap of its own for the last (its
  // default first and last buckets are smaller).
  const double cap_mb = kBucketBytes / double(1 << 20);
  const dist::DDPOptions ddp_options{.bucket_cap_mb = cap_mb, .first_bucket_cap_mb = cap_mb, .last_bucket_cap_mb = 0};
  const Wrap ddp = [&](std::shared_ptr<nn::Module> m) {
    return std::make_shared<dist::DistributedDataParallel>(m, pg, ddp_options);
  };
  Version library("library DDP", [](Params) { return std::make_unique<Alone>(); }, ddp);
  train(*pg, {&alone, &v1, &v2, &v3, &v4, &v5, &v6, &library});
  if (pg->rank() == 0) report(*pg, alone, {&v1, &v2, &v3, &v4, &v5, &v6}, library);

  // Every version against v1, and every rank against rank 0 (Note [Equal weights]).
  const double tolerance = pg->size() <= 2 ? 0.0 : 1e-5;
  bool ok = true;
  const std::vector<float> reference = v1.weights();
  for (const Version* v : {&v2, &v3, &v4, &v5, &v6, &library}) {
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
    return fork_ranks(world, run_rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_from_scratch: %s\n", e.what());
    return 1;
  }
}
