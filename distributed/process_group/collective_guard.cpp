// Guards in an all-reduce's data (see detail/collective_guard.h): the arithmetic both guards share,
// the report every rank gives when one fails, and the plain all-reduce's guarded path.
#include "distributed/process_group/detail/collective_guard.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <sstream>

namespace mt::dist::detail {

// Note [Collective guard]: collectives pair up across ranks by issue order alone (Note [Collective
// order]), so a rank that left a DDP training loop early (it ran out of batches, uneven inputs
// without a Join) has its next all-reduce, the epoch's loss say, summed with its peers' next bucket
// whenever the byte counts match: the peers' bucket guard fails (Note [Desync guard]), but this rank's
// all-reduce would return a wrong sum without a word. So plain all-reduces carry a guard too. Up to
// kGuardMaxBytes, ProcessGroup::allreduce copies the tensor into a buffer kGuardElements longer, writes a marker
// (kAllreduceMarker, which no DDP bucket writes) and four hashes of (collective number, element
// count, dtype, op) as h and h^2, all-reduces the buffer, checks the sums in wait(), and only then
// copies the sum back into the tensor. By Cauchy-Schwarz (Σh)^2 <= world·Σh^2, with equality exactly
// when every rank wrote the same h; the sums are the same bits on every rank (Note [Same bits on
// every rank]) and the guard's values small integers, so every rank in the collective reaches the
// same verdict. A marker sum that is not world·marker means some rank wrote another kind of guard, or
// none: the collective met a collective of another kind.
//
// Whatever the verdict, every rank that failed is in a failed guard now, of one kind or the other, so
// they meet in one allgather of a CollectivePoint (7 int64) and each names where every rank was: the
// ranks whose point is a plain all-reduce while the others were in a DDP bucket ran out of batches.
// The allgather waits at most kReportWait: a rank whose collective carried no guard (a broadcast of
// the same size, say) never comes, and the message then says only what this rank knows.
//
// The price is a copy of the tensor in and out and kGuardElements more elements on the wire: below
// the collective's own latency for the small all-reduces a rank issues after its training loop (an
// epoch's loss, a count; measured with bench/bench_allreduce: bench/README.md). Larger ones carry
// their guard another way (Note [Guarding large all-reduces], below). DDP's buckets pay nothing here
// (their guard lives in slack at the end of the bucket: allreduce_own_guard); Max, float16, bfloat16, NCCL's GPU
// tensors and a world of one go unguarded (Max has no sum to carry it; NCCL's wait must not block the
// host to read it).
//
// Note [Guarding large all-reduces]: copying a tensor in and out costs about 10 us at 64 KiB
// (kGuardMaxBytes), but milliseconds at 16 MiB, a large part of the all-reduce itself. So an
// all-reduce over kGuardMaxBytes sends its guard alone first: an all-reduce of kGuardElements float64
// (72 bytes whatever the tensor, so that two ranks' guards always pair up), then the tensor itself,
// in place and unguarded, through run_allreduce_if: ProcessGroupGloo, whose collectives run in issue
// order on one thread, asks there, when the tensor's turn comes, whether the guard agreed, and skips
// the tensor when it did not, on every rank of that guard alike (they all hold the same sums). Both
// are issued at once, so allreduce() still returns at once; the returned Work's wait() judges the
// guard first and, when it failed, reports as above. Ranks at different plain all-reduces (another
// number, size, dtype or op: a rank that left a loop early and all-reduces its results while its
// peers all-reduce gradients) thus fail on every rank, within a round trip, naming where each rank
// was, and the tensor keeps its value. ProcessGroupMPI hands each collective to MPI as it is issued,
// so there the tensor is all-reduced whatever the guard says: the ranks are still named when the
// tensors have the same size, but the tensor then holds whatever MPI summed, and tensors of different
// sizes end the job with MPI's own error (MPI_ERR_TRUNCATE). A guard that meets a collective of
// another size (a DDP bucket, say) is not a sum of guards: the backend fails on the mismatch, without
// naming the rank that ran out, but no rank gets a tensor summed with a bucket. The price: one small
// all-reduce's latency per large all-reduce (bench/README.md, "Data-parallel", the guards). Code that
// guards its own large all-reduces (DDP) calls allreduce_own_guard, which skips both guards.
namespace {

constexpr std::chrono::seconds kReportWait{5};

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

// Each field times its own odd constant, summed, then mixed once: cheap (it runs per collective) and
// any change of one field changes the result.
uint64_t guard_hash(const std::array<int64_t, 6>& fields) {
  constexpr std::array<uint64_t, 6> kOdd{0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull,
                                         0xd6e8feb86659fd93ull, 0xff51afd7ed558ccdull, 0xc4ceb9fe1a85ec53ull};
  uint64_t sum = 0;
  for (size_t i = 0; i < fields.size(); ++i) sum += static_cast<uint64_t>(fields[i]) * kOdd[i];
  return splitmix64(sum);
}

// K such that world·K^2 stays exact: Note [Desync guard] in distributed/fault/desync_guard.cpp derives it.
int64_t guard_range(int world, DType wire) {
  const double w = world;
  double k2 = 0;  // the largest K^2 allowed
  switch (wire) {
    case DType::Float16: k2 = 2048.0 / w; break;
    case DType::BFloat16: k2 = 256.0 / w; break;
    case DType::Float32: k2 = std::ldexp(1.0, 21) / (w * (w + 2)); break;
    default: k2 = std::ldexp(1.0, 50) / (w * (w + 2)); break;
  }
  return std::clamp<int64_t>(static_cast<int64_t>(std::floor(std::sqrt(k2))), 1, int64_t{1} << 16);
}

GuardValues guard_values(uint64_t hash, double marker, int64_t range, double scale) {
  GuardValues values{};
  values[0] = scale * marker;
  for (int64_t i = 0; i < kGuardHashes; ++i) {
    const uint64_t quarter = (hash >> (16 * i)) & 0xffff;
    const double h = 1.0 + static_cast<double>((quarter * static_cast<uint64_t>(range)) >> 16);
    values[1 + 2 * i] = scale * h;
    values[2 + 2 * i] = scale * h * h;
  }
  return values;
}

void store_guard(const GuardValues& values, void* host, DType dtype) {
  switch (dtype) {
    case kFloat64: std::copy(values.begin(), values.end(), static_cast<double*>(host)); break;
    case kFloat32: std::copy(values.begin(), values.end(), static_cast<float*>(host)); break;
    case kInt64:
      std::transform(values.begin(), values.end(), static_cast<int64_t*>(host),
                     [](double v) { return static_cast<int64_t>(std::llround(v)); });
      break;
    default: MT_FAIL("collective guard: no guard in ", dtype, " buffers");
  }
}

GuardValues load_guard(const void* host, DType dtype) {
  GuardValues sums{};
  switch (dtype) {
    case kFloat64: std::copy_n(static_cast<const double*>(host), sums.size(), sums.begin()); break;
    case kFloat32: std::copy_n(static_cast<const float*>(host), sums.size(), sums.begin()); break;
    case kInt64: std::copy_n(static_cast<const int64_t*>(host), sums.size(), sums.begin()); break;
    default: MT_FAIL("collective guard: no guard in ", dtype, " buffers");
  }
  return sums;
}

GuardVerdict guard_verdict(const GuardValues& sums, double marker, int world, int64_t range) {
  // A sum is plausible when it is within 0.25 of an integer in [world, world·bound]. Rounded by
  // truncating s + 0.5 (s is checked positive and small first): inline, where std::round is a call.
  const double w = world;
  const auto nearest = [w](double s, double bound, double& r) {
    if (!(s >= w - 0.25 && s <= w * bound + 0.25)) return false;  // also false for NaN
    r = static_cast<double>(static_cast<int64_t>(s + 0.5));
    return std::abs(s - r) < 0.25;
  };
  bool plausible = std::abs(sums[0] - w * marker) < 1e-3 * w, agree = true;
  const double k = static_cast<double>(range);
  for (int64_t i = 0; i < kGuardHashes; ++i) {
    double r1 = 0, r2 = 0;
    plausible = plausible && nearest(sums[1 + 2 * i], k, r1) && nearest(sums[2 + 2 * i], k * k, r2);
    agree = agree && r1 * r1 == w * r2;  // exact: both sides are integers below 2^53
  }
  if (!plausible) return GuardVerdict::kForeign;
  return agree ? GuardVerdict::kAgree : GuardVerdict::kDisagree;
}

std::string describe_point(const CollectivePoint& p) {
  std::ostringstream os;
  const auto& f = p.fields;
  if (p.kind == CollectivePoint::kBucket)
    os << "step " << f[0] << ", bucket " << f[1] << " of " << f[2] << " (" << f[3] << " " << static_cast<DType>(f[4]) << ")";
  else if (p.kind == CollectivePoint::kAllreduce)
    os << "allreduce #" << f[0] << " (" << f[1] << " " << static_cast<DType>(f[2]) << ", "
       << reduce_op_name(static_cast<ReduceOp>(f[3])) << ")";
  else
    os << "a collective without a guard";
  return os.str();
}

namespace {

// "rank 1", "ranks 1 and 3", "ranks 1, 2 and 3".
std::string name_ranks(const std::vector<int64_t>& ranks) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i)
    os << (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") << ranks[i];
  return os.str();
}

}  // namespace

std::string explain_failed_guard(ProcessGroup& pg, const CollectivePoint& mine, GuardVerdict verdict) {
  const std::vector<int64_t> record{mine.kind, mine.fields[0], mine.fields[1], mine.fields[2], mine.fields[3],
                                    mine.fields[4], pg.rank()};
  std::vector<Tensor> all;
  try {
    pg.allgather(all, from_vector(record, {static_cast<int64_t>(record.size())}).to(pg.device()))->wait(kReportWait);
  } catch (const Error&) {
    return std::string(verdict == GuardVerdict::kForeign ? "it met a collective of another kind on some rank"
                                                         : "the ranks were at different collectives") +
           " (where each was is unknown: not every rank joined the report's allgather within " +
           std::to_string(kReportWait.count()) + " s, so some rank's collective carried no guard; here: " +
           describe_point(mine) + ")";
  }
  std::vector<CollectivePoint> points;
  std::vector<int64_t> out, in;  // ranks at a plain all-reduce, ranks in a DDP bucket
  for (const Tensor& t : all) {
    const std::vector<int64_t> v = t.to(kCPU).to_vector<int64_t>();
    points.push_back({.kind = v[0], .fields = {v[1], v[2], v[3], v[4], v[5]}, .rank = v[6]});
    (points.back().kind == CollectivePoint::kBucket ? in : out).push_back(v[6]);
  }
  std::ostringstream where;
  for (size_t r = 0; r < points.size(); ++r)
    where << (r ? "; " : "") << "rank " << points[r].rank << ": " << describe_point(points[r]);
  if (!in.empty() && !out.empty())
    return name_ranks(out) + " ran out of batches: " + (out.size() == 1 ? "it" : "they") +
           " left the DDP training loop while " + name_ranks(in) + " all-reduced a bucket (" + where.str() + ")";
  return "the ranks were at different collectives (" + where.str() + ")";
}

namespace {

// The Work of a guarded all-reduce: the backend's Work on the longer buffer, then, once, in the
// first wait(): the guard's verdict and the copy of the wire's first tensor.numel() elements back into
// the caller's tensor (none for a large all-reduce's probe: Note [Guarding large all-reduces]).
class GuardedAllreduceWork final : public Work {
 public:
  GuardedAllreduceWork(ProcessGroup& pg, Tensor tensor, Tensor wire, CollectivePoint point, int64_t range,
                       std::shared_ptr<Work> inner)
      : Work(inner->description(), inner->timeout()),
        pg_(pg),
        tensor_(std::move(tensor)),
        wire_(std::move(wire)),
        point_(point),
        range_(range),
        inner_(std::move(inner)) {}

