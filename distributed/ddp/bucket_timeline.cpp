// BucketTimeline: the reducer's observers in one place (bucket_timeline.h).
#include "distributed/ddp/detail/bucket_timeline.h"

#include <algorithm>

#include "distributed/ddp/detail/ddp_trace.h"
#include "distributed/fault/heartbeat.h"

namespace mt::dist::detail {

namespace {
double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

BucketTimeline::BucketTimeline(DDPStats& stats, const void* reducer)
    : stats_(stats), reducer_(reducer), epoch_(Clock::now()) {}

void BucketTimeline::new_layout() {
  stats_.bucket_bytes.clear();
  stats_.bucket_parameters.clear();
  stats_.bucket_times.clear();
  times_.clear();
  ready_sums_.clear();
  stats_.timed_backwards = 0;
  stats_.backward_seconds = stats_.finalize_wait_seconds = stats_.comm_seconds = 0;
  stats_.hidden_bytes = stats_.launched_early_bytes = 0;
}

void BucketTimeline::add_bucket(int64_t bytes, std::vector<std::string> parameters) {
  stats_.bucket_bytes.push_back(bytes);
  stats_.bucket_parameters.push_back(std::move(parameters));
  stats_.bucket_times.emplace_back();
  times_.emplace_back();
  ready_sums_.push_back(0);
}

void BucketTimeline::backward_began() { backward_start_ = Clock::now(); }

void BucketTimeline::ready(size_t b) {
  ++ready_buckets_;
  times_[b].ready_at = Clock::now();
  ddp_trace::bucket_ready(reducer_, b);  // trace: bucket ready
}

void BucketTimeline::ready_in_finalize(size_t b) {
  ++ready_buckets_;
  times_[b].ready_at = finalize_start_;
}

void BucketTimeline::launched(size_t b, int64_t elements) {
  times_[b].launched_at = Clock::now();
  times_[b].launched_early = ready_buckets_ < times_.size();  // some gradient is still to come
  set_phase(Phase::Backward, static_cast<int64_t>(b));  // Note [Heartbeat]: a hang here names the bucket
  ddp_trace::bucket_launch(reducer_, b, elements);      // trace: bucket launch
  ++stats_.allreduces;
}

void BucketTimeline::seen_done(size_t b) {
  times_[b].seen_done = true;
  times_[b].done_at = Clock::now();
}

void BucketTimeline::finalize_began() { finalize_start_ = Clock::now(); }

void BucketTimeline::waiting(size_t b) { set_phase(Phase::Backward, static_cast<int64_t>(b)); }

void BucketTimeline::waited(size_t b, const Work& work) {
  ddp_trace::bucket_done(reducer_, b, work);  // trace: bucket done
  if (!times_[b].seen_done) seen_done(b);
}

void BucketTimeline::backward_finished(bool timed, size_t launched) {
  ++stats_.backwards;
  if (timed) record_times(launched, Clock::now());
  for (Times& t : times_) t.seen_done = t.launched_early = false;
  ready_buckets_ = 0;
}

// One finalized backward's timeline into the stats (Note [Overlap]). Finalize's wait is charged to
// the buckets in order: each to the extent it completed after finalize began and after the bucket
// before it, so the exposed times add up to the wait.
void BucketTimeline::record_times(size_t launched, Clock::time_point finalize_end) {
  ++stats_.timed_backwards;
  stats_.backward_seconds += seconds_between(backward_start_, finalize_start_);
  stats_.finalize_wait_seconds += seconds_between(finalize_start_, finalize_end);
  Clock::time_point charged_until = finalize_start_, last_done = backward_start_;
  for (size_t b = 0; b < launched; ++b) {
    const Times& bucket = times_[b];
    DDPBucketTimes& t = stats_.bucket_times[b];
    t.ready += seconds_between(backward_start_, bucket.ready_at);
    t.launched += seconds_between(backward_start_, bucket.launched_at);
    t.done += seconds_between(backward_start_, bucket.done_at);
    ready_sums_[b] += seconds_between(epoch_, bucket.ready_at);
    if (bucket.launched_early) stats_.launched_early_bytes += stats_.bucket_bytes[b];
    if (bucket.done_at <= finalize_start_) {
      ++t.hidden;
      stats_.hidden_bytes += stats_.bucket_bytes[b];
    } else {
      t.exposed += seconds_between(std::max(charged_until, finalize_start_), bucket.done_at);
    }
    charged_until = std::max(charged_until, bucket.done_at);
    last_done = std::max(last_done, bucket.done_at);
  }
  if (launched > 0) stats_.comm_seconds += seconds_between(times_[0].launched_at, last_done);
}

std::vector<double> BucketTimeline::mean_ready_seconds() const {
  std::vector<double> mean;
  for (double sum : ready_sums_) mean.push_back(sum / static_cast<double>(stats_.timed_backwards));
  return mean;
}

double BucketTimeline::seconds_now() const { return seconds_between(epoch_, Clock::now()); }

// Note [Straggler attribution]: which rank held a bucket up. Each rank sums, over its timed
// backwards, when each bucket became ready on its own clock (seconds since its reducer was made).
// Backward k is the same step on every rank, so rank r's mean minus rank 0's is how much later r's
// gradients were complete, plus the difference between the two clocks' zeros. That difference is
// measured here: right after a barrier every rank reads its clock, and the ranks leave a barrier
// at nearly the same moment (within its exit skew: microseconds on MPI, tens of them on Gloo). A
// collective, so every rank calls it; it costs one barrier and one small allgather.
std::vector<BucketArrival> BucketTimeline::arrivals(ProcessGroup& pg) const {
  if (pg.size() == 1 || stats_.timed_backwards == 0) return {};
  pg.barrier()->wait();
  std::vector<double> mine{seconds_now()};
  for (double ready : mean_ready_seconds()) mine.push_back(ready);
  std::vector<Tensor> all;
  pg.allgather(all, from_vector(mine, {static_cast<int64_t>(mine.size())}).to(pg.device()))->wait();
  std::vector<std::vector<double>> ranks;  // per rank: its clock after the barrier, then its mean ready times
  for (const Tensor& t : all) ranks.push_back(t.to(kCPU).to_vector<double>());
  std::vector<BucketArrival> out;
  for (size_t b = 0; b < ready_sums_.size(); ++b) {
    double earliest = 0, latest = 0;
    BucketArrival a;
    for (size_t r = 0; r < ranks.size(); ++r) {
      const double ready = ranks[r][b + 1] - (ranks[r][0] - ranks[0][0]);  // on rank 0's clock
      if (r == 0 || ready < earliest) earliest = ready;
      if (r == 0 || ready > latest) {
        latest = ready;
        a.last_rank = static_cast<int>(r);
      }
    }
    a.lateness_seconds = latest - earliest;
    out.push_back(a);
  }
  return out;
}

}  // namespace mt::dist::detail
