// DesyncGuard (see desync_guard.h): hashing where a rank is into small integers that survive the
// comm hook's averaging exactly, and reading the sums back.
#include "distributed/fault/detail/desync_guard.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>
#include <vector>

namespace mt::dist::detail {

// Note [Desync guard]: collectives pair up across ranks by issue order alone (Note [Collective
// order]). A rank one step ahead, one whose model was bucketed differently, or one that ran out of
// batches and went on to its next collective would, whenever the byte counts happen to match, be
// summed with a buffer that is not its peers' gradients, and nothing would notice: the replicas
// would silently differ. So every bucket carries kElements extra elements at its end. For each of
// kHashes hashes h in [1, K] of (step, bucket index, bucket count, bucket size, dtype) (the 16-bit
// quarters of one 64-bit hash, scaled),
// rank r writes h_r and h_r^2, and the bucket's all-reduce sums them with the gradients: S1 = Σ h_r,
// S2 = Σ h_r^2. By Cauchy-Schwarz S1^2 <= world·S2, with equality exactly when every h_r is the same:
// a test of "all ranks agree" that needs only the sums, which are the same bits on every rank (Note
// [Same bits on every rank]), so every rank reaches the same verdict and, on a mismatch, all of
// them can join one allgather of their BucketPoints to say who was where. (A test of S1 == world·h
// against each rank's own h would not do: with h = 1, 2, 3 the middle rank would see no problem
// and go on while the others stopped.)
//
// Exactness: the comm hooks average, by dividing the bucket by world before a Sum (Note [Averaging]),
// and may send it in a narrower dtype (fp16). So a rank writes world·h and world·h^2: divided by
// world they are h and h^2 again (to within one rounding of the bucket's dtype, which the cast to
// float16 or the final rounding to an integer removes), and the sums are integers that the wire
// dtype holds exactly when world·K^2 stays below its exact-integer range: K = sqrt(2048 / world) for
// float16 (2048 = 2^11), sqrt(2^21 / (world·(world+2))) for float32 (the divided values can be one
// float32 rounding off, and the Sum adds up to world roundings more; this keeps the total under 0.5),
// the same with 2^50 for float64. Four hashes with K = 16 (fp16, 8 ranks) miss a random mismatch
// with probability 16^-4; with float32 at 2 ranks, K = 512.
//
// The guard starts with a marker: each rank adds kMarker = 23/32 (exact in every dtype, and unlike
// the ones and counts that other collectives sum), so its sum is world·kMarker exactly. A marker sum
// that is not, or hash sums that are not integers in [world, world·K] (or [world, world·K^2]), were
// not made from guards at all: the bucket's all-reduce met another collective of the same size on
// some rank (a rank out of batches, at its end-of-epoch all-reduce). Then there is no common
// collective left to gather the ranks' points through, and each rank that sees it fails at once on
// its own.
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Each field times its own odd constant, summed, then mixed once: cheap (the guard runs per bucket
// per step) and any change of one field changes the result.
uint64_t hash_point(const BucketPoint& p) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  return splitmix64(u(p.step) * 0x9e3779b97f4a7c15ull + u(p.bucket) * 0xc2b2ae3d27d4eb4full +
                    u(p.buckets) * 0x165667b19e3779f9ull + u(p.numel) * 0xd6e8feb86659fd93ull +
                    u(p.dtype) * 0xff51afd7ed558ccdull);
}

int64_t guard_range(int world, DType wire) {
  const double w = world;
  double k2 = 0;  // the largest K^2 allowed
  switch (wire) {
    case DType::Float16: k2 = 2048.0 / w; break;
    case DType::Float32: k2 = std::ldexp(1.0, 21) / (w * (w + 2)); break;
    default: k2 = std::ldexp(1.0, 50) / (w * (w + 2)); break;
  }
  return std::clamp<int64_t>(static_cast<int64_t>(std::floor(std::sqrt(k2))), 1, int64_t{1} << 16);
}

std::string describe_point(const BucketPoint& p) {
  std::ostringstream os;
  os << "step " << p.step << ", bucket " << p.bucket << " of " << p.buckets << " (" << p.numel << " "
     << static_cast<DType>(p.dtype) << ")";
  return os.str();
}

using Values = std::array<double, DesyncGuard::kElements>;

}  // namespace