  bool is_completed() const override { return inner_->is_completed(); }

  // Whether the guard's all-reduce has completed and every rank agreed: the verdict alone, without
  // the report (Note [Guarding large all-reduces] asks it on the backend's own thread).
  bool agreed() const {
    return inner_->is_completed() && verdict() == GuardVerdict::kAgree;
  }

  void wait(std::chrono::milliseconds timeout) override {
    inner_->wait(timeout);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!checked_) {
      checked_ = true;
      check();
    }
    if (!failure_.empty()) MT_FAIL(failure_);
  }

 private:
  GuardVerdict verdict() const {
    const int64_t n = wire_.numel() - kGuardElements;
    const GuardValues sums = load_guard(static_cast<const char*>(wire_.raw_data()) + n * element_size(wire_.dtype()),
                                        wire_.dtype());
    return guard_verdict(sums, kAllreduceMarker, pg_.size(), range_);
  }

  void check() {
    const int64_t n = wire_.numel() - kGuardElements;
    const GuardVerdict verdict = this->verdict();
    if (verdict == GuardVerdict::kAgree) {
      if (n > 0) tensor_.view({n}).copy_(wire_.narrow(0, 0, n));
      return;
    }
    failure_ = "collective guard on rank " + std::to_string(pg_.rank()) + ": " + describe_point(point_) +
               " was not summed with the same all-reduce on every rank: " +
               explain_failed_guard(pg_, point_, verdict) +
               ". Every rank must issue the same collectives in the same order: the same number of steps "
               "(uneven inputs: a Join, docs/ddp.md) and the same code; the tensor keeps its value";
  }

