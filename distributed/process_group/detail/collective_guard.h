// Guards in the data of an all-reduce: a few elements at the end of the buffer that every rank fills
// with where it is, so that the collective's own sums prove all ranks were at the same collective
// (Note [Collective guard] in collective_guard.cpp). Two users: ProcessGroup::allreduce appends one to
// every plain all-reduce up to kGuardMaxBytes (a copy of the tensor with kGuardElements more
// elements) and sends it alone before larger ones (Note [Guarding large all-reduces]), and DDP's buckets
// carry one of their own (DesyncGuard, distributed/fault/detail/desync_guard.h) with a different
// marker. When a guard fails, the ranks meet in one allgather of a CollectivePoint each, whatever
// kind of collective each was in, and every rank's error names where each rank was: the rank that
// left a DDP training loop early is named as such.
//
// Not here: broadcasts, allgathers, barriers and the flat collectives (no sum to carry a guard);
// plain all-reduces with Max, of float16 or bfloat16, on a GPU (NCCL) or in a world of one: those run unguarded.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group/process_group.h"

namespace mt::dist::detail {

// A marker, then h and h^2 for each of four hashes.
constexpr int64_t kGuardHashes = 4;
constexpr int64_t kGuardElements = 1 + 2 * kGuardHashes;
using GuardValues = std::array<double, kGuardElements>;

// What each rank's marker adds to the sum: one value per kind of guarded collective. Exact in every
// dtype the guards travel in, and unlike the ones and counts other collectives sum.
constexpr double kBucketMarker = 23.0 / 32;  // a DDP bucket (DesyncGuard)
constexpr double kAllreduceMarker = 13.0;    // a plain all-reduce (an integer: int64 all-reduces carry it too)

// The largest plain all-reduce whose guard travels in a copy of it: copying a tensor in and out costs
// about 10 µs at 64 KiB here, under the all-reduce's own latency; at 814 KB it costs 130 µs. Larger
// ones send the guard alone first (Note [Guarding large all-reduces]).
constexpr int64_t kGuardMaxBytes = 64 * 1024;

// K: the hashes are integers in [1, K], small enough that world·K^2 stays exact in `wire`.
int64_t guard_range(int world, DType wire);
// This rank's guard: scale·marker, then scale·h and scale·h^2 for the four 16-bit quarters of `hash`
// (each scaled to [1, range]). scale = world when the collective divides by the world size (Avg, DDP's
// averaging hooks), so that the division gives back the integers; 1 for a Sum.
GuardValues guard_values(uint64_t hash, double marker, int64_t range, double scale);
void store_guard(const GuardValues& values, void* host, DType dtype);
GuardValues load_guard(const void* host, DType dtype);

enum class GuardVerdict {
  kAgree,     // every rank wrote the same guard
  kDisagree,  // guards of this kind, but not all the same: the ranks were at different collectives of it
  kForeign,   // not sums of this kind's guards: some rank was in another collective of the same size
};
GuardVerdict guard_verdict(const GuardValues& sums, double marker, int world, int64_t range);

uint64_t guard_hash(const std::array<int64_t, 6>& fields);

// Where a rank was, in one layout for both kinds, so that the ranks of a failed guard can meet in one
// allgather of 7 int64 whatever each was doing.
struct CollectivePoint {
  enum Kind : int64_t { kBucket = 1, kAllreduce = 2 };
  int64_t kind = 0;
  // kBucket: step, bucket, buckets, numel, dtype. kAllreduce: number (Note [Collective order]),
  // numel, dtype, op, 0.
  std::array<int64_t, 5> fields{};
  int64_t rank = 0;
};
std::string describe_point(const CollectivePoint& p);

// After a failed guard, on every rank that saw it: gathers every rank's point (one allgather, waited
// a few seconds: a rank in a collective that carries no guard never comes) and returns the message
// that names where each rank was, and which ranks left a DDP training loop.
std::string explain_failed_guard(ProcessGroup& pg, const CollectivePoint& mine, GuardVerdict verdict);

// ProcessGroup::allreduce's guarded path: copies `tensor` into a buffer with a guard at its end,
// all-reduces that through `run`, and returns a Work whose wait() checks the guard and copies the
// sum back into `tensor` (Note [Collective guard]); over kGuardMaxBytes, all-reduces the guard alone
// through `run`, then `tensor` itself through `run_if`, on the condition that the guard agreed, and
// returns a Work whose wait() checks the guard first (Note [Guarding large all-reduces]).
bool allreduce_is_guarded(const ProcessGroup& pg, const Tensor& tensor, ReduceOp op);
std::shared_ptr<Work> guarded_allreduce(
    ProcessGroup& pg, Tensor& tensor, ReduceOp op, int64_t number, const std::function<std::shared_ptr<Work>(Tensor&)>& run,
    const std::function<std::shared_ptr<Work>(Tensor&, std::function<bool()>)>& run_if);

}  // namespace mt::dist::detail
