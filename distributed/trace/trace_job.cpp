// One trace for a job (see trace_job.h): clock alignment at the start, the gather and the file at
// the end.
//
// Note [Aligning the ranks' clocks]: each rank timestamps its events with its own steady clock
// (CLOCK_MONOTONIC). Processes on one machine share that clock exactly; machines do not (each
// counts from its own boot). The trace is drawn in rank 0's clock: rank r adds offset_r to its
// times, estimated at the start the way NTP does, with a few rounds of
//     t0 = now();  barrier();  rank 0: T = now();  broadcast T from rank 0;  t1 = now()
// Rank 0 reads T only after the barrier completed, i.e. after every rank entered it, after their t0;
// rank r reads t1 after T arrived. So T happened between t0 and t1, and offset_r = T - (t0 + t1) / 2
// is off by at most (t1 - t0) / 2, the round's round trip halved. We keep the round with the
// smallest round trip (the one least disturbed by scheduling). The rounds go through the process
// group, not the store, because an MPI job has no store. Ranks on rank 0's host use offset 0 (the
// same clock, exactly); their estimate is still written to the file ("otherData"), a check on the
// method: it must lie within half its round trip of 0.
//
// The gather: every rank serialises its events to JSON text (already in rank 0's clock) and the
// texts are all-gathered as int64 words (allgather needs equal sizes: lengths first, then the
// texts padded to the longest). Rank 0 joins them into one "traceEvents" array.
#include "distributed/trace/trace_job.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/check.h"
#include "tensor/output_file.h"

