// BucketTimeline: what the reducer (detail/reducer.h) says about its buckets as a backward runs, and
// everything that only watches: the times and counts of DDPStats (Note [Overlap] in ddp_stats.h),
// the heartbeat's phase (Note [Heartbeat] in fault/heartbeat.h), the trace's bucket tracks
// (ddp_trace.h) and the sums behind straggler attribution (Note [Straggler attribution]).
//
// Note [The reducer tells, the timeline watches]: a bucket's life is ready -> launched -> done ->
// finished, and at each step several observers want to know. Called from the reducer one by one,
// they buried the algorithm (launch() was eight lines, two of them launching). The reducer now makes
// one call per step, and nothing here changes what is communicated: remove every call and DDP
// computes the same gradients.
//
// Not here: the desync guard (it changes the buffer, so it is part of the algorithm) and progress
// (ProcessGroup::progress moves the collectives).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "distributed/ddp/ddp_stats.h"
#include "distributed/errors.h"
#include "distributed/process_group/process_group.h"

namespace mt::dist::detail {

class BucketTimeline {
 public:
  // `stats` is the reducer's, filled from here; `reducer` names its tracks in a trace.
  BucketTimeline(DDPStats& stats, const void* reducer);

  // ---- construct, and again at a rebuild (Note [Bucket rebuild] in bucket_rebuild.cpp): new_layout forgets the
  // buckets and every timed sum, then one add_bucket per bucket, in bucket order.
  void new_layout();
  void add_bucket(int64_t bytes, std::vector<std::string> parameters);

  // ---- one backward, in the order the reducer runs it.
  void backward_began();                                 // the first ready hook of a backward
  void ready(size_t b);                                  // bucket b's last gradient arrived (in a hook)
  void ready_in_finalize(size_t b);                      // ... or finalize counted its unused ones ready
  void launched(size_t b, int64_t elements);             // its collective was issued
  void seen_done(size_t b);                              // its collective was seen complete while computing
  void finalize_began();                                 // the engine ran its last node
  void waiting(size_t b);                                // finalize waits for bucket b
  void waited(size_t b, const Work& work);               // ... and the wait returned
  // The backward is over: `timed` when it completed normally after hooks (not Join's shadow
  // backward, not a failed one), with `launched` buckets launched.
  void backward_finished(bool timed, size_t launched);

  // Per bucket, which rank's gradient arrived last (Note [Straggler attribution]). A collective over
  // `pg`: every rank calls it at the same point.
  std::vector<BucketArrival> arrivals(ProcessGroup& pg) const;

 private:
  struct Times {
    Clock::time_point ready_at, launched_at, done_at;
    bool seen_done = false;       // its Work was seen complete; done_at says when
    bool launched_early = false;  // launched while another bucket still waited for a gradient (Note [Overlap])
  };
  void record_times(size_t launched, Clock::time_point finalize_end);
  // Per bucket: the mean over timed backwards of when it became ready, in seconds since this
  // timeline was made; and that clock's reading now.
  std::vector<double> mean_ready_seconds() const;
  double seconds_now() const;

  DDPStats& stats_;
  const void* reducer_;
  std::vector<Times> times_;         // this backward's, per bucket
  size_t ready_buckets_ = 0;         // buckets whose last gradient has arrived in this backward
  std::vector<double> ready_sums_;   // per bucket: sum over timed backwards of (ready - epoch_), seconds
  Clock::time_point backward_start_, finalize_start_;
  const Clock::time_point epoch_;    // this rank's zero for the straggler sums
};

}  // namespace mt::dist::detail
