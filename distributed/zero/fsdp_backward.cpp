// FullyShardedDataParallel's backward (see fsdp.h): the pre-backward gather of a unit, its
// gradients written into one flat buffer, the reduce-scatter as soon as they are all there, and the
// finalize at the end of backward; no_sync. The forward half is fsdp.cpp.
#include <algorithm>

#include "autograd/engine.h"
#include "autograd/record.h"
#include "distributed/zero/detail/fsdp_unit.h"
#include "distributed/zero/fsdp.h"
#include "tensor/memory.h"
#include "tensor/raw_ops.h"
#include "trace/tracer.h"

namespace mt::dist {

namespace {

// Note [Pre-backward gather]: a unit's parameters are freed after its forward, but its backward
// needs them (a linear layer's dx = dy·W). The unit's output passes through this identity node, so
// the engine runs it when the gradient reaches the output, before any node of the unit's own
// backward (they all lie behind it in the graph): it gathers the unit again, and prefetches the
// unit before it (Note [FSDP prefetch]). The node holds a plain pointer: the model is only run
// while its FullyShardedDataParallel lives.
class FsdpPreBackward final : public Node {
 public:
  FsdpPreBackward(FullyShardedDataParallel* fsdp, size_t unit) : fsdp_(fsdp), unit_(unit) {}
  TensorList apply(TensorList&& grads) override {
    fsdp_->pre_backward(unit_);
    return std::move(grads);
  }
  std::string name() const override { return "FsdpPreBackward"; }

 private:
  FullyShardedDataParallel* fsdp_;
  size_t unit_;
};

}  // namespace

Tensor FullyShardedDataParallel::with_pre_backward(size_t u, const Tensor& output) {
  auto node = mt::detail::record<FsdpPreBackward>({&output}, this, u);
  if (!node) return output;
  Tensor out = raw::as_strided(output, output.sizes(), output.strides(), output.storage_offset());
  mt::detail::set_history(out, node);
  return out;
}

void FullyShardedDataParallel::pre_backward(size_t u) {
  queue_finalize();
  if (in_flight_ >= 0) finish_scatter(static_cast<size_t>(in_flight_));  // one unit's flat gradients at a time
  gather(u);
  prefetch_after(u, /*backward=*/true);
  wait(u);
}

// Note [Reduce-scatter of a unit]: the engine leaves each parameter's gradient in its .grad (a
// fresh result of the backward formula, taken without a copy). Each parameter's post-accumulate-
// grad hook counts down the unit's pending parameters; at zero the unit's backward is over: its
// parameters are freed, and its gradients are copied, divided by N on the way, into one flat buffer
// laid out as the unit's flat parameters (zeros for the padding and for a parameter without a
// gradient), the .grad are dropped, and the buffer is reduce-scattered (Sum), so this rank keeps the
// average of its shard. The reduce-scatters are issued in one order on every rank (rs_order_: the
// reverse of the forward order, then the root), a unit that is ready waiting for those before it,
// as DDP's buckets do (Note [Bucket launch order]); a unit with a parameter that got no gradient
// (unused this step) is launched by the finalize at the end of backward. The buffer goes when its
// reduce-scatter is done, which is waited for before the next unit's backward starts (or its
// reduce-scatter is issued): a rank holds the whole gradients of one unit at a time, and the
// reduce-scatter overlaps what runs until then and the all-gather prefetched for the next unit.
void FullyShardedDataParallel::register_gradient_hooks() {
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u]->pending = units_[u]->params.size();
    for (const Tensor& p : units_[u]->params)
      p.register_post_accumulate_grad_hook([alive = alive_, u](const Tensor&) {
        if (*alive) (*alive)->on_gradient(u);
      });
  }
}

void FullyShardedDataParallel::on_gradient(size_t u) {
  queue_finalize();
  Unit& unit = *units_[u];
  if (unit.pending == 0 || --unit.pending > 0) return;
  if (u + 1 != units_.size()) free(u);  // its backward is over; the root stays until finalize
  if (!no_sync_) launch_ready();
}

