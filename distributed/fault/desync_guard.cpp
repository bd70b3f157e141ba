// DesyncGuard (see desync_guard.h): what a DDP bucket's guard hashes, written where the comm hook's
// averaging leaves it exact, and what a failed one reports.
#include "distributed/fault/detail/desync_guard.h"

#include <algorithm>
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
// them can join one allgather of where they were (explain_failed_guard) to say so. (A test of S1 == world·h
// against each rank's own h would not do: with h = 1, 2, 3 the middle rank would see no problem
// and go on while the others stopped.)
//
// Exactness: the comm hooks average, by dividing the bucket by world before a Sum (Note [Averaging]),
// and may send it in a narrower dtype (fp16). So a rank writes world·h and world·h^2: divided by
// world they are h and h^2 again (to within one rounding of the bucket's dtype, which the cast to
// float16 or the final rounding to an integer removes), and the sums are integers that the wire
// dtype holds exactly when world·K^2 stays below its exact-integer range: K = sqrt(2048 / world) for
// float16 (2048 = 2^11), sqrt(256 / world) for bfloat16, sqrt(2^21 / (world·(world+2))) for float32 (the divided values can be one
// float32 rounding off, and the Sum adds up to world roundings more; this keeps the total under 0.5),
// the same with 2^50 for float64. Four hashes with K = 16 (fp16, 8 ranks) miss a random mismatch
// with probability 16^-4; with float32 at 2 ranks, K = 512.
//
// The guard starts with a marker: each rank adds kMarker = 23/32 (exact in every dtype, and unlike
// the ones and counts that other collectives sum, and unlike the plain all-reduce's marker), so its
// sum is world·kMarker exactly. A marker sum that is not, or hash sums that are not integers in
// [world, world·K] (or [world, world·K^2]), were not made from bucket guards at all: the bucket's
// all-reduce met another collective of the same size on some rank, usually a rank out of batches at
// its end-of-epoch all-reduce. That all-reduce carries a guard of its own (Note [Collective guard]),
// which fails on that rank in the same collective, so all of them meet in one allgather and every
// rank's error names the rank that ran out.
//
// The arithmetic (the range K, the values, the verdict) lives with the plain all-reduce's guard in
// distributed/process_group/collective_guard.cpp; this file says what a bucket hashes and reports.
namespace {

CollectivePoint collective_point(const BucketPoint& p, int rank) {
  return {.kind = CollectivePoint::kBucket, .fields = {p.step, p.bucket, p.buckets, p.numel, p.dtype}, .rank = rank};
}

uint64_t hash_point(const BucketPoint& p) {
  return guard_hash({CollectivePoint::kBucket, p.step, p.bucket, p.buckets, p.numel, p.dtype});
}

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
  const GuardValues values = guard_values(hash_point(point), kMarker, range_, world_);
  if (host_) {  // the common case, written in place: no tensor, no allocation
    store_guard(values, host_, guard_.dtype());
    return;
  }
  guard_.copy_(from_vector(std::vector<double>(values.begin(), values.end()), {kElements}).to(guard_.dtype()).to(guard_.device()));
}

void DesyncGuard::check(ProcessGroup& pg, const BucketPoint& point) const {
  GuardValues sums{};
  if (host_) sums = load_guard(host_, guard_.dtype());
  else {  // a GPU bucket (NCCL): the host reads a copy
    const std::vector<double> copy = guard_.to(kCPU).to(kFloat64).to_vector<double>();
    std::copy(copy.begin(), copy.end(), sums.begin());
  }
  const GuardVerdict verdict = guard_verdict(sums, kMarker, world_, range_);
  if (verdict == GuardVerdict::kAgree) return;
  // Every rank saw the same sums (Note [Same bits on every rank]) and fails here, or in its own
  // all-reduce's guard: gather who was where.
  MT_FAIL("DDP desync guard on rank ", pg.rank(), ": the all-reduce of step ", point.step, ", bucket ",
          point.bucket, " was not summed with the same bucket on every rank: ",
          explain_failed_guard(pg, collective_point(point, pg.rank()), verdict),
          ". Every rank must run the same steps (uneven inputs: a Join, docs/ddp.md) and build the same model");
}

}  // namespace mt::dist::detail
