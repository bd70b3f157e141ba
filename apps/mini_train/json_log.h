// mini_train --log-json FILE: the run as JSON Lines, one object per line, for scripts and for
// `mini_train plot` (plot.h). Rank 0 writes it; the trainer (trainer.cpp) says what and when.
//
// Note [Log records]: every record has "type", "epoch" (1-based; the epoch in progress) and
// "step" (optimizer steps done in the whole run, counted across resumes), then by type:
//   {"type":"step", "epoch":1, "step":10, "loss":0.53, "lr":0.001, "samples_per_s":51234}
//       every --log-every N steps: "loss" is that one step's, the mean over every rank's examples of
//       its batch (all its micro-batches with --accumulate); "lr" the rate it stepped with (the first
//       parameter group's); "samples_per_s" every rank's examples since the previous record, per second
//   {"type":"epoch", "epoch":1, "step":32, "loss":0.61, "samples_per_s":48000, "seconds":0.02, "lr":0.001}
//       at each epoch's end: "loss" the mean over the epoch's examples on every rank; "lr" the rate
//       the next step will use; "seconds" the epoch's wall time
//   {"type":"eval", "epoch":1, "step":32, "split":"test", "metric":"accuracy", "value":0.87, "seconds":0.4}
//       after each epoch with --eval (or --val-split): "split" test, validation (--val-split) or
//       train (no held-out data); "metric" accuracy (classification), loss (mean squared error, or a
//       GPT's nats per byte); "seconds" the evaluation's wall time
// A fresh run empties the file; --resume appends, after dropping the records a failed run wrote
// past its checkpoint (step records after its step, epoch and eval records after its last whole
// epoch), so that a resumed run's log reads as one uninterrupted run's (Note [Mid-epoch resume]).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace mt::app {

struct StepRecord {
  int64_t epoch = 0, step = 0;
  double loss = 0, lr = 0, samples_per_s = 0;
};
struct EpochRecord {
  int64_t epoch = 0, step = 0;
  double loss = 0, samples_per_s = 0, seconds = 0, lr = 0;
};
struct EvalRecord {
  int64_t epoch = 0, step = 0;
  std::string split, metric;
  double value = 0, seconds = 0;
};

class JsonLog {
 public:
  // Opens `path` (through a symlink; a device was refused up front: Note [Output files]). A fresh
  // run (`resumed` false) empties it; a resumed one keeps the records of its checkpoint's
  // `completed_epochs` whole epochs and `step` steps, and appends.
  void open(const std::string& path, bool resumed, int64_t completed_epochs, int64_t step);
  bool is_open() const { return out_.is_open(); }

  void write(const StepRecord& r);
  void write(const EpochRecord& r);
  void write(const EvalRecord& r);

 private:
  void line(const std::string& json);
  std::ofstream out_;
};

}  // namespace mt::app
