// The Reducer's construction, ready hook and launch (see detail/reducer.h), in the order they run.
#include "distributed/ddp/detail/reducer.h"

#include <map>

#include "autograd/accumulate_grad.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "distributed/ddp/detail/unused_parameters.h"
#include "tensor/memory.h"
#include "tensor/raw_ops.h"

namespace mt::dist::detail {

// Note [Buckets]: parameters go into buckets in REVERSE registration order, because that is roughly
// the order in which backward produces their gradients (the last layer first): the first bucket
// fills, and can be all-reduced, while backward is still working on the early layers. A bucket
// closes when the next parameter would push it past the cap; the first bucket has a small cap
// (first_bucket_cap_mb) so that communication starts as early as possible, and the last bucket
// begins where the last parameters fit in last_bucket_cap_mb (Note [Last bucket]), so that little
// is left to communicate when backward ends. A bucket holds one dtype; each dtype fills its own
// open bucket. Every rank builds the same buckets: the parameters are the same (checked by the
// fingerprint) and the rule is deterministic.
void Reducer::build_buckets(const NamedTensors& params) {
  for (auto it = params.rbegin(); it != params.rend(); ++it)
    if (it->second.requires_grad())
      slots_.push_back(Slot{.name = it->first, .param = it->second, .view = Tensor(), .bucket = 0});
  std::vector<size_t> reverse_registration(slots_.size());
  for (size_t s = 0; s < slots_.size(); ++s) reverse_registration[s] = s;
  lay_out(assign_buckets(reverse_registration));
}

namespace {
int64_t gradient_bytes(const Tensor& param) {
  return param.numel() * static_cast<int64_t>(element_size(param.dtype()));
}
int64_t mib_to_bytes(double mib) { return static_cast<int64_t>(mib * 1024 * 1024); }
}  // namespace

// Note [Buckets]'s rule: the slots in `order` into buckets, each a list of slot indices in that order.
std::vector<std::vector<size_t>> Reducer::assign_buckets(const std::vector<size_t>& order) const {
  const std::vector<bool> opens_last = last_bucket_starts(order);
  std::map<DType, size_t> open;                  // dtype -> index of its open bucket
  std::vector<std::vector<size_t>> members;
  std::vector<int64_t> bytes;
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t s = order[i];
    const Tensor& p = slots_[s].param;
    const int64_t size = gradient_bytes(p);
    auto o = open.find(p.dtype());
    if (o != open.end()) {
      const double cap_mb = o->second == 0 ? options_.first_bucket_cap_mb : options_.bucket_cap_mb;
      if (opens_last[i] || bytes[o->second] + size > mib_to_bytes(cap_mb)) open.erase(o);
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

// Note [Last bucket]: the bucket that holds the last gradient of a backward is launched by the last
// hook, when nothing is left to compute, so all of its bytes are exposed (Note [Overlap] in
// ddp_stats.h), and every parameter whose gradient arrived early but shares that bucket waits with
// it. A transformer shows it at its worst: its token embedding (tied to the head: used last in
// forward and first in backward, but complete only when the lookup, the first layer, adds its part)
// and its positions arrive last, and with the default caps the GPT preset's second bucket held them
// beside three of its four blocks: 76 % of the bytes launched at the end. So the last bucket is
// capped too: for each dtype, it begins at the longest run of the last slots in `order` whose
// gradients fit in last_bucket_cap_mb together (at least the last slot), and the bucket before it
// closes there. The cut only adds a boundary; the other caps still apply inside it. The preset's
// last bucket is then the embeddings, block 0 and block 1's first LayerNorm (958 KB), and the rest
// of blocks 1 and 2 is launched while block 0's backward runs: 71 % of the bytes before the last
// gradient (docs/ddp.md). The price is one more collective per step, one more latency: nothing on
// MPI's shared memory; at a thousand GPUs the preset would rather have two buckets (docs/ddp.md,
// "The step at scale").
// Every rank still builds the same buckets: the rule reads the order (reverse registration, or
// rank 0's broadcast order at a rebuild) and the sizes, nothing else. It decides no value: each
// element is reduced on its own, so the gradients are the same whatever the layout (bit for bit at
// world 2, where an element's reduction is one addition; at larger worlds a backend may pick its
// summation order by the buffer's size, as Gloo does, Note [Allreduce algorithm]).
// PyTorch has both small buckets, one at a time: its constructor fills buckets in registration
// order with a 1 MiB cap on the first and reverses them (torch/nn/parallel/distributed.py, 1.13:
// the parameters defined first get a small bucket of their own, so that their gradients, the last
// of backward, do not hold up a large one), so its small bucket is the LAST reduced; its rebuild
// (Reducer::rebuild_buckets, torch/csrc/distributed/c10d/reducer.cpp) fills in gradient order with
// [first_bucket_bytes_cap, bucket_bytes_cap], a small FIRST bucket, unless DDP_SET_LAST_BUCKET_CAP=1
// reverses it. Here both ends are small, at construction and at the rebuild: one rule.
// last_bucket_cap_mb = 0 turns it off (so does a cap at least the size of the model).
std::vector<bool> Reducer::last_bucket_starts(const std::vector<size_t>& order) const {
  std::vector<bool> starts(order.size(), false);
  if (options_.last_bucket_cap_mb <= 0) return starts;
  std::map<DType, int64_t> after;  // dtype -> bytes of its slots from position i to the end of `order`
  std::map<DType, size_t> start;   // dtype -> the position its last bucket begins at, so far
  for (size_t i = order.size(); i-- > 0;) {
    const Tensor& p = slots_[order[i]].param;
    const int64_t bytes = after[p.dtype()] += gradient_bytes(p);
    if (!start.contains(p.dtype()) || bytes <= mib_to_bytes(options_.last_bucket_cap_mb)) start[p.dtype()] = i;
  }
  for (const auto& [dtype, i] : start) starts[i] = true;
  return starts;
}

// Makes the buckets `members` names and points every slot's .grad at its slice (Note [Gradients
// are bucket views]). What .grad held is copied into the slice: at construction a gradient the
// model already had, at a rebuild (Note [Bucket rebuild]) the last step's, so neither the
// optimizer nor a no_sync accumulation notices that the memory moved. Under a hook that releases
// buckets, no buffer is made yet (Note [Buckets that live for one backward]).
void Reducer::lay_out(const std::vector<std::vector<size_t>>& members) {
  buckets_.clear();
  timeline_.new_layout();
  for (size_t b = 0; b < members.size(); ++b) {
    int64_t numel = 0, bytes = 0;
    std::vector<std::string> names;
    for (size_t s : members[b]) {
      Slot& slot = slots_[s];
      slot.bucket = b;
      slot.offset = numel;
      numel += slot.param.numel();
      bytes += slot.param.numel() * static_cast<int64_t>(element_size(slot.param.dtype()));
      names.push_back(slot.name);
    }
    const Tensor& first = slots_[members[b].front()].param;
    const Tensor guard = zeros({DesyncGuard::kElements}, {.dtype = first.dtype(), .device = first.device()});
    buckets_.push_back(Bucket{.buffer = Tensor(), .guard = make_guard(guard, 0), .numel = numel,
                              .slots = members[b], .pending = members[b].size(), .work = nullptr});
    timeline_.add_bucket(bytes, std::move(names));
    if (!short_lived()) allocate(b);
  }
}

// Note [Buckets that live for one backward]: a comm hook that keeps what it needs of a bucket by the
// time its finish() returns (CommHook::releases_buckets: ZeRO-2 keeps this rank's shard of the
// reduced gradients, distributed/zero/zero.h) lets the reducer RELEASE each bucket then, rather than
// hold every gradient of the model from one backward to the next. Such a bucket is allocated when
// the first gradient of a backward arrives for it (reattach_view copies that one in; from then on
// the bucket is an ordinary one, its .grad views the gradient destinations of the parameters whose
// gradients are still to come), and released when its communication is seen complete: at a later
// ready hook (observe_completions), before another bucket is allocated (Note [One bucket in
// flight]) or, for the last ones, in finalize. Its parameters' .grad become
// undefined again and the guard keeps a copy of its nine summed elements for finalize's check.
// Released, not reused from a ring of buffers: buckets fill in gradient order, not bucket order, so
// a ring would have to wait for a slot, and the allocators already keep freed blocks of these sizes
// (Note [Large CPU blocks are cached] in tensor/cpu/cpu_allocator.cpp; the CUDA caching allocator),
// so the next backward's allocation is a free-list pop. Under no_sync nothing is launched, so the
// buckets live on and accumulate, and the synced backward reduces them as usual.
void Reducer::allocate(size_t b) {
  Bucket& bucket = buckets_[b];
  const Tensor& first = slots_[bucket.slots.front()].param;
  MemoryKindGuard kind(MemoryKind::kGradients);  // Note [Memory kinds]
  bucket.buffer = zeros({bucket.numel + DesyncGuard::kElements}, {.dtype = first.dtype(), .device = first.device()});
  bucket.guard = make_guard(bucket.buffer, bucket.numel);
  for (size_t s : bucket.slots) {
    Slot& slot = slots_[s];
    slot.view = raw::view(raw::narrow(bucket.buffer, 0, slot.offset, slot.param.numel()), slot.param.sizes());
    const Tensor old = slot.param.grad();
    if (old.defined()) slot.view.copy_(old);
    slot.param.set_grad(slot.view);
    set_grad_destination(slot.param, slot.view);
  }
}

void Reducer::release(size_t b) {
  Bucket& bucket = buckets_[b];
  if (!bucket.buffer.defined()) return;
  bucket.guard = make_guard(raw::clone(raw::narrow(bucket.buffer, 0, bucket.numel, DesyncGuard::kElements)), 0);
  for (size_t s : bucket.slots) {
    Slot& slot = slots_[s];
    set_grad_destination(slot.param, Tensor());
    slot.param.set_grad(Tensor());
    slot.view = Tensor();
  }
  bucket.buffer = Tensor();
}

std::vector<DistributedDataParallel::BucketLayout> Reducer::layout() const {
  std::vector<DistributedDataParallel::BucketLayout> out;
  for (const Bucket& b : buckets_) {
    DistributedDataParallel::BucketLayout l{.buffer = b.buffer, .numel = b.numel, .names = {}, .parameters = {},
                                            .offsets = {}};
    for (size_t s : b.slots) {
      l.names.push_back(slots_[s].name);
      l.parameters.push_back(slots_[s].param);
      l.offsets.push_back(slots_[s].offset);
    }
    out.push_back(std::move(l));
  }
  return out;
}

void Reducer::forget_destinations() {
  for (Slot& s : slots_) set_grad_destination(s.param, Tensor());
}

// Under a hook that releases buckets, a bucket that lives on (no_sync's sums) is released instead.
void Reducer::zero_grad() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (short_lived()) release(b);
    else buckets_[b].buffer.zero_();
  }
  for (Slot& s : slots_) s.param.set_grad(s.view);
}

// Note [Ready hooks]: AccumulateGrad runs a parameter's post-accumulate-grad hook once per backward,
// after its .grad holds the full gradient of this backward (every use of the parameter summed). So
// "hook ran" = "this slice of the bucket is final". The first hook of a backward also queues
// finalize on the engine, which runs it after the last node.
void Reducer::on_gradient(const std::weak_ptr<Reducer>& weak, size_t index) {
  std::shared_ptr<Reducer> self = weak.lock();
  if (!self) return;  // the DDP object is gone; the model trains on without it
  self->mark_ready(index, weak);
}

void Reducer::mark_ready(size_t index, const std::weak_ptr<Reducer>& weak) {
  Slot& slot = slots_[index];
  // Divided on its way into the bucket (Note [Dividing while writing]), unless it had to be put there.
  const bool scaled = take_destination_scaled(slot.param);
  slot.divided = reattach_view(slot) && scaled;
  MT_CHECK(!(no_sync_ && scaled), "DDP: parameter '", slot.name, "' got its gradient under no_sync() from a forward "
           "run outside it: wrap the forward in no_sync() as well as the backward, as PyTorch asks");
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
void Reducer::count_ready(size_t index, bool in_finalize) {
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
void Reducer::find_unused(const Tensor& output) {
  unused_after_forward_.clear();
  if (!options_.find_unused_parameters || !GradMode::is_enabled()) return;
  std::vector<Tensor> params;
  for (const Slot& s : slots_) params.push_back(s.param);
  const std::vector<bool> reached = reached_from(output, params);
  for (size_t s = 0; s < slots_.size(); ++s)
    if (!reached[s]) unused_after_forward_.push_back(s);
}

void Reducer::mark_unused_ready() {
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
// A bucket the hook releases is finished and released here (Note [Buckets that live for one
// backward]); should that fail, finalize waits for it again and reports the error.
void Reducer::observe_completions() {
  if (next_seen_ == next_launch_) return;  // nothing in flight
  pg_->progress();
  while (next_seen_ < next_launch_ && buckets_[next_seen_].work->is_completed()) retire_oldest();
}

// The oldest bucket in flight, waited for, noted as done and, under a hook that releases buckets,
// finished and released. A failure is left for finalize (Note [Finalize]), which reports it on
// every rank's path.
void Reducer::retire_oldest() {
  const size_t b = next_seen_++;
  try {
    if (short_lived()) buckets_[b].work->wait();
    timeline_.seen_done(b);
    if (short_lived()) finish(b);
  } catch (...) {
  }
}

// Note [One bucket in flight]: under a hook that releases buckets, a bucket is released only once
// its communication is seen complete, and how soon that is depends on the peers and the machine's
// load: a loaded rank can reach the end of backward still holding most of its buckets, which is
// ZeRO-2's peak (docs/ddp.md, the memory table). So before a released bucket is allocated again,
// every bucket launched before the newest one in flight is waited for and released: at most one
// bucket is in flight and one filling besides the kept shards, whatever the timing. The wait costs
// little: the bucket waited for was launched a whole bucket's backward earlier, and collectives
// complete in launch order anyway (Note [Progress]).
void Reducer::bound_in_flight() {
  while (short_lived() && next_launch_ > next_seen_ + 1) retire_oldest();
}

// Keeps Note [Gradients are bucket views]: put the gradient into the bucket if .grad is elsewhere
// (set_grad to another tensor, or the engine's own when the bucket was released), or zero the slot
// if .grad is undefined (a parameter that got no gradient). A released bucket is allocated first
// (Note [Buckets that live for one backward]).
bool Reducer::reattach_view(Slot& slot) {
  if (!buckets_[slot.bucket].buffer.defined()) {
    bound_in_flight();  // Note [One bucket in flight]
    allocate(slot.bucket);
  }
  const Tensor grad = slot.param.grad();
  if (grad.defined() && grad.storage() == slot.view.storage() &&
      grad.storage_offset() == slot.view.storage_offset())
    return true;
  if (grad.defined()) slot.view.copy_(grad);
  else slot.view.zero_();
  slot.param.set_grad(slot.view);
  return false;
}

// Note [Dividing while writing] (autograd/autograd_meta.h): the default hook's first step is a pass
// over the bucket that divides it by the world size (Note [Averaging]), right after backward wrote
// each gradient into it, one more pass. So before a synced backward (DDP's forward calls this), a
// hook that divides_first() has every slot's gradient divided as AccumulateGrad writes it into the
// bucket: a copy that scales. What arrives otherwise (a .grad that was defined, as after
// zero_grad(set_to_none = false) or no_sync's accumulation, or one set elsewhere) is divided at
// launch, slot by slot, so the bucket goes out divided whatever happened; the hook then divides
// only the guard's elements. The multiplication is the hook's own (by 1/world), so no bit changes.
void Reducer::prepare_backward() {
  prescale_ = !no_sync_ && pg_->size() > 1 && hook_->divides_first();
  const double scale = prescale_ ? 1.0 / pg_->size() : 1.0;
  for (const Slot& s : slots_) set_grad_destination_scale(s.param, scale);
}

// Note [Bucket launch order]: buckets are all-reduced strictly in index order on every rank, even
// when a later bucket is ready first. Collectives pair up across ranks by issue order (Note
// [Collective order] in work.h); gradients do not become ready in the same order on every rank
// (hooks follow the graph, and finalize launches what unused parameters left behind), so ranks
// that launched whichever bucket was ready first would sum the wrong buffers or hang. A ready
// bucket therefore waits until every lower-index bucket has been launched.
void Reducer::launch_ready_buckets() {
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
void Reducer::launch(size_t b) {
  Bucket& bucket = buckets_[b];
  timeline_.launched(b, bucket.numel);
  if (prescale_)  // Note [Dividing while writing]: what did not arrive divided is divided here
    for (size_t s : bucket.slots)
      if (!slots_[s].divided) slots_[s].view.mul_(1.0 / pg_->size());
  if (pg_->size() > 1) bucket.guard.write(point(b));  // Note [Desync guard]; one rank cannot disagree
  GradBucket view = grad_bucket(b);
  bucket.work = hook_->launch(*pg_, view);
}

// The desync guard on the last elements of a bucket's buffer, sized for the comm hook's wire dtype.
DesyncGuard Reducer::make_guard(const Tensor& buffer, int64_t numel) const {
  return DesyncGuard(raw::narrow(buffer, 0, numel, DesyncGuard::kElements), pg_->size(),
                     hook_->wire_dtype(buffer.dtype()));
}

// Where this rank is, for bucket b's all-reduce in this backward (Note [Desync guard]).
BucketPoint Reducer::point(size_t b) const {
  return BucketPoint{.step = stats_.backwards, .bucket = static_cast<int64_t>(b),
                     .buckets = static_cast<int64_t>(buckets_.size()), .numel = buckets_[b].numel,
                     .dtype = static_cast<int64_t>(slots_[buckets_[b].slots.front()].param.dtype())};
}

GradBucket Reducer::grad_bucket(size_t b) {
  return GradBucket{.index = b, .buffer = buckets_[b].buffer, .parameter_names = &stats_.bucket_parameters[b],
                    .divided = prescale_ ? buckets_[b].numel : 0};
}

void Reducer::set_comm_hook(std::shared_ptr<CommHook> hook) {
  MT_CHECK(hook != nullptr, "DDP::register_comm_hook: the hook is null");
  MT_CHECK(stats_.backwards == 0 && !backward_started_, "DDP::register_comm_hook: register the hook before "
           "the first backward, so that every backward's buckets are treated alike");
  // A fixed-layout hook was registered by something built on these buckets (ZeRO): replacing it
  // would leave that without its gradients.
  MT_CHECK(!hook_->fixed_layout(), "DDP::register_comm_hook: this DDP already has the '", hook_->name(), "' hook, "
           "which what registered it depends on (ZeRO reduce-scatters through it); it does not combine with '",
           hook->name(), "'");
  hook_ = std::move(hook);
  stats_.comm_hook = hook_->name();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (short_lived()) release(b);  // Note [Buckets that live for one backward]
    else if (!buckets_[b].buffer.defined()) allocate(b);
    else buckets_[b].guard = make_guard(buckets_[b].buffer, buckets_[b].numel);
  }
}

}  // namespace mt::dist::detail