namespace mt::dist {

namespace {

constexpr int kRounds = 8;

struct ClockEstimate {
  int64_t offset_ns = 0;     // add to this rank's times to get rank 0's
  int64_t estimate_ns = 0;   // what the rounds measured (used only off rank 0's host)
  int64_t round_trip_ns = 0;
  std::string host;
};

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// Every rank's string on every rank, 8 bytes per int64 word, on the group's device.
std::vector<std::string> allgather_strings(ProcessGroup& pg, const std::string& s) {
  std::vector<Tensor> lengths;
  pg.allgather(lengths, from_vector(std::vector<int64_t>{static_cast<int64_t>(s.size())}, {1}).to(pg.device()))
      ->wait();
  size_t longest = 0;
  std::vector<size_t> sizes;
  for (const Tensor& l : lengths) {
    sizes.push_back(static_cast<size_t>(l.to(kCPU).to_vector<int64_t>()[0]));
    longest = std::max(longest, sizes.back());
  }
  const size_t words = std::max<size_t>((longest + 7) / 8, 1);
  std::vector<int64_t> padded(words, 0);
  std::memcpy(padded.data(), s.data(), s.size());
  std::vector<Tensor> gathered;
  pg.allgather(gathered, from_vector(padded, {static_cast<int64_t>(words)}).to(pg.device()))->wait();
  std::vector<std::string> out;
  for (size_t r = 0; r < gathered.size(); ++r) {
    const std::vector<int64_t> w = gathered[r].to(kCPU).to_vector<int64_t>();
    std::string text(sizes[r], '\0');
    std::memcpy(text.data(), w.data(), sizes[r]);
    out.push_back(std::move(text));
  }
  return out;
}

// Note [Aligning the ranks' clocks]. Also returns rank 0's tracer start (the file's time zero) in origin_ns.
ClockEstimate estimate_clock(ProcessGroup& pg, int64_t own_start_ns, int64_t* origin_ns) {
  ClockEstimate c;
  c.host = host_name();
  c.round_trip_ns = std::numeric_limits<int64_t>::max();
  for (int k = 0; k < kRounds; ++k) {
    const int64_t t0 = trace::now_ns();
    pg.barrier()->wait();
    Tensor t = from_vector(std::vector<int64_t>{pg.rank() == 0 ? trace::now_ns() : 0, own_start_ns}, {2})
                   .to(pg.device());
    pg.broadcast(t, 0)->wait();
    const int64_t t1 = trace::now_ns();
    const std::vector<int64_t> v = t.to(kCPU).to_vector<int64_t>();
    *origin_ns = v[1];
    if (pg.rank() != 0 && t1 - t0 < c.round_trip_ns) {
      c.round_trip_ns = t1 - t0;
      c.estimate_ns = v[0] - (t0 + t1) / 2;
    }
  }
  if (pg.rank() == 0) c.round_trip_ns = 0;
  const std::vector<std::string> hosts = allgather_strings(pg, c.host);
  c.offset_ns = hosts[0] == c.host ? 0 : c.estimate_ns;
  return c;
}

// What the file says about the clocks, per rank: {"rank":r,"host":..,"offset_us":..,"estimate_us":..,"round_trip_us":..}.
std::string clock_json(int rank, const ClockEstimate& c) {
  std::string host;
  for (char ch : c.host)
    if (ch != '"' && ch != '\\' && static_cast<unsigned char>(ch) >= 0x20) host += ch;
  return "{\"rank\":" + std::to_string(rank) + ",\"host\":\"" + host + "\",\"offset_us\":" +
         std::to_string(static_cast<double>(c.offset_ns) / 1e3) + ",\"estimate_us\":" +
         std::to_string(static_cast<double>(c.estimate_ns) / 1e3) + ",\"round_trip_us\":" +
         std::to_string(static_cast<double>(c.round_trip_ns) / 1e3) + "}";
}

}  // namespace

std::unique_ptr<trace::Tracer> start_job_trace(ProcessGroup* pg, trace::TracerOptions options) {
  MT_CHECK(options.first_step >= 1 && options.first_step <= options.last_step, "trace: the step range ",
           options.first_step, ":", options.last_step, " must be A:B with 1 <= A <= B");
  auto tracer = std::make_unique<trace::Tracer>(options);
  ClockEstimate c;
  c.host = host_name();
  int64_t origin_ns = tracer->created_ns();
  if (pg != nullptr && pg->size() > 1) c = estimate_clock(*pg, tracer->created_ns(), &origin_ns);
  tracer->set_clock(c.offset_ns, origin_ns, clock_json(pg != nullptr ? pg->rank() : 0, c));
  return tracer;
}

void write_job_trace(trace::Tracer& tracer, ProcessGroup* pg, const std::string& path) {
  tracer.stop();
  const int rank = pg != nullptr ? pg->rank() : 0;
  // One rank's part: its events, then lines for "otherData" (no event contains a newline).
  const std::string part = tracer.events_json(rank) + '\n' + tracer.clock_description() + '\n' +
                           std::to_string(tracer.dropped());
  const std::vector<std::string> parts =
      pg != nullptr && pg->size() > 1 ? allgather_strings(*pg, part) : std::vector<std::string>{part};
  if (rank != 0) return;
  std::string events, clocks;
  size_t dropped = 0;
  for (const std::string& p : parts) {
    const size_t first = p.find('\n'), second = p.find('\n', first + 1);
    events.append(events.empty() ? "" : ",").append(p, 0, first);
    clocks.append(clocks.empty() ? "" : ",").append(p, first + 1, second - first - 1);
    dropped += std::stoull(p.substr(second + 1));
  }
  const trace::TracerOptions& o = tracer.options();
  const std::string file = "{\"traceEvents\":[" + events + "],\n\"displayTimeUnit\":\"ms\",\"otherData\":{" +
                           "\"steps\":\"" + std::to_string(o.first_step) + ":" + std::to_string(o.last_step) +
                           "\",\"dropped_events\":" + std::to_string(dropped) + ",\"clocks\":[" + clocks + "]}}\n";
  // A viewer, or the next run, sees the old file or the whole new one (Note [Output files]).
  write_file_atomically(path, file, "write_job_trace");
}

}  // namespace mt::dist
