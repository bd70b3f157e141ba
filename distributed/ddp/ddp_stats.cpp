// DDPStats' derived figure and its printed form, and the ranks' peak memory (see ddp_stats.h).
#include "distributed/ddp/ddp_stats.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "tensor/tensor.h"

namespace mt::dist {

namespace {
// `bytes` as a share of the bytes the timed backwards reduced.
double share_of_reduced(const DDPStats& s, int64_t bytes) {
  int64_t per_backward = 0;
  for (int64_t b : s.bucket_bytes) per_backward += b;
  const double reduced = static_cast<double>(per_backward) * static_cast<double>(s.timed_backwards);
  return reduced > 0 ? static_cast<double>(bytes) / reduced : 0.0;
}
}  // namespace

double DDPStats::overlap_fraction() const { return share_of_reduced(*this, hidden_bytes); }
double DDPStats::launched_early_fraction() const { return share_of_reduced(*this, launched_early_bytes); }

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
                "wait) %.3f ms; %.1f%% of the bytes reduced before backward ended (overlap, Note [Overlap]), "
                "%.1f%% launched before its last gradient arrived\n", ms(s.backward_seconds), ms(s.comm_seconds),
                ms(s.finalize_wait_seconds), 100.0 * s.overlap_fraction(), 100.0 * s.launched_early_fraction());
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

// Each rank's figures as doubles (exact below 2^53 bytes), all-gathered: 2 + kMemoryKinds per rank.
std::vector<TensorMemory> peak_memory_per_rank(ProcessGroup& pg, Device device) {
  const TensorMemory mine = tensor_memory(device);
  std::vector<double> row{static_cast<double>(mine.peak), static_cast<double>(mine.limit)};
  for (size_t k = 0; k < kMemoryKinds; ++k) row.push_back(static_cast<double>(mine.peak_by_kind[k]));
  const int64_t n = static_cast<int64_t>(row.size());
  Tensor all = empty({pg.size() * n}, {.dtype = DType::Float64, .device = pg.device()});
  pg.allgather_into(all, from_vector(row, {n}).to(pg.device()))->wait();
  const std::vector<double> values = all.to(kCPU).to_vector<double>();
  std::vector<TensorMemory> ranks(static_cast<size_t>(pg.size()));
  for (size_t r = 0; r < ranks.size(); ++r) {
    const double* v = values.data() + r * static_cast<size_t>(n);
    ranks[r] = {.peak = static_cast<size_t>(v[0]), .limit = static_cast<size_t>(v[1]), .has_kinds = mine.has_kinds};
    for (size_t k = 0; k < kMemoryKinds; ++k) ranks[r].peak_by_kind[k] = static_cast<size_t>(v[2 + k]);
  }
  return ranks;
}

std::string describe_peak_memory(const std::vector<TensorMemory>& ranks, Device device) {
  const auto mib = [](size_t bytes) { return static_cast<double>(bytes) / 1048576.0; };
  const char* where = device.is_cpu() ? "CPU" : "GPU";  // each rank its own GPU
  std::string out;
  char line[512];
  for (size_t r = 0; r < ranks.size(); ++r) {
    const TensorMemory& m = ranks[r];
    std::snprintf(line, sizeof line, "memory: peak %.1f MiB of %s tensors on rank %zu", mib(m.peak), where, r);
    out += line;
    if (m.has_kinds) {
      const auto kind = [&](MemoryKind k) { return mib(m.peak_by_kind[static_cast<size_t>(k)]); };
      std::snprintf(line, sizeof line, ": parameters %.1f, gradients %.1f, optimizer state %.1f, activations and "
                    "the rest %.1f MiB", kind(MemoryKind::kParameters), kind(MemoryKind::kGradients),
                    kind(MemoryKind::kOptimizerState), kind(MemoryKind::kOther));
      out += line;
    }
    if (m.limit > 0) out += " (limit " + format_mib(m.limit) + ")";
    out += "\n";
  }
  return out;
}

}  // namespace mt::dist
