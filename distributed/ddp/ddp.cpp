// DistributedDataParallel and its Reducer, in the order they run: construct (fingerprint, broadcast,
// buckets), hook (mark ready), launch (in bucket order, pre-divided), finalize (wait, check, reset).
#include "distributed/ddp/ddp.h"

#include <algorithm>
#include <exception>
#include <map>
#include <sstream>

#include "autograd/accumulate_grad.h"
#include "autograd/engine.h"
#include "distributed/ddp/buffer_sync.h"
#include "distributed/ddp/ddp_fingerprint.h"
#include "distributed/ddp/bucket_timeline.h"
#include "distributed/ddp/unused_parameters.h"
#include "distributed/fault/desync_guard.h"
#include "distributed/fault/heartbeat.h"
#include "distributed/fault/replica_guard.h"
#include "autograd/grad_mode.h"
#include "tensor/raw_ops.h"
#include "trace/tracer.h"

namespace mt::dist {

namespace detail {

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
    Tensor view;          // the parameter's slice of its bucket, shaped like the parameter
    size_t bucket = 0;
    bool ready = false;   // its gradient for this backward has arrived
    bool unused = false;  // ready from the start of this backward: forward's output does not reach it
                          // (Note [Unused parameters found after forward])
  };
  struct Bucket {
    Tensor buffer;              // flat, contiguous, one dtype: numel gradients, then the guard
    DesyncGuard guard;          // on its last DesyncGuard::kElements elements (Note [Desync guard])
    int64_t numel = 0;          // gradient elements
    std::vector<size_t> slots;  // indices into slots_
    size_t pending = 0;         // slots not yet ready in this backward
    std::shared_ptr<Work> work;
  };

  Reducer(std::shared_ptr<ProcessGroup> pg, const DDPOptions& options)
      : pg_(std::move(pg)), options_(options), hook_(std::make_shared<AllreduceHook>()) {
    stats_.comm_hook = hook_->name();
    record_order_ = options_.rebuild_buckets;
  }

  // ---- construct --------------------------------------------------------------------------------
  // Note [Buckets]: parameters go into buckets in REVERSE registration order, because that is roughly
  // the order in which backward produces their gradients (the last layer first): the first bucket
  // fills, and can be all-reduced, while backward is still working on the early layers. A bucket
  // closes when the next parameter would push it past the cap; the first bucket has a small cap
  // (first_bucket_cap_mb) so that communication starts as early as possible. A bucket holds one
  // dtype; each dtype fills its own open bucket. Every rank builds the same buckets: the parameters
  // are the same (checked by the fingerprint) and the rule is deterministic.
  void build_buckets(const NamedTensors& params) {
    for (auto it = params.rbegin(); it != params.rend(); ++it)
      if (it->second.requires_grad())
        slots_.push_back(Slot{.name = it->first, .param = it->second, .view = Tensor(), .bucket = 0});
    std::vector<size_t> reverse_registration(slots_.size());
    for (size_t s = 0; s < slots_.size(); ++s) reverse_registration[s] = s;
    lay_out(assign_buckets(reverse_registration));
  }

  // Note [Buckets]'s rule: the slots in `order` into buckets, each a list of slot indices in that order.
  std::vector<std::vector<size_t>> assign_buckets(const std::vector<size_t>& order) const {
    std::map<DType, size_t> open;                  // dtype -> index of its open bucket
    std::vector<std::vector<size_t>> members;
    std::vector<int64_t> bytes;
    for (size_t s : order) {
      const Tensor& p = slots_[s].param;
      const int64_t size = p.numel() * static_cast<int64_t>(element_size(p.dtype()));
      auto o = open.find(p.dtype());
      if (o != open.end()) {
        const double cap_mb = o->second == 0 ? options_.first_bucket_cap_mb : options_.bucket_cap_mb;
        if (bytes[o->second] + size > static_cast<int64_t>(cap_mb * 1024 * 1024)) open.erase(o);
      }
      if (open.find(p.dtype()) == open.end()) {
        open[p.dtype()] = members.size();
        members.emplace_back();
        bytes.push_back(0);
      }
      members[open[p.dtype()]].push_back(s);
      bytes[open[p.dtype()]] += size;
    }
    return members;
  }

