// Tracer: records what one process did during a few training steps, as timed spans on tracks, for a
// Chrome-trace / Perfetto JSON file (ui.perfetto.dev, chrome://tracing). The layers above mark what
// they do where it happens: the engine each backward node (autograd/detail/node_trace.h), DDP each bucket's
// ready -> launch -> done (distributed/ddp/detail/ddp_trace.h), mini_train the data, forward, optimizer and
// checkpoint phases. distributed/trace/trace_job.h aligns the ranks' clocks and merges their events into
// one file.
//
//   trace::Tracer tracer({.first_step = 2, .last_step = 3});
//   for (step = 1; ...; ++step) {
//     tracer.begin_step(step);             // records only while first_step <= step <= last_step
//     trace::Span forward("forward");      // ...
//   }
//   tracer.stop();
//
// Note [Free when off]: every mark starts with trace::active(), one relaxed load of a global
// pointer that is null unless a tracer is recording. Off (the default, and outside the step range)
// a mark costs that load and a branch the CPU predicts; names are built only when it is on. On, a
// span takes two clock readings and two short critical sections (open at its start, close at its
// end). Memory is bounded twice: only the step range records, and at most max_events are kept.
//
// Tracks: track 0 is the thread that trains (compute); a layer may open further tracks for work
// that overlaps it (DDP: one per bucket), because spans on one track must nest.
//
// Not here: sampling, GPU timelines (CUDA events), counters, or recording more than one thread's
// nested spans per track; the clock alignment and the file are distributed/trace/trace_job.h's.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace mt::trace {

class Tracer;

namespace detail {
inline std::atomic<Tracer*> active_tracer{nullptr};
}  // namespace detail

// The tracer recording now, or null (Note [Free when off]).
inline Tracer* active() { return detail::active_tracer.load(std::memory_order_relaxed); }

// The steady clock in nanoseconds: the time base of every event (and of dist::Work::finished_ns).
int64_t now_ns();

struct TracerOptions {
  int64_t first_step = 1;       // record steps first_step..last_step (1-based, inclusive)
  int64_t last_step = 3;
  size_t max_events = 1 << 20;  // a hard bound on memory; events beyond it are counted, not kept
};

// One Chrome-trace event, in this process's clock (nanoseconds).
struct Event {
  char phase = 'X';   // 'X' complete span, 's'/'f' flow start/end
  int track = 0;      // the Chrome "tid"
  int64_t begin_ns = 0;
  int64_t duration_ns = 0;  // 'X' only; -1 while open
  uint64_t flow_id = 0;     // 's'/'f' only
  std::string name;
  std::string args;   // a JSON object's members ("\"step\":3"), or empty
};

class Tracer {
 public:
  explicit Tracer(TracerOptions options = {});
  ~Tracer();  // stops recording if it still is
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Step `step` starts: recording turns on inside the range and off after it. What runs between the
  // start of last_step and the next begin_step (or stop) belongs to the last step: its checkpoint.
  void begin_step(int64_t step);
  void stop();  // recording off for good
  const TracerOptions& options() const { return options_; }

  // ---- recording (normally through Span and the layers' helpers) ----
  void complete(int track, std::string name, int64_t begin_ns, int64_t end_ns, std::string args = {});
  // A span whose end is not known yet: open() returns its index (kDropped past max_events), close()
  // sets its end. Spans still open when the file is written are left out.
  static constexpr size_t kDropped = ~size_t{0};
  size_t open(int track, std::string name, int64_t begin_ns);
  void close(size_t index, int64_t end_ns);
  void add_arg(size_t index, const char* key, int64_t value);
  // A flow arrow from (from_track, from_ns) to (to_track, to_ns): Chrome binds its start to the span
  // enclosing it on from_track and its end to the span enclosing it on to_track.
  void flow(const std::string& name, int from_track, int64_t from_ns, int to_track, int64_t to_ns);
  void name_track(int track, std::string name);

  // What a layer above wants a thing called in the trace (the engine: a parameter's name for its
  // AccumulateGrad), keyed by the thing's address.
  void set_name(const void* key, std::string name);
  const std::string* name_of(const void* key) const;

  // ---- output (distributed/trace/trace_job.h) ----
  // How this process's clock maps to the job's: job time = t + offset_ns - origin_ns (by default
  // offset 0 and origin the tracer's creation); `description` is a JSON object saying how the offset
  // was found, for the file.
  void set_clock(int64_t offset_ns, int64_t origin_ns, std::string description);
  const std::string& clock_description() const { return clock_description_; }
  // This process's events as Chrome-trace JSON objects joined by commas (no brackets), pid = `pid`,
  // sorted by time per track, in the job's clock in microseconds. Also the track names ("rank 0",
  // "compute", "bucket 1") as metadata events.
  std::string events_json(int pid) const;
  int64_t created_ns() const { return created_ns_; }
  size_t dropped() const;

 private:
  size_t push(Event e);  // its index, or kDropped
  TracerOptions options_;
  int64_t created_ns_;
  int64_t offset_ns_ = 0, origin_ns_;
  std::string clock_description_ = "{}";
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  size_t dropped_ = 0;
  uint64_t next_flow_ = 1;
  std::map<int, std::string> track_names_;
  std::map<const void*, std::string> names_;
};

// A span on `track` of the recording tracer, from construction to end() or destruction. Off, it
// holds a null tracer and does nothing (Note [Free when off]); it is two words either way, with
// the name kept by the tracer, so that an engine step pays no string when tracing is off.
class Span {
 public:
  Span() = default;
  explicit Span(const char* name, int track = 0) : tracer_(active()) {
    if (tracer_ != nullptr) [[unlikely]]
      start(name, track);
  }
  // For helpers that checked active() themselves and built a name.
  Span(Tracer* tracer, std::string name, int track = 0) : tracer_(tracer) {
    if (tracer_ != nullptr) start(std::move(name), track);
  }
  ~Span() {
    if (tracer_ != nullptr) [[unlikely]]
      end();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  // Attaches "key": value to the span's args (only when it records).
  void arg(const char* key, int64_t value);
  void end();  // records the span now; later calls and the destructor do nothing

 private:
  void start(std::string name, int track);
  Tracer* tracer_ = nullptr;
  size_t index_ = 0;  // the tracer's open event
};

// A span that began at `begin_ns` (taken with now_ns() earlier) and ends now, if recording.
inline void record_since(const char* name, int64_t begin_ns, int track = 0) {
  if (Tracer* t = active(); t != nullptr) [[unlikely]]
    t->complete(track, name, begin_ns, now_ns());
}

}  // namespace mt::trace