  ProcessGroup& pg_;
  Tensor tensor_, wire_;
  CollectivePoint point_;
  int64_t range_;
  std::shared_ptr<Work> inner_;
  std::mutex mutex_;
  bool checked_ = false;
  std::string failure_;
};

// A large all-reduce's Work (Note [Guarding large all-reduces]): its guard's first (which throws the
// report when the ranks disagreed), then the all-reduce's.
class ProbedAllreduceWork final : public Work {
 public:
  ProbedAllreduceWork(std::shared_ptr<GuardedAllreduceWork> guard, std::shared_ptr<Work> whole)
      : Work(whole->description(), whole->timeout()), guard_(std::move(guard)), whole_(std::move(whole)) {}

  bool is_completed() const override { return guard_->is_completed() && whole_->is_completed(); }

  void wait(std::chrono::milliseconds timeout) override {
    guard_->wait(timeout);
    whole_->wait(timeout);
  }

 private:
  std::shared_ptr<GuardedAllreduceWork> guard_;
  std::shared_ptr<Work> whole_;
};

}  // namespace

bool allreduce_is_guarded(const ProcessGroup& pg, const Tensor& tensor, ReduceOp op) {
  const DType d = tensor.dtype();
  return pg.size() > 1 && pg.device().is_cpu() && op != ReduceOp::Max && (d == kFloat32 || d == kFloat64 || d == kInt64);
}

