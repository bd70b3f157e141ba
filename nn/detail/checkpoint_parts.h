// checkpoint_parts.h: what the single-file checkpoint (nn/checkpoint.cpp) and the sharded one
// (nn/sharded_checkpoint.cpp) share: the metadata of the counters and the tensor names' prefixes
// (the layout in nn/checkpoint.h). Internal to those two files.
#pragma once

#include <map>
#include <string>

#include "nn/checkpoint.h"

namespace mt::detail {

// The metadata of `c` (its counters and info/), with "format" = `format`.
std::map<std::string, std::string> checkpoint_metadata(const Checkpoint& c, const std::string& format);
// c's tensors under their file names: "model/<name>", "optimizer/<key>", "scheduler/...", "progress/...".
NamedTensors checkpoint_tensors(const Checkpoint& c);
// A Checkpoint holding the counters and info/ of `meta` (checked; errors name `path`), no tensors.
Checkpoint checkpoint_counters(const std::map<std::string, std::string>& meta, const std::string& path);
// Puts the tensor named `name` in the file into its place in `c` by its prefix; an unknown prefix is an error.
void add_checkpoint_tensor(Checkpoint& c, const std::string& name, const Tensor& t, const std::string& path);

}  // namespace mt::detail
