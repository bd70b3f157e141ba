// Checkpoint: everything needed to resume training exactly — model and optimizer state dicts, the
// epoch and step counters, the last loss and the random generator's state — in one safetensors
// file (nn/safetensors.h), written atomically.
//
// File layout (readable with nothing but json + numpy, see tests/nn/checkpoint_roundtrip.py):
//   tensors   "model/<state_dict name>", "optimizer/<key>", "scheduler/<key>"
//   metadata  "format": "minitrain-checkpoint-1", "epoch", "step", "loss", "rng_seed",
//             "rng_offset" (decimal strings; loss with 17 significant digits, so it round-trips),
//             and "info/<key>" for the caller's own strings (model config, flags).
// What it does not do: decide *when* to save or which files to keep (the training loop does that).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>

#include "nn/safetensors.h"

namespace mt {

struct Checkpoint {
  NamedTensors model;                         // Module::state_dict()
  std::map<std::string, Tensor> optimizer;    // Optimizer::state_dict()
  std::map<std::string, Tensor> scheduler;    // LRScheduler::state_dict(), empty without one
  int64_t epoch = 0;                          // epochs completed
  int64_t step = 0;                           // optimizer steps taken
  double loss = std::numeric_limits<double>::quiet_NaN();
  uint64_t rng_seed = 0, rng_offset = 0;      // Generator::seed(), Generator::offset()
  std::map<std::string, std::string> info;    // free-form, e.g. {"model": "mlp", "hidden": "256"}
};

// Atomic: a crash mid-save leaves the previous file at `path` intact.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
// Throws mt::Error naming the path when the file is not a minitrain checkpoint or is damaged.
Checkpoint load_checkpoint(const std::string& path);

// A folder of per-epoch checkpoints: "<dir>/checkpoint-epoch-<NNNNNN>.safetensors".
std::string checkpoint_path(const std::string& dir, int64_t epoch);
// The newest (highest epoch) checkpoint in dir, or "" when there is none (or no dir).
std::string latest_checkpoint(const std::string& dir);
// Deletes all but the newest `keep` checkpoints of dir (after a successful save).
void prune_checkpoints(const std::string& dir, int keep);

}  // namespace mt
