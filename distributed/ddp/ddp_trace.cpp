// DDP's marks in a trace (see ddp_trace.h): a bucket's ready and launch times are remembered until
// its launch and done turn them into spans, so nothing half-made is ever recorded (a flow whose
// end is missing, a span still open when recording stops).
#include "distributed/ddp/detail/ddp_trace.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace mt::dist::ddp_trace::detail {

namespace {

struct Marks {
  int64_t ready_ns = 0;   // 0: not ready-marked in this backward (finalize launched it)
  int64_t launch_ns = 0;
  int64_t elements = 0;
};

std::mutex marks_mutex;
std::map<std::pair<const void*, size_t>, Marks> marks;  // by (reducer, bucket); erased at done
std::pair<const void*, size_t> last_ready{nullptr, 0};  // the bucket whose ready hook runs now

int track_of(size_t bucket) { return static_cast<int>(bucket) + 1; }

}  // namespace

void bucket_ready(trace::Tracer&, const void* reducer, size_t bucket) {
  std::lock_guard<std::mutex> lock(marks_mutex);
  marks[{reducer, bucket}] = Marks{.ready_ns = trace::now_ns(), .launch_ns = 0, .elements = 0};
  last_ready = {reducer, bucket};
}

void bucket_launch(trace::Tracer& t, const void* reducer, size_t bucket, int64_t elements) {
  const int64_t now = trace::now_ns();
  Marks m;
  bool waited = false;  // ready in an earlier hook: it waited for a lower-index bucket
  {
    std::lock_guard<std::mutex> lock(marks_mutex);
    waited = last_ready != std::make_pair(reducer, bucket);
    Marks& slot = marks[{reducer, bucket}];
    slot.launch_ns = now;
    slot.elements = elements;
    m = slot;
  }
  const int track = track_of(bucket);
  t.name_track(track, "bucket " + std::to_string(bucket));
  if (m.ready_ns == 0) return;  // launched by finalize: no gradient completed it
  const std::string args = "\"bucket\":" + std::to_string(bucket);
  if (waited) t.complete(track, "queued", m.ready_ns, now, args);
  t.flow("bucket " + std::to_string(bucket) + " ready", 0, m.ready_ns, track, now);
}

void bucket_done(trace::Tracer& t, const void* reducer, size_t bucket, const Work& work) {
  const int64_t now = trace::now_ns();
  Marks m;
  {
    std::lock_guard<std::mutex> lock(marks_mutex);
    const auto it = marks.find({reducer, bucket});
    if (it == marks.end() || it->second.launch_ns == 0) return;  // launched before recording began
    m = it->second;
    marks.erase(it);
  }
  const int64_t finished = work.finished_ns();
  const int64_t end = finished >= m.launch_ns && finished <= now ? finished : now;
  t.complete(track_of(bucket), "allreduce bucket " + std::to_string(bucket), m.launch_ns, end,
             "\"bucket\":" + std::to_string(bucket) + ",\"elements\":" + std::to_string(m.elements) +
                 ",\"wait_returned_after_us\":" + std::to_string((now - m.launch_ns) / 1000));
}

}  // namespace mt::dist::ddp_trace::detail