  // Makes the buckets `members` names and points every slot's .grad at its slice (Note [Gradients
  // are bucket views]). What .grad held is copied into the slice: at construction a gradient the
  // model already had, at a rebuild (Note [Bucket rebuild]) the last step's, so neither the
  // optimizer nor a no_sync accumulation notices that the memory moved.
  void lay_out(const std::vector<std::vector<size_t>>& members) {
    buckets_.clear();
    timeline_.new_layout();
    for (size_t b = 0; b < members.size(); ++b) {
      int64_t numel = 0, bytes = 0;
      for (size_t s : members[b]) {
        numel += slots_[s].param.numel();
        bytes += slots_[s].param.numel() * static_cast<int64_t>(element_size(slots_[s].param.dtype()));
      }
      const Tensor& first = slots_[members[b].front()].param;
      const Tensor buffer =
          zeros({numel + DesyncGuard::kElements}, {.dtype = first.dtype(), .device = first.device()});
      Bucket bucket{.buffer = buffer, .guard = make_guard(buffer, numel), .numel = numel, .slots = members[b],
                    .pending = members[b].size(), .work = nullptr};
      int64_t offset = 0;
      std::vector<std::string> names;
      for (size_t s : members[b]) {
        Slot& slot = slots_[s];
        slot.bucket = b;
        slot.view = raw::view(raw::narrow(bucket.buffer, 0, offset, slot.param.numel()), slot.param.sizes());
        offset += slot.param.numel();
        const Tensor old = slot.param.grad();
        if (old.defined()) slot.view.copy_(old);
        slot.param.set_grad(slot.view);
        set_grad_destination(slot.param, slot.view);
        names.push_back(slot.name);
      }
      timeline_.add_bucket(bytes, std::move(names));
      buckets_.push_back(std::move(bucket));
    }
  }

  // Note [Bucket rebuild]: reverse registration order is a guess at the order backward produces
  // gradients (Note [Buckets]); a model whose forward uses its modules in another order than it
  // registered them fills its buckets out of order, and a full bucket then waits for lower-index
  // ones (Note [Bucket launch order]). So, as PyTorch does after its first iteration, the first
  // synced backward records the order in which slots became ready (count_ready), and the next
  // training forward (or Join's shadow step) lays the buckets out again in that order, with the
  // same caps, once. The orders of the ranks may differ (hooks follow each rank's graph and timing),
  // and ranks whose buckets differ would pair the wrong buffers, so rank 0's order is broadcast and
  // every rank builds from it: one broadcast of one integer per parameter, in a collective every
  // rank reaches at the same step. Rank 0 sends -1s when it has no order (it joined before its first
  // backward), and then no rank rebuilds. Nor does any when the new buckets hold the same parameters
  // as the old ones (order inside a bucket does not change when it launches), so a model that
  // produces its gradients in reverse registration order keeps the buckets it was built with.
  // A rebuild copies what .grad holds into the new buckets (lay_out), and the .grad tensors are new
  // views; the parameters are the same tensors, so optimizers are unaffected. A comm hook built on
  // the old layout (ZeroHook: ZeRO's shards are cut from bucket_layout() when it is constructed,
  // zero.cpp) says so through CommHook::fixed_layout, and then the buckets stay as they were built.
  // DDPStats' per-bucket figures and timed sums start again at a rebuild, so they describe the
  // buckets they name (DDPStats::bucket_rebuilds counts it).
  void rebuild_buckets_once() {
    if (rebuild_done_ || !options_.rebuild_buckets || stats_.backwards == 0) return;
    rebuild_done_ = true;
    record_order_ = false;
    if (hook_->fixed_layout() || slots_.empty()) return;
    const size_t n = slots_.size();
    std::vector<int64_t> order(n, -1);
    if (pg_->rank() == 0 && arrival_order_.size() == n)
      std::copy(arrival_order_.begin(), arrival_order_.end(), order.begin());
    arrival_order_.clear();
    if (pg_->size() > 1) {
      Tensor wire = from_vector(order, {static_cast<int64_t>(n)}).to(pg_->device());
      pg_->broadcast(wire, 0)->wait();
      order = wire.to(kCPU).to_vector<int64_t>();
    }
    if (order[0] < 0) return;
    const std::vector<std::vector<size_t>> members = assign_buckets(std::vector<size_t>(order.begin(), order.end()));
    if (same_members(members)) return;
    lay_out(members);
    ++stats_.bucket_rebuilds;
  }

