// DDP's marks in a trace (trace/tracer.h), made by the reducer's BucketTimeline (bucket_timeline.cpp)
// at the points they name. Each bucket b gets its own track ("bucket b", tid b + 1), because its
// communication overlaps the backward spans on the compute track:
//
//   compute   ... [AccumulateGrad fc2.weight] ... [DDP finalize wait]
//                          | ready (the gradient that completed bucket 0)
//                          v flow arrow
//   bucket 0               [queued][allreduce bucket 0 .............]
//                          ^ launch                                 ^ done
//
// "queued" is a bucket ready in an earlier hook than the one that launched it: it waited for a
// lower-index bucket (Note [Bucket launch order]). Launch is just before the comm hook runs; done is
// when the collective finished (Work::finished_ns), or, for backends that do not record it, when
// finalize's wait for it returned. Off, each call is one branch (Note [Free when off]).
#pragma once

#include <cstddef>
#include <cstdint>

#include "distributed/process_group/work.h"
#include "trace/tracer.h"

namespace mt::dist::ddp_trace {

namespace detail {
void bucket_ready(trace::Tracer& t, const void* reducer, size_t bucket);
void bucket_launch(trace::Tracer& t, const void* reducer, size_t bucket, int64_t elements);
void bucket_done(trace::Tracer& t, const void* reducer, size_t bucket, const Work& work);
}  // namespace detail

// The last gradient of `bucket` has arrived (inside that parameter's AccumulateGrad span).
inline void bucket_ready(const void* reducer, size_t bucket) {
  if (trace::Tracer* t = trace::active(); t != nullptr) [[unlikely]]
    detail::bucket_ready(*t, reducer, bucket);
}
// Its all-reduce (of `elements` values) has been issued.
inline void bucket_launch(const void* reducer, size_t bucket, int64_t elements) {
  if (trace::Tracer* t = trace::active(); t != nullptr) [[unlikely]]
    detail::bucket_launch(*t, reducer, bucket, elements);
}
// Finalize's wait for it returned.
inline void bucket_done(const void* reducer, size_t bucket, const Work& work) {
  if (trace::Tracer* t = trace::active(); t != nullptr) [[unlikely]]
    detail::bucket_done(*t, reducer, bucket, work);
}

}  // namespace mt::dist::ddp_trace
