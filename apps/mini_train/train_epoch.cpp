// One epoch of mini_train's training loop (see train_epoch.h).
#include "apps/mini_train/train_epoch.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "apps/mini_train/checkpoint_sharded.h"
#include "apps/mini_train/checkpoint_writer.h"
#include "apps/mini_train/data_parallel.h"
#include "apps/mini_train/interrupt.h"
#include "apps/mini_train/progress.h"
#include "apps/mini_train/test_hooks.h"
#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "distributed/fault/heartbeat.h"
#include "trace/tracer.h"
#include "tensor/memory.h"

namespace mt::app {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One micro-batch's forward and backward (batch j, 0-based, of the epoch), its loss scaled into
// its group (Note [Gradient accumulation]). Returns the micro-batch's loss, unscaled.
double forward_backward(Run& r, nn::Module& net, const data::Batch& batch, int64_t epoch, int64_t j) {
  trace::Span forward_span("forward");
  // Already on r.device: on a GPU the loader copied it through pinned memory while the previous
  // step computed, and the compute stream waits for that copy (data/dataloader.h).
  Tensor loss;
  {
    // --precision bf16: forward and loss under autocast, backward outside it, as PyTorch's recipe
    // (autograd/autocast.h); a disabled guard changes nothing.
    const AutocastGuard autocast(r.o.precision == "fp16" ? kFloat16 : kBFloat16, {.enabled = r.o.precision != "fp32"});
    loss = (*r.loss_fn)(net.forward(batch.input), batch.target);
  }
  const double l = loss.item();
  // Stop before a NaN/inf reaches the weights: they stay as they were after the last good step.
  MT_CHECK(std::isfinite(l) || r.o.allow_nonfinite, "the loss is ", l, " at step ", r.step + 1, " (epoch ", epoch,
           ", batch ", j + 1, " of ", r.acc.batches(), "); stopped before it reaches the weights. Check "
           "the data for NaN/inf, or lower --lr; --allow-nonfinite trains on");
  forward_span.end();
  // A group's first micro-batch; under DDP too: the next backward writes into its buckets.
  if (j % r.acc.k == 0) r.opt->zero_grad();
  trace::Span backward_span("backward");
  const double scale = r.acc.loss_scale(j, batch.size());
  Tensor scaled = scale == 1 ? loss : loss * scale;
  if (r.scaler) scaled = r.scaler->scale(scaled);  // --precision fp16: Note [Loss scaling]
  scaled.backward();
  return l;
}

// One micro-batch, and after the last of its group the update: clip, optimizer, schedule. Returns
// the micro-batch's loss.
double train_step(Run& r, nn::Module& net, const data::Batch& batch, int64_t epoch, int64_t j) {
  if (!r.acc.ends_step(j)) {
    // DDP: a group's earlier micro-batches only accumulate; forward too runs inside no_sync (ddp.h).
    if (r.fsdp) {
      const auto no_sync = r.fsdp->no_sync();
      return forward_backward(r, net, batch, epoch, j);
    }
    if (!r.ddp) return forward_backward(r, net, batch, epoch, j);
    const auto no_sync = r.ddp->no_sync();
    return forward_backward(r, net, batch, epoch, j);
  }
  const double l = forward_backward(r, net, batch, epoch, j);
  if (r.o.clip_grad > 0) clip_gradients(r);  // DDP: reduced grads
  dist::set_phase(dist::Phase::Optimizer);
  trace::Span optimizer_span("optimizer");
  r.step_lr = r.opt->lr(0);  // what this step uses, for its --log-every record
  {
    MemoryKindGuard kind(MemoryKind::kOptimizerState);  // the state the step makes: Note [Memory kinds]
    if (!r.scaler) {
      r.opt->step();
    } else {  // skipped, with the scale backed off, where a gradient is inf or NaN on any rank
      if (!r.scaler->step(*r.opt)) ++r.skipped_steps;
      r.scaler->update();
    }
  }
  if (r.scheduler) r.scheduler->step();
  return l;
}

// The epoch's loss over every rank's samples: one small all-reduce of (sum of loss·n, sum of n), on
// the group's device (NCCL reduces GPU tensors only).
EpochResult epoch_result(const Run& r, double loss_sum, int64_t seen, double seconds) {
  double total_seen = static_cast<double>(seen);
  if (r.pg) {
    Tensor sums = from_vector(std::vector<double>{loss_sum, total_seen}, {2}).to(r.pg->device());
    r.pg->allreduce(sums, dist::ReduceOp::Sum)->wait();
    const std::vector<double> summed = sums.to(kCPU).to_vector<double>();
    loss_sum = summed[0], total_seen = summed[1];
  }
  return {.loss = loss_sum / std::max(total_seen, 1.0), .samples_per_s = total_seen / std::max(seconds, 1e-9),
          .seconds = seconds};
}

// --log-every N: every N steps a step record (Note [Log records]) with the loss of this step's
// examples on every rank (`loss_sum`, `seen`: this rank's). Every rank calls it, for the all-reduce.
void log_step(Run& r, int64_t epoch, double loss_sum, int64_t seen) {
  r.log_seen += seen;
  if (r.o.log_every == 0 || r.step % r.o.log_every != 0) return;
  const double seconds = seconds_since(r.log_since);
  const EpochResult step = epoch_result(r, loss_sum, seen, seconds);
  if (r.log.is_open())
    r.log.write(StepRecord{.epoch = epoch, .step = r.step, .loss = step.loss, .lr = r.step_lr,
                           .samples_per_s = static_cast<double>(r.log_seen * r.world) / std::max(seconds, 1e-9)});
  r.log_seen = 0, r.log_since = Clock::now();
}

// After an optimizer step: count it, and what follows a step (--log-every, --check-replicas,
// --checkpoint-every). `progress`: this rank's part of the epoch so far; `loss_sum`, `seen`: of this step.
void after_step(Run& r, int64_t epoch, const EpochProgress& progress, double loss_sum, int64_t seen) {
  ++r.step;
  dist::set_step(r.step);
  note_progress(epoch, r.step);  // for the line on Ctrl-C (interrupt.h)
  dist::set_phase(dist::Phase::Data);  // the loader builds the next batch
  log_step(r, epoch, loss_sum, seen);  // before a checkpoint of this step: a resume keeps its record
  if (r.ddp && r.o.check_replicas > 0 && r.step % r.o.check_replicas == 0)  // replica_guard.h
    r.ddp->check_replicas("after step " + std::to_string(r.step) + " (--check-replicas)");
  if (step_checkpoint_due(r.o, r.step, progress.batches == r.acc.batches())) {  // --checkpoint-every
    // --zero 3 with single-file checkpoints: the model whole to save (sharded ones save the shards)
    const dist::FullyShardedDataParallel::FullParams whole(sharded_checkpoints(r) ? nullptr : r.fsdp.get());
    write_step_checkpoint(r, epoch, progress);
  }
  test_kill_hook(r.rank, r.step, !r.resumed_from.empty());
}

}  // namespace

