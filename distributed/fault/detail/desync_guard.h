// DesyncGuard: a few extra elements at the end of every DDP bucket that prove, at every bucket's
// all-reduce, that all ranks are at the same step, bucket and bucket layout (Note [Desync guard]).
// Used by the Reducer (distributed/ddp/reducer.cpp): write() before the comm hook launches the bucket, check() after
// the hook finished it. Costs a hash and a few stores per bucket per step, and kElements more
// elements on the wire.
//
// The arithmetic and the report on failure are shared with the plain all-reduce's guard
// (distributed/process_group/detail/collective_guard.h, Note [Collective guard]), which is how a
// rank that left the training loop early is named on every rank.
// Not here: comparing parameter values (the replica guard, replica_guard.h).
#pragma once

#include <cstdint>

#include "distributed/process_group/detail/collective_guard.h"
#include "distributed/process_group/process_group.h"
#include "tensor/tensor.h"

namespace mt::dist::detail {

// Where one rank is, for one bucket's all-reduce: what the guard hashes, and what a desync message
// shows for each rank.
struct BucketPoint {
  int64_t step = 0;      // synced backwards completed before this one
  int64_t bucket = 0;    // index, in launch order
  int64_t buckets = 0;   // how many the model has
  int64_t numel = 0;     // gradient elements in this bucket
  int64_t dtype = 0;     // static_cast<int64_t>(DType)
};

class DesyncGuard {
 public:
  // A marker, then two elements per hash (h and h^2, Note [Desync guard]), four hashes.
  static constexpr int64_t kHashes = kGuardHashes;
  static constexpr int64_t kElements = kGuardElements;
  static constexpr double kMarker = kBucketMarker;  // what each rank's marker adds to the sum

  // `guard`: the bucket's last kElements elements (float32 or float64); `world`: the group's size;
  // `wire`: the dtype the comm hook communicates the bucket in (CommHook::wire_dtype), which bounds
  // how large the guard's integers may be.
  DesyncGuard(Tensor guard, int world, DType wire);

  // Writes this rank's guard values in the form the averaging hooks expect: world·kMarker, world·h
  // and world·h^2, which they divide by world.
  void write(const BucketPoint& point);

  // After the hook finished the bucket, the guard holds the sums over ranks. Returns if every rank
  // wrote the same values; otherwise throws, on every rank alike, naming what each rank was doing (an
  // allgather of every rank's CollectivePoint, explain_failed_guard): at another step or bucket, or,
  // when the sums are not sums of bucket guards at all, in a plain all-reduce after leaving the loop.
  void check(ProcessGroup& pg, const BucketPoint& point) const;

  int64_t range() const { return range_; }  // h is in [1, range]

 private:
  Tensor guard_;
  void* host_ = nullptr;  // guard_'s data when it lives on the CPU (written and read in place)
  int world_;
  int64_t range_;
};

}  // namespace mt::dist::detail
