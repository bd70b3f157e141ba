// DDPStats' derived figure and its printed form (see ddp_stats.h).
#include "distributed/ddp/ddp_stats.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace mt::dist {

double DDPStats::overlap_fraction() const {
  int64_t bytes = 0;
  for (int64_t b : bucket_bytes) bytes += b;
  const double reduced = static_cast<double>(bytes) * static_cast<double>(timed_backwards);
  return reduced > 0 ? static_cast<double>(hidden_bytes) / reduced : 0.0;
}

std::string describe_ddp_stats(const DDPStats& s, const std::vector<BucketArrival>& arrivals) {
  int64_t bytes = 0;
  for (int64_t b : s.bucket_bytes) bytes += b;
  const double n = static_cast<double>(std::max<int64_t>(1, s.timed_backwards));
  const auto ms = [n](double seconds) { return seconds / n * 1e3; };  // mean per backward, in ms
  char line[512];
  std::string out;
  std::snprintf(line, sizeof line, "DDP: %zu buckets, %lld bytes of gradients, %lld all-reduces over %lld backwards, "
                "comm hook %s\n", s.bucket_bytes.size(), static_cast<long long>(bytes),
                static_cast<long long>(s.allreduces), static_cast<long long>(s.backwards), s.comm_hook.c_str());
  out += line;
  if (s.bucket_rebuilds > 0)
    out += "DDP: buckets rebuilt in the order the first backward's gradients arrived; the figures below are "
           "from the " + std::to_string(s.timed_backwards) + " timed backwards since\n";
  std::snprintf(line, sizeof line, "DDP: per backward: computing %.3f ms, communication %.3f ms, exposed (finalize "
                "wait) %.3f ms; %.1f%% of the bytes reduced before backward ended (overlap, Note [Overlap])\n",
                ms(s.backward_seconds), ms(s.comm_seconds), ms(s.finalize_wait_seconds), 100.0 * s.overlap_fraction());
  out += line;
  for (size_t b = 0; b < s.bucket_times.size(); ++b) {
    const DDPBucketTimes& t = s.bucket_times[b];
    std::snprintf(line, sizeof line, "DDP: bucket %zu (%lld bytes, %zu parameters): ready %.3f ms, launched %.3f ms, "
                  "done %.3f ms, exposed %.3f ms, done before finalize in %.0f%% of backwards", b,
                  static_cast<long long>(s.bucket_bytes[b]), s.bucket_parameters[b].size(), ms(t.ready),
                  ms(t.launched), ms(t.done), ms(t.exposed), 100.0 * static_cast<double>(t.hidden) / n);
    out += line;
    if (b < arrivals.size()) {
      std::snprintf(line, sizeof line, "; last gradient from rank %d (%.3f ms after the first)",
                    arrivals[b].last_rank, arrivals[b].lateness_seconds * 1e3);
      out += line;
    }
    out += "\n";
  }
  return out;
}

}  // namespace mt::dist
