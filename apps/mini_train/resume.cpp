// mini_train's resume phase (see resume.h).
#include "apps/mini_train/resume.h"

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "apps/mini_train/checkpoint_step.h"
#include "nn/checkpoint.h"
#include "tensor/generator.h"
#include "tensor/memory.h"

namespace mt::app {

namespace {

// The resumed optimizer's setting `key` of parameter group 0, or `fallback` when it has none.
double group_setting(const Checkpoint& c, const std::string& key, double fallback) {
  const auto it = c.optimizer.find("param_groups.0." + key);
  return it == c.optimizer.end() ? fallback : it->second.item();
}

// What the checkpoint says against what this run asks: refuse what cannot change mid-run, and
// note what the checkpoint's optimizer state overrides (its settings travel with its state).
void reconcile(Run& r, const Checkpoint& c, const std::string& from) {
  const auto info = [&](const char* key) {
    const auto it = c.info.find(key);
    return it == c.info.end() ? std::string() : it->second;
  };
  const std::string sig = info("model");
  MT_CHECK(sig == r.signature, "--resume ", from, ": the checkpoint is of model '", sig.empty() ? "?" : sig,
           "' but this run builds '", r.signature, "'; use the same --model/--hidden/data, or another --checkpoint-dir");
  MT_CHECK(c.scheduler.empty() == (r.scheduler == nullptr), "--resume ", from, ": the checkpoint was written ",
           c.scheduler.empty() ? "without" : "with", " a learning-rate schedule; use the same --schedule");
  const std::string optimizer = info("optimizer");
  MT_CHECK(optimizer.empty() || optimizer == r.o.optimizer, "--resume ", from, ": the checkpoint's optimizer is ",
           optimizer, ", this run asks for ", r.o.optimizer, "; its state cannot change kind: use --optimizer ", optimizer);
  const std::string batch = info("batch_size");
  MT_CHECK(batch.empty() || batch == std::to_string(r.o.batch_size), "--resume ", from, ": the checkpoint was "
           "trained with --batch-size ", batch, ", this run asks for ", r.requested_batch, "; the batch size fixes the "
           "steps per epoch and the schedule, so it cannot change mid-run: use --batch-size ", batch);
  const std::string accumulate = info("accumulate").empty() ? "1" : info("accumulate");  // older checkpoints: 1
  MT_CHECK(accumulate == std::to_string(r.o.accumulate), "--resume ", from, ": the checkpoint was trained with "
           "--accumulate ", accumulate, ", this run asks for ", r.o.accumulate, "; the micro-batches per step fix the "
           "steps per epoch and the schedule, so they cannot change mid-run: use --accumulate ", accumulate);
  const std::string max_steps = info("max_steps");  // checkpoints from before --max-steps have none
  MT_CHECK(max_steps.empty() || !r.scheduler || max_steps == std::to_string(r.o.max_steps), "--resume ", from,
           ": the checkpoint's learning-rate schedule spans --max-steps ", max_steps, ", this run asks for ",
           r.o.max_steps, "; a schedule cannot be stretched mid-run: use --max-steps ", max_steps);
  // Settings the optimizer state brings back: what this run asked for does not apply.
  struct Setting { const char* flag; double& value; double resumed; };
  const double base_lr = c.scheduler.count("base_lrs.0") ? c.scheduler.at("base_lrs.0").item()
                                                          : group_setting(c, "lr", r.o.lr);
  const std::vector<Setting> settings = {
      {"--lr", r.o.lr, base_lr},
      {"--weight-decay", r.o.weight_decay, group_setting(c, "weight_decay", r.o.weight_decay)},
      {"--momentum", r.o.momentum, group_setting(c, "momentum", r.o.momentum)}};
  // A warning on stderr, which --quiet does not hide: the run does not do what its command line says.
  for (const Setting& s : settings) {
    if (s.resumed == s.value) continue;
    if (r.lead) {
      std::ostringstream os;
      os << "mini_train: warning: --resume " << from << ": the checkpoint's " << (s.flag + 2) << " " << s.resumed
         << " continues, not " << s.flag << " " << s.value << " (a resumed optimizer keeps its settings)\n";
      std::fputs(os.str().c_str(), stderr);
    }
    s.value = s.resumed;
  }
}

}  // namespace

// Resume: everything that decides the rest of the run comes back, so that the final weights are
// bit-for-bit those of an uninterrupted run (the data order needs nothing: it is seeded by
// seed + epoch; a mid-epoch checkpoint adds its place in the epoch: Note [Mid-epoch resume]).
void resume(Run& r) {
  if (r.o.resume.empty()) return;
  std::string from = r.o.resume;
  Checkpoint c;
  if (r.o.resume == "auto") {
    // The newest checkpoint that loads, older ones in place of damaged ones (Note [Damaged checkpoints]).
    NewestIntact newest = load_newest_intact_checkpoint(r.o.checkpoint_dir);
    if (newest.path.empty()) return;  // nothing there yet: a fresh start
    if (r.lead && !newest.skipped.empty()) {  // on stderr, so that --quiet does not hide it
      std::string why;
      for (const std::string& e : newest.skipped) why += (why.empty() ? "" : "; ") + e;
      std::fprintf(stderr, "mini_train: --resume auto: resuming from %s, the newest checkpoint that loads; skipped %s\n",
                   newest.path.c_str(), why.c_str());
    }
    from = newest.path;
    c = std::move(newest.checkpoint);
  } else {
    c = load_checkpoint(from);
  }
  reconcile(r, c, from);
  r.model->load_state_dict(c.model);
  {
    MemoryKindGuard kind(MemoryKind::kOptimizerState);  // Note [Memory kinds]
    r.opt->load_state_dict(c.optimizer);
  }
  if (r.scheduler) r.scheduler->load_state_dict(c.scheduler);
  // fp16: the scale and its growth count, so the resumed steps scale as the uninterrupted ones (a
  // checkpoint of another --precision has none: the scaler starts afresh).
  if (r.scaler && !c.grad_scaler.empty()) r.scaler->load_state_dict(c.grad_scaler);
  default_generator().set_state(c.rng_seed, c.rng_offset);
  r.first_epoch = c.epoch + 1;
  r.step = c.step;
  r.resumed_at = resumed_progress(c, r.world, r.rank, from);
  r.resumed_from = from;
}

}  // namespace mt::app
