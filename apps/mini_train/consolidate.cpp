// `mini_train consolidate` (see consolidate.h).
#include "apps/mini_train/consolidate.h"

#include <cstdio>
#include <filesystem>
#include <string>

#include "apps/mini_train/model_file.h"
#include "apps/mini_train/options.h"
#include "nn/checkpoint.h"
#include "nn/sharded_checkpoint.h"

namespace mt::app {

namespace {

// The checkpoint file CHECKPOINT names: itself, the index beside a .shards folder, or the newest
// checkpoint of a folder.
std::string checkpoint_file(const std::string& given) {
  namespace fs = std::filesystem;
  std::error_code ec;
  MT_CHECK(fs::exists(given, ec), "mini_train consolidate: ", given, ": no such file or folder");
  if (!fs::is_directory(given, ec)) return given;
  const std::string folder = fs::path(given).lexically_normal().string();
  const std::string trimmed = folder.size() > 1 && folder.back() == '/' ? folder.substr(0, folder.size() - 1) : folder;
  const std::string shards = ".shards";
  if (trimmed.size() > shards.size() && trimmed.compare(trimmed.size() - shards.size(), shards.size(), shards) == 0) {
    const std::string index = trimmed.substr(0, trimmed.size() - shards.size()) + ".safetensors";
    MT_CHECK(fs::is_regular_file(index, ec), "mini_train consolidate: ", given, " has no index ", index,
             " beside it: the checkpoint was never completed (Note [Sharded checkpoints])");
    return index;
  }
  const std::string newest = latest_checkpoint(given);
  MT_CHECK(!newest.empty(), "mini_train consolidate: ", given, " holds no checkpoint (checkpoint-epoch-*.safetensors)");
  return newest;
}

}  // namespace

int run_consolidate(int argc, char** argv) {
  ConsolidateOptions o;
  int exit_code = 0;
  if (!parse_consolidate_options(argc, argv, o, &exit_code)) return exit_code;  // options.h
  const std::string path = checkpoint_file(o.checkpoint);
  std::error_code ec;
  MT_CHECK(!std::filesystem::equivalent(path, o.output, ec), "mini_train consolidate: -o ", o.output,
           " is the checkpoint itself; give another file");
  const Checkpoint c = load_checkpoint(path);  // every shard checked
  if (o.as == "model") {
    const SafetensorsFile model = model_file_of(c, path);
    save_safetensors(o.output, model.tensors, model.metadata);
  } else {
    save_checkpoint(o.output, c);
  }
  std::printf("wrote %s: the %s of %s (epoch %lld, step %lld)\n", o.output.c_str(),
              o.as == "model" ? "model file" : "single-file checkpoint", path.c_str(),
              static_cast<long long>(c.epoch), static_cast<long long>(c.step));
  return 0;
}

}  // namespace mt::app
