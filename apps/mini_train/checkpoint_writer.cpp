// The epoch and step checkpoints mini_train writes (see checkpoint_writer.h).
#include "apps/mini_train/checkpoint_writer.h"

#include <algorithm>
#include <string>
#include <vector>

#include "apps/mini_train/checkpoint_sharded.h"
#include "apps/mini_train/interrupt.h"
#include "apps/mini_train/model_file.h"
#include "apps/mini_train/tracing.h"
#include "distributed/fault/heartbeat.h"
#include "nn/checkpoint.h"
#include "tensor/generator.h"
#include "tensor/raw_ops.h"

namespace mt::app {

namespace {

// Everything but the epoch counters; GPU tensors are copied to the host as they are written. Under
// --zero every rank calls it: a single file's optimizer state is gathered from the shards (a
// collective), a sharded checkpoint's is not (each rank writes its own: checkpoint_sharded.h), nor,
// under --zero 3, are its weights. Only rank 0's checkpoint is filled in.
Checkpoint checkpoint_of(const Run& r, int64_t epoch, double loss) {
  Checkpoint c;
  if (!sharded_checkpoints(r)) c.optimizer = r.opt->state_dict();
  if (!r.lead) return c;
  if (!(r.fsdp && sharded_checkpoints(r))) c.model = r.model->state_dict();
  if (r.scheduler) c.scheduler = r.scheduler->state_dict();
  if (r.scaler) c.grad_scaler = r.scaler->state_dict();  // the same on every rank
  c.epoch = epoch, c.step = r.step, c.loss = loss;
  c.rng_seed = default_generator().seed(), c.rng_offset = default_generator().offset();
  // What a resumed run must match (the trainer's reconcile).
  c.info = {{"model", r.signature}, {"optimizer", r.o.optimizer}, {"batch_size", std::to_string(r.o.batch_size)},
            {"max_steps", std::to_string(r.o.max_steps)}, {"accumulate", std::to_string(r.o.accumulate)}};
  // What the model file of --save would say, so that eval, predict, generate and consolidate can use
  // the checkpoint's weights as a model (model_file.h: model_file_of).
  for (const auto& [key, value] : model_metadata(r.o, r.d, r.signature)) c.info[kModelFileInfo + key] = value;
  return c;
}

// Rank 0 writes a single file; under --checkpoint-format sharded every rank writes its shard.
void save(const Run& r, const std::string& path, const Checkpoint& c) {
  if (sharded_checkpoints(r)) save_sharded(r, path, c);  // a collective
  else if (r.lead) save_checkpoint(path, c);
}

}  // namespace

void write_checkpoint(Run& r, int64_t epoch, double loss) {
  if (r.o.checkpoint_dir.empty() || (!r.lead && !r.o.zero)) return;
  dist::set_phase(dist::Phase::Checkpoint);
  const trace::Span span("checkpoint");
  const Checkpoint c = checkpoint_of(r, epoch, loss);  // --zero: a collective
  const std::string path = checkpoint_path(r.o.checkpoint_dir, epoch);
  save(r, path, c);
  if (!r.lead) return;
  note_checkpoint(path);  // the newest, for the line on Ctrl-C (interrupt.h)
  prune_checkpoints(r.o.checkpoint_dir, r.o.keep);
}

void write_step_checkpoint(Run& r, int64_t epoch, const EpochProgress& progress) {
  dist::set_phase(dist::Phase::Checkpoint);
  const trace::Span span("checkpoint");
  const Tensor sums = gather_progress(r.pg.get(), r.world, r.rank, progress);
  if (r.lead || r.o.zero) {  // --zero: every rank, for the gather or its shard
    const Tensor totals = raw::sum(sums, {0});  // (2,): Σ loss·n, Σ n over the ranks
    const std::vector<double> t = totals.to_vector<double>();
    Checkpoint c = checkpoint_of(r, epoch - 1, t[0] / std::max(t[1], 1.0));
    if (r.lead) add_progress(c, progress.batches, sums);
    const std::string path = step_checkpoint_path(r.o.checkpoint_dir, epoch, r.step);
    save(r, path, c);
    if (r.lead) {
      note_checkpoint(path);
      prune_checkpoints(r.o.checkpoint_dir, r.o.keep);
    }
  }
  dist::set_phase(dist::Phase::Data);
}

}  // namespace mt::app