  // Whether `members` puts the same slots in each bucket as the present buckets, in any order.
  bool same_members(std::vector<std::vector<size_t>> members) const {
    if (members.size() != buckets_.size()) return false;
    for (size_t b = 0; b < members.size(); ++b) {
      std::vector<size_t> now = buckets_[b].slots;
      std::sort(now.begin(), now.end());
      std::sort(members[b].begin(), members[b].end());
      if (now != members[b]) return false;
    }
    return true;
  }

  size_t slot_count() const { return slots_.size(); }
  std::vector<DistributedDataParallel::BucketLayout> layout() const {
    std::vector<DistributedDataParallel::BucketLayout> out;
    for (const Bucket& b : buckets_) {
      DistributedDataParallel::BucketLayout l{.buffer = b.buffer, .numel = b.numel};
      for (size_t s : b.slots) {
        l.names.push_back(slots_[s].name);
        l.parameters.push_back(slots_[s].param);
        l.offsets.push_back(slots_[s].view.storage_offset() - b.buffer.storage_offset());
      }
      out.push_back(std::move(l));
    }
    return out;
  }
  void forget_destinations() {
    for (Slot& s : slots_) set_grad_destination(s.param, Tensor());
  }
  Slot& slot(size_t i) { return slots_[i]; }

  void zero_grad() {
    for (Bucket& b : buckets_) b.buffer.zero_();
    for (Slot& s : slots_) s.param.set_grad(s.view);
  }

  // ---- hook -------------------------------------------------------------------------------------
  // Note [Ready hooks]: AccumulateGrad runs a parameter's post-accumulate-grad hook once per backward,
  // after its .grad holds the full gradient of this backward (every use of the parameter summed). So
  // "hook ran" = "this slice of the bucket is final". The first hook of a backward also queues
  // finalize on the engine, which runs it after the last node.
  static void on_gradient(const std::weak_ptr<Reducer>& weak, size_t index) {
    std::shared_ptr<Reducer> self = weak.lock();
    if (!self) return;  // the DDP object is gone; the model trains on without it
    self->mark_ready(index, weak);
  }

  void mark_ready(size_t index, const std::weak_ptr<Reducer>& weak) {
    Slot& slot = slots_[index];
    reattach_view(slot);
    if (no_sync_) return;  // gradients accumulate in the buckets; the next synced backward reduces them
    if (!backward_started_) {
      backward_started_ = true;
      timeline_.backward_began();
      Engine::queue_callback([weak] {
        if (std::shared_ptr<Reducer> self = weak.lock()) self->finalize();
      });
      mark_unused_ready();
    }
    MT_CHECK(!slot.unused, "DDP on rank ", pg_->rank(), ": parameter '", slot.name, "' received a gradient, but the "
             "output of DDP's forward does not reach it, so it was reduced as unused when backward began (Note "
             "[Unused parameters found after forward]). Compute the loss from DDP's output only, or construct DDP "
             "with find_unused_parameters = false");
    MT_CHECK(!slot.ready, "DDP: parameter '", slot.name, "' received its gradient twice in one backward");
    observe_completions();
    count_ready(index, false);
    launch_ready_buckets();
  }

  // Slot `index` holds its final gradient for this backward: one fewer pending in its bucket. The
  // first synced backward also records the order (Note [Bucket rebuild]).
  void count_ready(size_t index, bool in_finalize) {
    Slot& slot = slots_[index];
    slot.ready = true;
    if (record_order_) arrival_order_.push_back(index);
    if (--buckets_[slot.bucket].pending > 0) return;
    if (in_finalize) timeline_.ready_in_finalize(slot.bucket);
    else timeline_.ready(slot.bucket);
  }

