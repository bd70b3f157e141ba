// DDPStats: what DistributedDataParallel's reducer did, for logs, benchmarks and learners
// (`mini_train --ddp-stats`): its buckets, and per bucket when it became ready, when its all-reduce
// was launched and seen complete, how much of it the step waited for, and which rank's gradient
// was last to arrive. The reducer fills it (bucket_timeline.cpp); DistributedDataParallel::bucket_arrivals()
// gathers the cross-rank part. Also every rank's peak tensor memory and what it was made of
// (peak_memory_per_rank). Not here: a trace of single steps (that is the Tracer's job).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distributed/process_group/process_group.h"
#include "tensor/memory.h"

namespace mt::dist {

// One bucket's timeline, summed over the backwards that were timed (divide by DDPStats::timed_backwards
// for the mean per step). Times are seconds from the backward's first ready hook.
struct DDPBucketTimes {
  double ready = 0;     // its last gradient arrived (its pending count reached zero)
  double launched = 0;  // its all-reduce was issued: ready, and every lower bucket launched
  double done = 0;      // its all-reduce was seen complete (Note [Overlap])
  double exposed = 0;   // the part of finalize's wait spent waiting for this bucket
  int64_t hidden = 0;   // backwards in which it had completed before finalize began
};

// Note [Overlap]: what counts as communication hidden behind backward is what had COMPLETED when
// finalize began, not what had merely been launched. The reducer looks at the buckets in flight at
// every ready hook (after ProcessGroup::progress(), Note [Progress]) and when finalize begins, and
// records when it first saw each one complete ("done": an upper bound by at most one autograd node
// of compute, exact in finalize). So:
//   exposed      = the time finalize waited for all-reduces (what backward did not hide)
//   overlap      = the bytes whose all-reduce completed before finalize began / all bytes reduced
// A bucket launched long before finalize but not progressed in between (on MPI: no progress thread
// and no hook after it, Note [Progress thread] in process_group_mpi.cpp) is not hidden: it still
// completes inside finalize's wait. The bucket launched by the last hook has only the engine's last
// nodes to hide behind, so a model whose gradients fit one bucket overlaps next to nothing,
// whatever the backend.
// What the bucket layout allows, whatever the machine, is a second figure:
//   launched early = the bytes whose all-reduce was launched before the backward's last gradient
//                    arrived / all bytes reduced
// "Before the last gradient arrived": at a ready hook while at least one bucket still waited for a
// gradient, so the rest of backward was left to hide it. The buckets launched by the last hook or in
// finalize are not early. Where overlap falls well short of it, the all-reduces took longer than
// the backward left them (a loaded machine, a slow link, no progress); where launched early is
// small, the bucket layout holds the bytes back.
struct DDPStats {
  std::vector<int64_t> bucket_bytes;           // one entry per bucket, in launch order
  std::vector<std::vector<std::string>> bucket_parameters;  // the parameters of each bucket
  std::vector<DDPBucketTimes> bucket_times;    // one entry per bucket
  int64_t backwards = 0;          // backwards that were reduced (not under no_sync), Join's included
  int64_t timed_backwards = 0;    // of those, the ones with hooks (all but Join's shadow backwards)
                                  // since the buckets were last laid out
  int64_t bucket_rebuilds = 0;    // 0 or 1: the buckets were laid out again in the order the first
                                  // backward's gradients arrived (Note [Bucket rebuild] in bucket_rebuild.cpp);
                                  // the per-bucket figures and the timed sums start again then
  int64_t allreduces = 0;
  // Summed over the timed backwards (those since the last layout):
  double backward_seconds = 0;       // from the first hook to the start of finalize (backward computing)
  double finalize_wait_seconds = 0;  // finalize waiting for all-reduces: communication exposed
  double comm_seconds = 0;           // from the launch of bucket 0 to the last all-reduce seen complete
  int64_t hidden_bytes = 0;          // bytes whose all-reduce completed before finalize (Note [Overlap])
  int64_t launched_early_bytes = 0;  // bytes whose all-reduce was launched before the last gradient arrived
  double overlap_fraction() const;   // hidden_bytes / bytes reduced in timed backwards
  double launched_early_fraction() const;  // launched_early_bytes / bytes reduced in timed backwards
  std::string comm_hook;             // the comm hook's name: "allreduce" (the default), "fp16", "bf16"
                                     // or "zero" (ZeroRedundancyOptimizer's ZeroHook, zero.h)
};

// Which rank completed a bucket last (Note [Straggler attribution] in bucket_timeline.cpp): on average over the
// timed backwards, the rank whose gradient for this bucket became ready latest, and by how much
// after the earliest rank's.
struct BucketArrival {
  int last_rank = 0;
  double lateness_seconds = 0;  // mean per backward: latest rank's ready time - earliest rank's
};

// The lines `mini_train --ddp-stats` prints: totals, then one line per bucket. `arrivals` may be
// empty (a world of one, or not gathered).
std::string describe_ddp_stats(const DDPStats& stats, const std::vector<BucketArrival>& arrivals);

// A COLLECTIVE: every rank's tensor_memory(device) (tensor/memory.h), in rank order, on every rank.
std::vector<TensorMemory> peak_memory_per_rank(ProcessGroup& pg, Device device);
// One line per rank: "memory: peak 95.3 MiB of CPU tensors on rank 0: parameters 24.1, gradients
// 24.1, optimizer state 24.1, activations and the rest 23.0 MiB" (the kinds at the peak, Note
// [Memory kinds]; CUDA tensors: the peak alone), and the limit when one is set.
std::string describe_peak_memory(const std::vector<TensorMemory>& ranks, Device device);

}  // namespace mt::dist