DesyncGuard::DesyncGuard(Tensor guard, int world, DType wire)
    : guard_(std::move(guard)), world_(world), range_(guard_range(world, wire)) {
  MT_CHECK(guard_.numel() == kElements && guard_.is_contiguous() &&
               (guard_.dtype() == kFloat32 || guard_.dtype() == kFloat64),
           "DesyncGuard: expected ", kElements, " contiguous float32/float64 elements, got ", guard_.numel(), " ",
           guard_.dtype());
  if (guard_.device().is_cpu()) host_ = guard_.raw_data();
}

void DesyncGuard::write(const BucketPoint& point) {
  // The four hashes are the four 16-bit quarters of one 64-bit hash, each scaled to [1, range].
  const uint64_t hash = hash_point(point);
  Values values{};
  values[0] = world_ * kMarker;
  for (int64_t i = 0; i < kHashes; ++i) {
    const uint64_t quarter = (hash >> (16 * i)) & 0xffff;
    const double h = 1.0 + static_cast<double>((quarter * static_cast<uint64_t>(range_)) >> 16);
    values[1 + 2 * i] = world_ * h;
    values[2 + 2 * i] = world_ * h * h;
  }
  if (host_) {  // the common case, written in place: no tensor, no allocation
    if (guard_.dtype() == kFloat64) std::copy(values.begin(), values.end(), static_cast<double*>(host_));
    else std::copy(values.begin(), values.end(), static_cast<float*>(host_));
    return;
  }
  guard_.copy_(from_vector(std::vector<double>(values.begin(), values.end()), {kElements}).to(guard_.dtype()).to(guard_.device()));
}

void DesyncGuard::check(ProcessGroup& pg, const BucketPoint& point) const {
  Values sums{};
  if (host_ && guard_.dtype() == kFloat64) std::copy_n(static_cast<const double*>(host_), sums.size(), sums.begin());
  else if (host_) std::copy_n(static_cast<const float*>(host_), sums.size(), sums.begin());
  else {  // a GPU bucket (NCCL): the host reads a copy
    const std::vector<double> copy = guard_.to(kCPU).to(kFloat64).to_vector<double>();
    std::copy(copy.begin(), copy.end(), sums.begin());
  }
  // A sum is plausible when it is within 0.25 of an integer in [world, world·bound]. Rounded by
  // truncating s + 0.5 (s is checked positive and small first): inline, where std::round is a call.
  const double w = world_;
  const auto nearest = [w](double s, double bound, double& r) {
    if (!(s >= w - 0.25 && s <= w * bound + 0.25)) return false;  // also false for NaN
    r = static_cast<double>(static_cast<int64_t>(s + 0.5));
    return std::abs(s - r) < 0.25;
  };
  bool plausible = std::abs(sums[0] - w * kMarker) < 1e-3 * w, agree = true;
  const double k = static_cast<double>(range_);
  for (int64_t i = 0; i < kHashes; ++i) {
    double r1 = 0, r2 = 0;
    plausible = plausible && nearest(sums[1 + 2 * i], k, r1) && nearest(sums[2 + 2 * i], k * k, r2);
    agree = agree && r1 * r1 == w * r2;  // exact: both sides are integers below 2^53
  }
  if (plausible && agree) return;
  if (!plausible)
    MT_FAIL("DDP desync guard on rank ", pg.rank(), ": the all-reduce of ", describe_point(point),
            " was summed with a collective that is not a DDP bucket on some rank (its guard's marker sums to ", sums[0],
            ", not ", world_ * kMarker, "): the ranks are not running the same collectives. Usually a rank ran out of batches "
            "(uneven inputs: every rank must run the same number of steps, docs/ddp.md), or the ranks' code "
            "issues different collectives");
  // Every rank saw the same sums (Note [Same bits on every rank]) and is here: gather who was where.
  const std::vector<int64_t> mine{point.step, point.bucket, point.buckets, point.numel, point.dtype};
  std::vector<Tensor> all;
  pg.allgather(all, from_vector(mine, {static_cast<int64_t>(mine.size())}).to(pg.device()))->wait();
  std::ostringstream os;
  for (size_t r = 0; r < all.size(); ++r) {
    const std::vector<int64_t> v = all[r].to(kCPU).to_vector<int64_t>();
    os << (r ? "; " : "") << "rank " << r << ": "
       << describe_point({.step = v[0], .bucket = v[1], .buckets = v[2], .numel = v[3], .dtype = v[4]});
  }
  MT_FAIL("DDP desync guard on rank ", pg.rank(), ": a bucket's all-reduce joined ranks at different points of "
          "training (", os.str(), "). Every rank must run the same steps (uneven inputs: docs/ddp.md) and "
          "build the same model");
}

}  // namespace mt::dist::detail
