// The Reducer's finalize, run once per backward after the engine's last node, and Join's shadow
// step (see detail/reducer.h).
#include "distributed/ddp/detail/reducer.h"

#include <exception>
#include <sstream>

#include "trace/tracer.h"

namespace mt::dist::detail {

// Note [Finalize]: runs once per backward, after the engine's last node (queued by the first hook).
// 1. Buckets still pending hold parameters that got no gradient in this backward. With
//    find_unused_parameters their slots count as ready (Note [Unused parameters]), so every rank
//    still takes part in every bucket's all-reduce. Without it, that is an error naming the
//    parameters (the bucket was never launched here; a peer whose parameter did get a gradient
//    waits for it and fails at the collective timeout instead of hanging).
// 2. Launch what is left, in order (Note [Bucket launch order]); wait for every Work, then let the
//    comm hook finish each bucket (for the default hook there is nothing left to do).
// 3. Check every bucket's desync guard, in bucket order (Note [Desync guard]): on a mismatch every
//    rank gathers the others' points in the same collective, so all fail together, naming them.
// 4. Reset the counters for the next backward, also when this one failed.
//
// Note [Unused parameters]: an unused parameter's slot is all-reduced with what its .grad holds,
// which is what .grad would hold without DDP: zero after zero_grad (a .grad dropped by
// set_to_none becomes a zero slot), the local sum when earlier no_sync backwards used it, and,
// when nobody zeroed it, last step's average, which averaging over ranks leaves as it is (every
// rank holds the same). So the parameter's gradient is the one a single process on the combined
// batch would have, in each case.
//
// Note [No gradient, no step]: a backward that reaches no parameter (a loss that depends on none)
// fires no hook, so finalize is never queued and DDP takes no part: nothing is communicated, the
// .grad are untouched, and the backward is not counted (DDPStats::backwards). When every rank does
// it, training goes on in step. When only some ranks do, the others' all-reduces have no partner
// and fail at the collective timeout (or at the desync guard, if a later bucket pairs up with them).
void Reducer::finalize() {
  observe_completions();  // what completed during backward is hidden (Note [Overlap])
  timeline_.finalize_began();
  std::vector<std::string> unused;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].ready) continue;
    unused.push_back(slots_[i].name);
    if (!options_.find_unused_parameters) continue;
    reattach_view(slots_[i]);  // Note [Unused parameters]
    count_ready(i, true);
  }
  record_order_ = false;  // one backward's order is enough (Note [Bucket rebuild])
  const bool complete = unused.empty() || options_.find_unused_parameters;
  if (complete) launch_ready_buckets();
  trace::Span wait_span("DDP finalize wait");  // trace: finalize wait begin
  const std::exception_ptr error = wait_for_buckets();
  wait_span.end();  // trace: finalize wait end
  timeline_.backward_finished(!error && complete, next_launch_);
  reset();
  if (error) std::rethrow_exception(error);
  if (!complete) {
    std::ostringstream names;
    for (size_t i = 0; i < unused.size(); ++i) names << (i ? ", " : "") << "'" << unused[i] << "'";
    MT_FAIL("DDP on rank ", pg_->rank(), ": parameter", unused.size() > 1 ? "s " : " ", names.str(),
            " received no gradient in this backward, so its bucket could not be reduced. Make every "
            "parameter take part in the loss, or construct DDP with find_unused_parameters = true");
  }
}

// Finalize's steps 2 (the waiting) and 3: the first error, if any, after every launched bucket is done.
std::exception_ptr Reducer::wait_for_buckets() {
  std::exception_ptr error;
  for (size_t i = 0; i < buckets_.size(); ++i) {  // launched ones must finish before anyone touches .grad
    Bucket& bucket = buckets_[i];
    if (!bucket.work) continue;
    try {
      timeline_.waiting(i);
      bucket.work->wait();
      timeline_.waited(i, *bucket.work);
      if (!error && !bucket.finished) finish(i);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  for (size_t i = 0; i < buckets_.size() && !error && pg_->size() > 1; ++i) {
    if (!buckets_[i].work) continue;
    try {
      buckets_[i].guard.check(*pg_, point(i));
    } catch (...) {
      error = std::current_exception();
    }
  }
  return error;
}

// The comm hook's last word on bucket b; then a bucket it releases is released (Note [Buckets that
// live for one backward]), at a ready hook during backward or here in finalize.
void Reducer::finish(size_t b) {
  GradBucket view = grad_bucket(b);
  hook_->finish(*pg_, view);
  buckets_[b].finished = true;
  if (short_lived()) release(b);
}

// A rank without data takes part in the others' backward (Note [Join]): every bucket all-reduced
// with zero gradients, in order, guarded, counted as a step. Its .grad then holds the same average
// as theirs.
void Reducer::shadow_backward() {
  for (size_t b = 0; b < buckets_.size(); ++b)  // Note [Buckets that live for one backward]
    if (!buckets_[b].buffer.defined()) allocate(b);
  for (Bucket& b : buckets_) b.buffer.zero_();
  for (Slot& s : slots_) reattach_view(s);
  while (next_launch_ < buckets_.size()) launch(next_launch_++);
  const std::exception_ptr error = wait_for_buckets();
  timeline_.backward_finished(false, next_launch_);
  reset();
  if (error) std::rethrow_exception(error);
}

void Reducer::reset() {
  for (Slot& s : slots_) s.ready = s.unused = s.divided = false;
  unused_after_forward_.clear();
  for (Bucket& b : buckets_) {
    b.pending = b.slots.size();
    b.work.reset();
    b.finished = false;
  }
  next_launch_ = 0;
  next_seen_ = 0;
  backward_started_ = false;
}

}  // namespace mt::dist::detail
