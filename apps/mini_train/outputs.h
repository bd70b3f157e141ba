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

}  // namespace mt::app
