// Tracer (see tracer.h): events appended under a mutex, written as Chrome-trace JSON objects.
//
// The format (Google's "Trace Event Format" document, the one chrome://tracing and Perfetto read):
// each event is an object with "name", "ph" (phase), "ts" (microseconds), "pid" and "tid"; a complete
// span 'X' has "dur"; flow events 's' and 'f' share an "id" and a "cat" and draw an arrow between
// the spans enclosing them ("bp": "e" binds the end to the enclosing span, not the next one);
// metadata events 'M' name processes and threads.
#include "trace/tracer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace mt::trace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Tracer::Tracer(TracerOptions options) : options_(options), created_ns_(now_ns()), origin_ns_(created_ns_) {}

void Tracer::set_clock(int64_t offset_ns, int64_t origin_ns, std::string description) {
  std::lock_guard<std::mutex> lock(mutex_);
  offset_ns_ = offset_ns, origin_ns_ = origin_ns;
  clock_description_ = std::move(description);
}

Tracer::~Tracer() { stop(); }

void Tracer::begin_step(int64_t step) {
  const bool inside = step >= options_.first_step && step <= options_.last_step;
  Tracer* expected = inside ? nullptr : this;
  // Only ever swaps between null and this tracer: a second tracer recording at the same time is not
  // supported, and is left alone rather than switched off.
  detail::active_tracer.compare_exchange_strong(expected, inside ? this : nullptr, std::memory_order_relaxed);
}

void Tracer::stop() {
  Tracer* expected = this;
  detail::active_tracer.compare_exchange_strong(expected, nullptr, std::memory_order_relaxed);
}

size_t Tracer::push(Event e) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.size() >= options_.max_events) {
    ++dropped_;
    return kDropped;
  }
  events_.push_back(std::move(e));
  return events_.size() - 1;
}

size_t Tracer::open(int track, std::string name, int64_t begin_ns) {
  return push(Event{.phase = 'X', .track = track, .begin_ns = begin_ns, .duration_ns = -1, .flow_id = 0,
                    .name = std::move(name), .args = {}});
}

void Tracer::close(size_t index, int64_t end_ns) {
  if (index == kDropped) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Event& e = events_[index];
  e.duration_ns = std::max<int64_t>(end_ns - e.begin_ns, 0);
}

void Tracer::add_arg(size_t index, const char* key, int64_t value) {
  if (index == kDropped) return;
  std::lock_guard<std::mutex> lock(mutex_);
  std::string& args = events_[index].args;
  if (!args.empty()) args += ",";
  args.append("\"").append(key).append("\":").append(std::to_string(value));
}

void Tracer::complete(int track, std::string name, int64_t begin_ns, int64_t end_ns, std::string args) {
  push(Event{.phase = 'X', .track = track, .begin_ns = begin_ns, .duration_ns = std::max<int64_t>(end_ns - begin_ns, 0),
             .flow_id = 0, .name = std::move(name), .args = std::move(args)});
}

void Tracer::flow(const std::string& name, int from_track, int64_t from_ns, int to_track, int64_t to_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.size() + 2 > options_.max_events) {  // both ends or neither: an unpaired flow is invalid
    dropped_ += 2;
    return;
  }
  const uint64_t id = next_flow_++;
  events_.push_back(Event{.phase = 's', .track = from_track, .begin_ns = from_ns, .duration_ns = 0, .flow_id = id,
                          .name = name, .args = {}});
  events_.push_back(Event{.phase = 'f', .track = to_track, .begin_ns = to_ns, .duration_ns = 0, .flow_id = id,
                          .name = name, .args = {}});
}

void Tracer::name_track(int track, std::string name) {
  std::lock_guard<std::mutex> lock(mutex_);
  track_names_[track] = std::move(name);
}

void Tracer::set_name(const void* key, std::string name) {
  std::lock_guard<std::mutex> lock(mutex_);
  names_[key] = std::move(name);
}

const std::string* Tracer::name_of(const void* key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = names_.find(key);
  return it == names_.end() ? nullptr : &it->second;  // entries are never erased: the pointer stays valid
}

size_t Tracer::dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}

namespace {

// A JSON string literal: quotes, backslashes and control bytes escaped.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string micros(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ns) / 1000.0);
  return buf;
}

std::string metadata(int pid, int tid, const char* what, const std::string& value, const char* key = "name") {
  return "{\"name\":\"" + std::string(what) + "\",\"ph\":\"M\",\"ts\":0,\"pid\":" + std::to_string(pid) +
         ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"" + key + "\":" + value + "}}";
}

}  // namespace

std::string Tracer::events_json(int pid) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<const Event*> sorted;
  for (const Event& e : events_)
    if (e.duration_ns >= 0) sorted.push_back(&e);  // a span still open has -1
  // By track, then time; at equal times the longer span first, so that a parent precedes its child.
  std::stable_sort(sorted.begin(), sorted.end(), [](const Event* a, const Event* b) {
    if (a->track != b->track) return a->track < b->track;
    if (a->begin_ns != b->begin_ns) return a->begin_ns < b->begin_ns;
    return a->duration_ns > b->duration_ns;
  });
  std::string out = metadata(pid, 0, "process_name", quoted("rank " + std::to_string(pid)));
  out.append(",").append(metadata(pid, 0, "process_sort_index", std::to_string(pid), "sort_index"));
  std::map<int, std::string> tracks = track_names_;
  tracks.emplace(0, "compute");
  for (const auto& [tid, name] : tracks) {
    out.append(",").append(metadata(pid, tid, "thread_name", quoted(name)));
    out.append(",").append(metadata(pid, tid, "thread_sort_index", std::to_string(tid), "sort_index"));
  }
  const std::string pid_tid = ",\"pid\":" + std::to_string(pid) + ",\"tid\":";
  for (const Event* e : sorted) {
    out += ",{\"name\":" + quoted(e->name) + ",\"ph\":\"" + e->phase + "\",\"ts\":" +
           micros(e->begin_ns + offset_ns_ - origin_ns_) + pid_tid + std::to_string(e->track);
    if (e->phase == 'X') out += ",\"dur\":" + micros(e->duration_ns);
    if (e->phase == 's' || e->phase == 'f') {
      // Ids are per process (Chrome matches flows across the whole file): the pid makes them unique.
      out += ",\"cat\":\"flow\",\"id\":" + std::to_string((static_cast<uint64_t>(pid) << 32) | e->flow_id);
      if (e->phase == 'f') out += ",\"bp\":\"e\"";
    }
    if (!e->args.empty()) out += ",\"args\":{" + e->args + "}";
    out += "}";
  }
  return out;
}

void Span::start(std::string name, int track) { index_ = tracer_->open(track, std::move(name), now_ns()); }

void Span::arg(const char* key, int64_t value) {
  if (tracer_ != nullptr) tracer_->add_arg(index_, key, value);
}

void Span::end() {
  if (tracer_ == nullptr) return;
  tracer_->close(index_, now_ns());
  tracer_ = nullptr;
}

}  // namespace mt::trace