void FullyShardedDataParallel::launch_ready() {
  for (; next_rs_ < rs_order_.size() && units_[rs_order_[next_rs_]]->pending == 0; ++next_rs_)
    reduce_scatter(rs_order_[next_rs_]);
}

void FullyShardedDataParallel::reduce_scatter(size_t u) {
  Unit& unit = *units_[u];
  const UnitLayout& layout = layouts_[u];
  if (layout.numel == 0) return;
  log_collective(Collective::Scatter, u);
  const int64_t padded = layout.shard * pg_->size();
  MemoryKindGuard kind(MemoryKind::kGradients);  // the unit's flat gradients (Note [Memory kinds])
  unit.grad_flat = empty({padded}, {.dtype = unit.shard.dtype(), .device = unit.shard.device()});
  raw::fill_(raw::narrow(unit.grad_flat, 0, layout.numel, padded - layout.numel), 0.0);
  for (size_t k = 0; k < unit.params.size(); ++k) {
    const Tensor& p = unit.params[k];
    const Tensor slot = raw::narrow(unit.grad_flat, 0, layout.offsets[k], p.numel());
    const Tensor g = p.grad();
    if (g.defined()) raw::unary_into(UnaryOp::MulScalar, slot, raw::reshape(g, {p.numel()}), 1.0 / pg_->size());
    else raw::fill_(slot, 0.0);  // no gradient reached it (unused in this step)
    p.set_grad(Tensor());
  }
  if (in_flight_ >= 0) finish_scatter(static_cast<size_t>(in_flight_));  // one in flight at a time
  unit.scattering = empty({layout.shard}, {.dtype = unit.shard.dtype(), .device = unit.shard.device()});
  unit.scatter_issued_ns = trace_issue_ns();
  unit.scatter_work = pg_->reduce_scatter(unit.scattering, unit.grad_flat, ReduceOp::Sum);
  in_flight_ = static_cast<int64_t>(u);
  ++stats_.reduce_scatters;
}

// Its output becomes the unit's shard gradient (replacing the last one: gradients add up over
// no_sync micro-batches, not over synced backwards without a step), and the flat buffer goes.
void FullyShardedDataParallel::finish_scatter(size_t u) {
  Unit& unit = *units_[u];
  if (in_flight_ == static_cast<int64_t>(u)) in_flight_ = -1;
  if (!unit.scatter_work) return;
  unit.scatter_work->wait();
  trace_collective(u, "reduce-scatter", unit.scatter_issued_ns);
  unit.scatter_work.reset();
  unit.shard_grad = unit.scattering;
  unit.scattering = Tensor();
  unit.grad_flat = Tensor();
}

void FullyShardedDataParallel::queue_finalize() {
  if (finalize_queued_) return;
  Engine::queue_callback([this] { finalize_backward(); });
  finalize_queued_ = true;
}

// The end of a backward: the units not yet reduce-scattered are (in rs_order_), the last
// reduce-scatter is waited for, and every unit is freed, the root too. Under no_sync nothing is
// sent; the flat gradients stay, and the next backward adds to them.
void FullyShardedDataParallel::finalize_backward() {
  finalize_queued_ = false;
  if (!no_sync_) {
    for (; next_rs_ < rs_order_.size(); ++next_rs_) reduce_scatter(rs_order_[next_rs_]);
    next_rs_ = 0;
    if (in_flight_ >= 0) finish_scatter(static_cast<size_t>(in_flight_));
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    free(u);
    units_[u]->pending = units_[u]->params.size();
  }
}

FullyShardedDataParallel::NoSync::NoSync(FullyShardedDataParallel* fsdp) : fsdp_(fsdp) { fsdp_->no_sync_ = true; }
FullyShardedDataParallel::NoSync::~NoSync() { fsdp_->no_sync_ = false; }
FullyShardedDataParallel::NoSync FullyShardedDataParallel::no_sync() { return NoSync(this); }

}  // namespace mt::dist