  // Note [Unused parameters found after forward]: with find_unused_parameters, DDP's forward walks
  // the autograd graph back from its output (reached_from, unused_parameters.h); a parameter whose
  // AccumulateGrad node it does not reach can get no gradient from a backward through that output.
  // The first hook of the backward marks those ready, their slots holding what .grad holds (Note
  // [Unused parameters]), so their buckets launch as soon as the used parameters beside them are
  // ready, during backward, and the buckets after them are not held back until finalize (Note
  // [Bucket launch order]). PyTorch's find_unused_parameters does the same. Why at the first hook
  // and not in forward: a forward with no backward after it (evaluation with grad mode on) must
  // leave no trace, and no_sync backwards, which reduce nothing, must not consume the marks. The
  // walk starts from the latest forward's output only; a loss that also uses a parameter outside it
  // (a weight penalty on the parameter itself) fails at that parameter's hook, naming it, since its
  // bucket may already have been reduced without its gradient. What the walk reaches but no
  // gradient arrives for (a node that returned none) is still found in finalize (Note [Finalize]).
  void find_unused(const Tensor& output) {
    unused_after_forward_.clear();
    if (!options_.find_unused_parameters || !GradMode::is_enabled()) return;
    std::vector<Tensor> params;
    for (const Slot& s : slots_) params.push_back(s.param);
    const std::vector<bool> reached = reached_from(output, params);
    for (size_t s = 0; s < slots_.size(); ++s)
      if (!reached[s]) unused_after_forward_.push_back(s);
  }

  void mark_unused_ready() {
    for (size_t s : unused_after_forward_) {
      reattach_view(slots_[s]);  // Note [Unused parameters]
      slots_[s].unused = true;
      count_ready(s, false);
    }
    unused_after_forward_.clear();
  }

  // Note [Progress] (process_group.h): each hook lets the buckets in flight advance (on MPI this is
  // what moves a bucket under 64 KiB; larger ones have the progress thread, Note [Progress thread]
  // in process_group_mpi.cpp) and notes which have completed (Note [Overlap]). Buckets complete in
  // launch order on Gloo's queue thread and NCCL's stream, and nearly so on MPI, so the look ends at
  // the first incomplete one; one that completed out of order is seen at a later look (done times
  // are upper bounds anyway).
  void observe_completions() {
    if (next_seen_ == next_launch_) return;  // nothing in flight
    pg_->progress();
    for (; next_seen_ < next_launch_ && buckets_[next_seen_].work->is_completed(); ++next_seen_)
      timeline_.seen_done(next_seen_);
  }

  // Keeps Note [Gradients are bucket views]: put the gradient into the bucket if .grad is elsewhere
  // (set_grad to another tensor), or zero the slot if .grad is undefined (a parameter that got no
  // gradient).
  static void reattach_view(Slot& slot) {
    const Tensor grad = slot.param.grad();
    if (grad.defined() && grad.storage() == slot.view.storage() &&
        grad.storage_offset() == slot.view.storage_offset())
      return;
    if (grad.defined()) slot.view.copy_(grad);
    else slot.view.zero_();
    slot.param.set_grad(slot.view);
  }

  // ---- launch -----------------------------------------------------------------------------------
  // Note [Bucket launch order]: buckets are all-reduced strictly in index order on every rank, even
  // when a later bucket is ready first. Collectives pair up across ranks by issue order (Note
  // [Collective order] in work.h); gradients do not become ready in the same order on every rank
  // (hooks follow the graph, and finalize launches what unused parameters left behind), so ranks
  // that launched whichever bucket was ready first would sum the wrong buffers or hang. A ready
  // bucket therefore waits until every lower-index bucket has been launched.
  void launch_ready_buckets() {
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(next_launch_++);
  }

  // Note [Averaging]: DDP's gradient is the MEAN over ranks (each rank's loss is a mean over its own
  // examples, so the mean over ranks is the mean over the whole batch). The default comm hook
  // (AllreduceHook in comm_hook.cpp) divides the bucket by the world size in place, then all-reduces
  // with SUM. Every backend here has ReduceOp::Avg (a SUM, then the division), so why divide first?
  // (1) One rounding order on every backend: each rank computes g/world and the all-reduce adds
  // those, so Gloo, MPI and NCCL round the same way and the result does not depend on which backend
  // divides where. (2) Compressing hooks need it: a float16 SUM of undivided gradients can exceed
  // float16's 65504 long before their average does (Note [fp16 compression]). Dividing first costs
  // the same one pass over the bucket as dividing after. A registered comm hook replaces this step;
  // it must leave the same average (comm_hook.h).
  void launch(size_t b) {
    Bucket& bucket = buckets_[b];
    timeline_.launched(b, bucket.numel);
    if (pg_->size() > 1) bucket.guard.write(point(b));  // Note [Desync guard]; one rank cannot disagree
    GradBucket view = grad_bucket(b);
    bucket.work = hook_->launch(*pg_, view);
  }