std::shared_ptr<Work> guarded_allreduce(
    ProcessGroup& pg, Tensor& tensor, ReduceOp op, int64_t number, const std::function<std::shared_ptr<Work>(Tensor&)>& run,
    const std::function<std::shared_ptr<Work>(Tensor&, std::function<bool()>)>& run_if) {
  const int64_t n = tensor.numel();
  const DType dtype = tensor.dtype();
  const CollectivePoint point{.kind = CollectivePoint::kAllreduce,
                              .fields = {number, n, static_cast<int64_t>(dtype), static_cast<int64_t>(op), 0},
                              .rank = pg.rank()};
  const uint64_t hash = guard_hash({point.kind, point.fields[0], point.fields[1], point.fields[2], point.fields[3], 0});
  const double scale = op == ReduceOp::Avg ? pg.size() : 1.0;  // Avg divides the guard too
  if (n * static_cast<int64_t>(element_size(dtype)) > kGuardMaxBytes) {
    // The guard alone first (Note [Guarding large all-reduces]), in float64 whatever the tensor's
    // dtype, so that two ranks' guards are the same bytes even when their tensors differ; then the
    // tensor, all-reduced only if the guard agreed.
    const int64_t range = guard_range(pg.size(), kFloat64);
    Tensor probe = empty({kGuardElements}, {.dtype = kFloat64, .device = pg.device()});
    store_guard(guard_values(hash, kAllreduceMarker, range, scale), probe.raw_data(), kFloat64);
    auto guard = std::make_shared<GuardedAllreduceWork>(pg, Tensor{}, probe, point, range, run(probe));
    return std::make_shared<ProbedAllreduceWork>(guard, run_if(tensor, [guard] { return guard->agreed(); }));
  }
  const int64_t range = guard_range(pg.size(), dtype == kInt64 ? kFloat64 : dtype);
  Tensor wire = empty({n + kGuardElements}, {.dtype = dtype, .device = pg.device()});
  wire.narrow(0, 0, n).copy_(tensor.view({n}));
  store_guard(guard_values(hash, kAllreduceMarker, range, scale),
              static_cast<char*>(wire.raw_data()) + n * element_size(dtype), dtype);
  return std::make_shared<GuardedAllreduceWork>(pg, tensor, wire, point, range, run(wire));
}

}  // namespace mt::dist::detail