EpochResult train_epoch(Run& r, int64_t epoch) {
  const auto start = Clock::now();
  if (r.pg) test_fail_hook(r.rank, epoch);
  r.loader->set_epoch(epoch);
  dist::set_phase(dist::Phase::Data);
  nn::Module& net = r.ddp    ? static_cast<nn::Module&>(*r.ddp)
                    : r.fsdp ? static_cast<nn::Module&>(*r.fsdp)
                             : *r.model;
  // A mid-epoch resume starts where its checkpoint was taken (Note [Mid-epoch resume]).
  const EpochProgress from = epoch == r.first_epoch ? r.resumed_at : EpochProgress{};
  double loss_sum = from.loss_sum, step_loss_sum = 0;  // step_: of the step in progress (--accumulate)
  int64_t seen = from.seen, done = from.batches, step_seen = 0;
  const int64_t batches = r.o.max_steps > 0 ? std::min(r.acc.batches(), done + (r.o.max_steps - r.step) * r.acc.k)
                                            : r.acc.batches();
  ProgressBar bar(r.talk, "Epoch " + std::to_string(epoch) + "/" + std::to_string(r.o.epochs), batches);
  int64_t data_from = r.tracer ? trace::now_ns() : 0;  // --trace: when the loader started on the next batch
  for (auto it = r.loader->begin_at(done); it != r.loader->end(); ++it) {
    const data::Batch& batch = *it;
    if (steps_exhausted(r)) break;  // --max-steps, mid-epoch
    if (r.tracer) r.tracer->begin_step(r.step + 1);  // --trace-steps
    trace::record_since("data", data_from);
    trace::Span step_span("step");
    step_span.arg("step", r.step + 1);
    const double l = train_step(r, net, batch, epoch, done);
    const bool stepped = r.acc.ends_step(done);  // --accumulate: else the next micro-batch continues the step
    ++done;
    loss_sum += l * static_cast<double>(batch.size()), step_loss_sum += l * static_cast<double>(batch.size());
    seen += batch.size(), step_seen += batch.size();
    if (stepped) {
      after_step(r, epoch, {.batches = done, .loss_sum = loss_sum, .seen = seen}, step_loss_sum, step_seen);
      step_loss_sum = 0, step_seen = 0;
    }
    bar.update(done, seen, loss_sum / static_cast<double>(seen));
    step_span.end();
    if (r.tracer) data_from = trace::now_ns();
  }
  bar.clear();
  if (r.ddp) r.ddp->check_replicas("at the end of epoch " + std::to_string(epoch));  // replica_guard.h
  return epoch_result(r, loss_sum, seen, seconds_since(start));
}

}  // namespace mt::app