  // The desync guard on the last elements of a bucket's buffer, sized for the comm hook's wire dtype.
  DesyncGuard make_guard(const Tensor& buffer, int64_t numel) const {
    return DesyncGuard(raw::narrow(buffer, 0, numel, DesyncGuard::kElements), pg_->size(),
                       hook_->wire_dtype(buffer.dtype()));
  }

  // Where this rank is, for bucket b's all-reduce in this backward (Note [Desync guard]).
  BucketPoint point(size_t b) const {
    return BucketPoint{.step = stats_.backwards, .bucket = static_cast<int64_t>(b),
                       .buckets = static_cast<int64_t>(buckets_.size()), .numel = buckets_[b].numel,
                       .dtype = static_cast<int64_t>(buckets_[b].buffer.dtype())};
  }

  GradBucket grad_bucket(size_t b) {
    return GradBucket{.index = b, .buffer = buckets_[b].buffer, .parameter_names = &stats_.bucket_parameters[b]};
  }

  void set_comm_hook(std::shared_ptr<CommHook> hook) {
    MT_CHECK(hook != nullptr, "DDP::register_comm_hook: the hook is null");
    MT_CHECK(stats_.backwards == 0 && !backward_started_, "DDP::register_comm_hook: register the hook before "
             "the first backward, so that every backward's buckets are treated alike");
    hook_ = std::move(hook);
    stats_.comm_hook = hook_->name();
    for (Bucket& b : buckets_) b.guard = make_guard(b.buffer, b.numel);
  }

