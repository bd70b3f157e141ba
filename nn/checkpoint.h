// Checkpoint: everything needed to resume training exactly — model and optimizer state dicts, the
// epoch and step counters, the last loss and the random generator's state — in one safetensors
// file (nn/safetensors.h), written atomically.
//
// File layout (readable with nothing but json + numpy, see tests/nn/checkpoint_roundtrip.py):
//   tensors   "model/<state_dict name>", "optimizer/<key>", "scheduler/<key>", "grad_scaler/<key>",
//             "progress/<key>"
//   metadata  "format": "minitrain-checkpoint-1", "epoch", "step", "loss", "rng_seed",
//             "rng_offset" (decimal strings; loss with 17 significant digits, so it round-trips),
//             "epoch_batches" (only in a checkpoint taken mid-epoch), and "info/<key>" for the
//             caller's own strings (model config, flags); and, as in every file save_safetensors
//             writes, "mt.crc32c.<tensor name>", checked on load (Note [Tensor checksums]).
// Tensors on a GPU are copied to host memory as they are written; a loaded checkpoint's tensors
// are on the CPU, and Module::load_state_dict / Optimizer::load_state_dict copy them to wherever
// the parameters live.
// What it does not do: decide *when* to save or which files to keep (the training loop does that).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "nn/safetensors.h"

namespace mt {

inline constexpr const char* kCheckpointFormat = "minitrain-checkpoint-1";  // metadata "format"

struct Checkpoint {
  NamedTensors model;                         // Module::state_dict()
  std::map<std::string, Tensor> optimizer;    // Optimizer::state_dict()
  std::map<std::string, Tensor> scheduler;    // LRScheduler::state_dict(), empty without one
  std::map<std::string, Tensor> grad_scaler;  // optim::GradScaler::state_dict(), empty without one
  std::map<std::string, Tensor> progress;     // the training loop's own mid-epoch state (may be empty)
  int64_t epoch = 0;                          // epochs completed
  int64_t epoch_batches = 0;                  // batches taken of epoch `epoch + 1`; 0: at an epoch's end
  int64_t step = 0;                           // optimizer steps taken
  double loss = std::numeric_limits<double>::quiet_NaN();
  uint64_t rng_seed = 0, rng_offset = 0;      // Generator::seed(), Generator::offset()
  std::map<std::string, std::string> info;    // free-form, e.g. {"model": "mlp", "hidden": "256"}
};

// Atomic: a crash mid-save leaves the previous file at `path` intact.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
// Throws mt::Error naming the path when the file is not a minitrain checkpoint or is damaged (each
// tensor's bytes are checked against the checksum the file carries: Note [Tensor checksums]).
// `path` may also be the index of a sharded checkpoint (nn/sharded_checkpoint.h): its shards are
// read and consolidated into the same Checkpoint a single file would give.
Checkpoint load_checkpoint(const std::string& path);
// The same for a file already read from `path`.
Checkpoint load_checkpoint(const SafetensorsFile& file, const std::string& path);

// Note [Checkpoint names]: a folder holds two kinds of checkpoint.
//   "<dir>/checkpoint-epoch-<EEEEEE>.safetensors"                  after epoch E
//   "<dir>/checkpoint-epoch-<EEEEEE>-step-<SSSSSSSSS>.safetensors"  during epoch E, after global step S
// They order by (E, then S, an epoch's own checkpoint after all its step checkpoints): the newest is
// the furthest point of training. Pruning keeps the newest `keep` epoch checkpoints; a step
// checkpoint is only there to restart from mid-epoch, so those older than the newest epoch
// checkpoint are deleted, and of the rest the newest `keep` stay.
std::string checkpoint_path(const std::string& dir, int64_t epoch);
std::string step_checkpoint_path(const std::string& dir, int64_t epoch, int64_t step);
// The newest checkpoint in dir (in the order above), or "" when there is none (or no dir).
std::string latest_checkpoint(const std::string& dir);
// Deletes what Note [Checkpoint names] says is no longer needed (after a successful save).
void prune_checkpoints(const std::string& dir, int keep);

// Note [Damaged checkpoints]: a checkpoint that does not load (a tensor fails its checksum, Note
// [Tensor checksums] in nn/safetensors.cpp; a truncated or overwritten file) must not end a resume
// while an older one that loads is still there: pruning keeps older checkpoints for this. The newest
// checkpoint that loads is the furthest point training can come back to exactly. Skipping is never
// silent: the caller gets each skipped file's error to show. When none loads, nothing is guessed:
// starting over would quietly throw the run away, so it is an error naming the newest one's damage.
struct NewestIntact {
  std::string path;                  // "" when dir holds no checkpoint at all
  Checkpoint checkpoint;             // what `path` holds
  std::vector<std::string> skipped;  // for each newer checkpoint that did not load, its error (which names it)
};
// The newest checkpoint in dir that loads. Throws mt::Error when dir holds checkpoints and none loads.
NewestIntact load_newest_intact_checkpoint(const std::string& dir);

}  // namespace mt
