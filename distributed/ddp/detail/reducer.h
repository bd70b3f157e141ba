// The Reducer: DistributedDataParallel's algorithm (ddp.h is the wrapper users see). Its code is in
// the order it runs: reducer.cpp (construct the buckets, the ready hook, the launch),
// reducer_finalize.cpp (finalize, Join's shadow step), bucket_rebuild.cpp (the rebuild after the first
// step); what only watches it is bucket_timeline.h. Private to ddp/: not installed.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "distributed/ddp/detail/bucket_timeline.h"
#include "distributed/ddp/comm_hook.h"
#include "distributed/ddp/ddp.h"
#include "distributed/fault/detail/desync_guard.h"

namespace mt::dist::detail {

// Note [Gradients are bucket views]: each bucket is one flat, contiguous buffer, and every
// parameter's .grad is a view of its slice of it (PyTorch's gradient_as_bucket_view), registered as
// the parameter's gradient destination (Note [Gradient destination] in autograd/autograd_meta.h):
// whether .grad was zeroed in place or forgotten (opt.zero_grad()'s set_to_none), backward writes
// the gradients straight into the bucket, and the all-reduce needs no copy in or out. Only a .grad
// that someone set_grad to another tensor is copied into the bucket by the hook (reattach_view).
class Reducer {
 public:
  struct Slot {
    std::string name;
    Tensor param;
    Tensor view;          // the parameter's slice of its bucket, shaped like the parameter (undefined
                          // while the bucket is, Note [Buckets that live for one backward])
    size_t bucket = 0;
    int64_t offset = 0;   // where its gradient starts in the bucket
    bool ready = false;   // its gradient for this backward has arrived
    bool unused = false;  // ready from the start of this backward: forward's output does not reach it
                          // (Note [Unused parameters found after forward])
    bool divided = false; // its gradient arrived divided by the world size (Note [Dividing while writing])
  };
  struct Bucket {
    Tensor buffer;              // flat, contiguous, one dtype: numel gradients, then the guard; undefined
                                // between backwards when the hook releases buckets
    DesyncGuard guard;          // on its last DesyncGuard::kElements elements (Note [Desync guard]), or on
                                // a copy of them once the buffer is released
    int64_t numel = 0;          // gradient elements
    std::vector<size_t> slots;  // indices into slots_
    size_t pending = 0;         // slots not yet ready in this backward
    std::shared_ptr<Work> work;
    bool finished = false;      // the comm hook's finish() ran in this backward
  };

  Reducer(std::shared_ptr<ProcessGroup> pg, const DDPOptions& options)
      : pg_(std::move(pg)), options_(options), hook_(std::make_shared<AllreduceHook>()) {
    stats_.comm_hook = hook_->name();
    record_order_ = options_.rebuild_buckets;
  }

  // ---- construct (reducer.cpp)
  void build_buckets(const NamedTensors& params);
  std::vector<std::vector<size_t>> assign_buckets(const std::vector<size_t>& order) const;
  std::vector<bool> last_bucket_starts(const std::vector<size_t>& order) const;  // Note [Last bucket]
  void lay_out(const std::vector<std::vector<size_t>>& members);
  void allocate(size_t b);  // Note [Buckets that live for one backward]: the buffer, its views, its guard
  void release(size_t b);
  bool short_lived() const { return hook_->releases_buckets(); }
  size_t slot_count() const { return slots_.size(); }
  std::vector<DistributedDataParallel::BucketLayout> layout() const;
  void forget_destinations();
  Slot& slot(size_t i) { return slots_[i]; }
  void zero_grad();

  // ---- rebuild, once, before the second step (bucket_rebuild.cpp, Note [Bucket rebuild])
  void rebuild_buckets_once();
  bool same_members(std::vector<std::vector<size_t>> members) const;

  // ---- hook (reducer.cpp)
  static void on_gradient(const std::weak_ptr<Reducer>& weak, size_t index);
  void mark_ready(size_t index, const std::weak_ptr<Reducer>& weak);
  void count_ready(size_t index, bool in_finalize);
  void find_unused(const Tensor& output);
  void mark_unused_ready();
  void observe_completions();
  void retire_oldest();
  void bound_in_flight();
  bool reattach_view(Slot& slot);  // true: .grad already was the slot's view
  void prepare_backward();                // Note [Dividing while writing]

  // ---- launch (reducer.cpp)
  void launch_ready_buckets();
  void launch(size_t b);
  DesyncGuard make_guard(const Tensor& buffer, int64_t numel) const;
  BucketPoint point(size_t b) const;
  GradBucket grad_bucket(size_t b);
  void set_comm_hook(std::shared_ptr<CommHook> hook);

  // ---- finalize (reducer_finalize.cpp)
  void finalize();
  std::exception_ptr wait_for_buckets();
  void finish(size_t b);  // the hook's finish, then a short-lived bucket's release
  void shadow_backward();
  // Note [Straggler attribution] (bucket_timeline.cpp): a collective, every rank calls it.
  std::vector<BucketArrival> arrivals() { return timeline_.arrivals(*pg_); }
  void reset();

  bool no_sync_ = false;
  DDPStats stats_;

 private:
  std::shared_ptr<ProcessGroup> pg_;
  DDPOptions options_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::shared_ptr<CommHook> hook_;
  std::vector<size_t> unused_after_forward_;  // slots the last forward's output does not reach
  bool record_order_ = true;      // this backward appends to arrival_order_ (Note [Bucket rebuild])
  bool rebuild_done_ = false;
  std::vector<size_t> arrival_order_;  // slots in the order their gradients were final, first backward
  size_t next_launch_ = 0;        // the lowest-index bucket not yet launched in this backward
  size_t next_seen_ = 0;          // the lowest-index bucket not yet seen complete in this backward
  bool backward_started_ = false;
  bool prescale_ = false;         // this backward's gradients are divided as they are written
  // Times, stats, trace and heartbeat (Note [The reducer tells, the timeline watches]).
  BucketTimeline timeline_{stats_, this};
};

}  // namespace mt::dist::detail