  // ---- finalize ---------------------------------------------------------------------------------
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
  void finalize() {
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
  std::exception_ptr wait_for_buckets() {
    std::exception_ptr error;
    for (size_t i = 0; i < buckets_.size(); ++i) {  // launched ones must finish before anyone touches .grad
      Bucket& bucket = buckets_[i];
      if (!bucket.work) continue;
      try {
        timeline_.waiting(i);
        bucket.work->wait();
        timeline_.waited(i, *bucket.work);
        if (!error) {
          GradBucket view = grad_bucket(i);
          hook_->finish(*pg_, view);
        }
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

  // A rank without data takes part in the others' backward (Note [Join]): every bucket all-reduced
  // with zero gradients, in order, guarded, counted as a step. Its .grad then holds the same average
  // as theirs.
  void shadow_backward() {
    for (Bucket& b : buckets_) b.buffer.zero_();
    for (Slot& s : slots_) reattach_view(s);
    while (next_launch_ < buckets_.size()) launch(next_launch_++);
    const std::exception_ptr error = wait_for_buckets();
    timeline_.backward_finished(false, next_launch_);
    reset();
    if (error) std::rethrow_exception(error);
  }

  // Note [Straggler attribution]: which rank held a bucket up. Each rank sums, over its timed
  // backwards, when each bucket became ready on its own clock (seconds since its reducer was made).
  // Backward k is the same step on every rank, so rank r's mean minus rank 0's is how much later r's
  // gradients were complete, plus the difference between the two clocks' zeros. That difference is
  // measured here: right after a barrier every rank reads its clock, and the ranks leave a barrier
  // at nearly the same moment (within its exit skew: microseconds on MPI, tens of them on Gloo). A
  // collective, so every rank calls it; it costs one barrier and one small allgather.
  std::vector<BucketArrival> arrivals() {
    if (pg_->size() == 1 || stats_.timed_backwards == 0) return {};
    pg_->barrier()->wait();
    std::vector<double> mine{timeline_.seconds_now()};
    for (double ready : timeline_.mean_ready_seconds()) mine.push_back(ready);
    std::vector<Tensor> all;
    pg_->allgather(all, from_vector(mine, {static_cast<int64_t>(mine.size())}).to(pg_->device()))->wait();
    std::vector<std::vector<double>> ranks;  // per rank: its clock after the barrier, then its mean ready times
    for (const Tensor& t : all) ranks.push_back(t.to(kCPU).to_vector<double>());
    std::vector<BucketArrival> out;
    for (size_t b = 0; b < buckets_.size(); ++b) {
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

  void reset() {
    for (Slot& s : slots_) s.ready = s.unused = false;
    unused_after_forward_.clear();
    for (Bucket& b : buckets_) {
      b.pending = b.slots.size();
      b.work.reset();
    }
    next_launch_ = 0;
    next_seen_ = 0;
    backward_started_ = false;
  }

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
  // Times, stats, trace and heartbeat (Note [The reducer tells, the timeline watches]).
  BucketTimeline timeline_{stats_, this};
};

}  // namespace detail

// ---- construct ----------------------------------------------------------------------------------
DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> process_group, DDPOptions options)
    : module_(std::move(module)), process_group_(std::move(process_group)),
      broadcast_buffers_(options.broadcast_buffers) {
  MT_CHECK(module_ != nullptr && process_group_ != nullptr, "DDP: module and process group must be given");
  register_module("module", module_);
  ProcessGroup& pg = *process_group_;
  const NamedTensors params = module_->named_parameters();

  // 1. Same parameters everywhere (ddp_fingerprint.h): a mismatch is an error naming the first
  //    differing parameter and the ranks, here, not a failed or hung all-reduce far away.
  check_same_parameters(pg, params);

  // 2. Same values everywhere: rank 0's parameters (and buffers) are copied to every rank, so that
  //    identical gradients keep identical replicas. All broadcasts are issued, then waited for.
  {
    NoGradGuard no_grad;
    std::vector<Tensor> tensors;
    for (const auto& [name, p] : params) tensors.push_back(p);
    if (options.broadcast_buffers)
      for (const auto& [name, b] : module_->named_buffers()) tensors.push_back(b);
    std::vector<std::shared_ptr<Work>> works;
    for (Tensor& t : tensors) works.push_back(pg.broadcast(t, 0));
    for (auto& w : works) w->wait();
  }

  // 3. Buckets and hooks.
  reducer_ = std::make_shared<detail::Reducer>(process_group_, options);
  reducer_->build_buckets(params);
  const std::weak_ptr<detail::Reducer> weak = reducer_;
  for (size_t i = 0; i < reducer_->slot_count(); ++i)
    reducer_->slot(i).param.register_post_accumulate_grad_hook(
        [weak, i](const Tensor&) { detail::Reducer::on_gradient(weak, i); });
}

// The model outlives its DDP wrapper: its gradients go back to the engine (Note [Gradient destination]).
DistributedDataParallel::~DistributedDataParallel() { reducer_->forget_destinations(); }

Tensor DistributedDataParallel::forward(const Tensor& input) {
  set_phase(Phase::Forward);  // Note [Heartbeat]
  if (module_->is_training() && GradMode::is_enabled()) reducer_->rebuild_buckets_once();
  sync_buffers();
  Tensor output = module_->forward(input);
  reducer_->find_unused(output);  // Note [Unused parameters found after forward]
  return output;
}

// Note [Buffer broadcast] (buffer_sync.cpp): rank 0's buffers, before each training forward.
void DistributedDataParallel::sync_buffers() {
  if (broadcast_buffers_ && module_->is_training()) broadcast_buffers(*process_group_, module_->named_buffers());
}

void DistributedDataParallel::zero_grad() { reducer_->zero_grad(); }

void DistributedDataParallel::register_comm_hook(std::shared_ptr<CommHook> hook) {
  reducer_->set_comm_hook(std::move(hook));
}

DistributedDataParallel::NoSync::NoSync(std::shared_ptr<detail::Reducer> reducer)
    : reducer_(std::move(reducer)), previous_(reducer_->no_sync_) {
  reducer_->no_sync_ = true;
}

DistributedDataParallel::NoSync::~NoSync() { reducer_->no_sync_ = previous_; }

DistributedDataParallel::NoSync DistributedDataParallel::no_sync() { return NoSync(reducer_); }

void DistributedDataParallel::shadow_backward() {
  reducer_->rebuild_buckets_once();  // the active ranks' forward does (Note [Bucket rebuild])
  sync_buffers();  // the active ranks' forward broadcasts them first (Note [Buffer broadcast])
  reducer_->shadow_backward();
}

void DistributedDataParallel::check_replicas(const std::string& when) {
  dist::check_replicas(*process_group_, module_->named_parameters(), when);
}

std::vector<DistributedDataParallel::BucketLayout> DistributedDataParallel::bucket_layout() const {
  return reducer_->layout();
}

const DDPStats& DistributedDataParallel::stats() const { return reducer_->stats_; }

std::vector<BucketArrival> DistributedDataParallel::bucket_arrivals() { return reducer_->arrivals(); }

}  // namespace mt::dist
