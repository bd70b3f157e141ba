// Before training: every file mini_train will write (--save, --checkpoint-dir, --log-json, --trace)
// can be written, so that a run never trains for an hour and then loses its result to a typo, a read-only
// mount or a full disk. Each problem is one line naming the flag and the path as the user gave it.
//
// What it checks: the path is a regular file, a new name or a symlink to one of those, never a
// device, FIFO, socket or folder (Note [Output files] in tensor/output_file.cpp); its folder exists
// (--checkpoint-dir is created); a file can be created there (a probe, removed at once); and the
// filesystem has room for one file of the estimated size.
// What it cannot promise: that the disk is not filled by someone else during the run; every save is
// atomic either way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "apps/mini_train/options.h"

namespace mt::app {

struct OutputSizes {
  int64_t model_bytes = 0;       // the final --save file
  int64_t checkpoint_bytes = 0;  // one --checkpoint-dir file (model and optimizer state)
};

// Throws mt::Error naming the flag and path of the first output that cannot be written.
void check_outputs(const Options& opts, const OutputSizes& sizes);
// The same for one file (`flag` names it in the message): it may be written (resolve_output_path),
// and the folder it will be written in exists, takes a new file and has `bytes` free. No-op for an
// empty path.
void check_output_file(const char* flag, const std::string& path, int64_t bytes);

// A path a command reads or writes, with the flag that gave it (for the message). Empty: not given.
struct FlagPath {
  const char* flag;
  std::string path;
};
// Note [An output is never an input]: no two outputs are one file, and no output is a file the
// command reads. A log written over the targets, predictions over the model they came from, or a
// trace and a model in one file each lose something at the first save, and an atomic save does not
// help: it replaces the file whole. Two paths are one file when they lead to the same place through
// symlinks, "./" and "..", or are hard links of each other. Training's --save may be its own --init:
// the model is updated in place, as a fine-tuning run means to.
void check_distinct(const std::vector<FlagPath>& outputs, const std::vector<FlagPath>& inputs);

}  // namespace mt::app
