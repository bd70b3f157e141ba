// Checkpoint <-> one safetensors file. See nn/checkpoint.h for the layout.
#include "nn/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <tuple>
#include <vector>

#include "nn/detail/checkpoint_parts.h"
#include "nn/sharded_checkpoint.h"

namespace mt {

namespace {

constexpr const char* kFormat = kCheckpointFormat;
constexpr const char* kModel = "model/";
constexpr const char* kOptimizer = "optimizer/";
constexpr const char* kScheduler = "scheduler/";
constexpr const char* kGradScaler = "grad_scaler/";
constexpr const char* kProgress = "progress/";
constexpr const char* kInfo = "info/";

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

const std::string& field(const std::map<std::string, std::string>& meta, const std::string& key,
                         const std::string& path) {
  auto it = meta.find(key);
  MT_CHECK(it != meta.end(), "checkpoint ", path, ": metadata has no '", key, "'");
  return it->second;
}

// Whole-string decimal parses: "12abc" or "" is damage, not 12 or 0.
int64_t parse_int(const std::string& s, const std::string& key, const std::string& path) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  MT_CHECK(!s.empty() && *end == '\0' && errno == 0, "checkpoint ", path, ": metadata '", key,
           "' is not an integer: '", s, "'");
  return v;
}

uint64_t parse_uint(const std::string& s, const std::string& key, const std::string& path) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  MT_CHECK(!s.empty() && s[0] != '-' && *end == '\0' && errno == 0, "checkpoint ", path, ": metadata '",
           key, "' is not an unsigned integer: '", s, "'");
  return v;
}

double parse_double(const std::string& s, const std::string& key, const std::string& path) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  MT_CHECK(!s.empty() && *end == '\0', "checkpoint ", path, ": metadata '", key, "' is not a number: '", s, "'");
  return v;
}

}  // namespace

namespace detail {

std::map<std::string, std::string> checkpoint_metadata(const Checkpoint& c, const std::string& format) {
  char loss[32];
  std::snprintf(loss, sizeof loss, "%.17g", c.loss);
  std::map<std::string, std::string> meta = {
      {"format", format},
      {"epoch", std::to_string(c.epoch)},
      {"step", std::to_string(c.step)},
      {"loss", loss},
      {"rng_seed", std::to_string(c.rng_seed)},
      {"rng_offset", std::to_string(c.rng_offset)},
  };
  if (c.epoch_batches > 0) meta["epoch_batches"] = std::to_string(c.epoch_batches);
  for (const auto& [k, v] : c.info) meta[kInfo + k] = v;
  return meta;
}

NamedTensors checkpoint_tensors(const Checkpoint& c) {
  NamedTensors tensors;
  for (const auto& [name, t] : c.model) tensors.emplace_back(kModel + name, t);
  for (const auto& [name, t] : c.optimizer) tensors.emplace_back(kOptimizer + name, t);
  for (const auto& [name, t] : c.scheduler) tensors.emplace_back(kScheduler + name, t);
  for (const auto& [name, t] : c.grad_scaler) tensors.emplace_back(kGradScaler + name, t);
  for (const auto& [name, t] : c.progress) tensors.emplace_back(kProgress + name, t);
  return tensors;
}

Checkpoint checkpoint_counters(const std::map<std::string, std::string>& meta, const std::string& path) {
  Checkpoint c;
  c.epoch = parse_int(field(meta, "epoch", path), "epoch", path);
  c.step = parse_int(field(meta, "step", path), "step", path);
  c.loss = parse_double(field(meta, "loss", path), "loss", path);
  c.rng_seed = parse_uint(field(meta, "rng_seed", path), "rng_seed", path);
  c.rng_offset = parse_uint(field(meta, "rng_offset", path), "rng_offset", path);
  if (meta.count("epoch_batches")) c.epoch_batches = parse_int(meta.at("epoch_batches"), "epoch_batches", path);
  MT_CHECK(c.epoch >= 0 && c.step >= 0 && c.epoch_batches >= 0, "checkpoint ", path, ": negative epoch or step");
  for (const auto& [k, v] : meta)
    if (starts_with(k, kInfo)) c.info[k.substr(std::string(kInfo).size())] = v;
  return c;
}

void add_checkpoint_tensor(Checkpoint& c, const std::string& name, const Tensor& t, const std::string& path) {
  if (starts_with(name, kModel)) c.model.emplace_back(name.substr(std::string(kModel).size()), t);
  else if (starts_with(name, kOptimizer)) c.optimizer[name.substr(std::string(kOptimizer).size())] = t;
  else if (starts_with(name, kScheduler)) c.scheduler[name.substr(std::string(kScheduler).size())] = t;
  else if (starts_with(name, kGradScaler)) c.grad_scaler[name.substr(std::string(kGradScaler).size())] = t;
  else if (starts_with(name, kProgress)) c.progress[name.substr(std::string(kProgress).size())] = t;
  else MT_FAIL("checkpoint ", path, ": unexpected tensor '", name, "' (expected model/, optimizer/, scheduler/, "
               "grad_scaler/ or progress/)");
}

}  // namespace detail

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  save_safetensors(path, detail::checkpoint_tensors(c), detail::checkpoint_metadata(c, kFormat));
}

Checkpoint load_checkpoint(const std::string& path) { return load_checkpoint(load_safetensors(path), path); }

Checkpoint load_checkpoint(const SafetensorsFile& file, const std::string& path) {
  const auto& meta = file.metadata;
  auto format = meta.find("format");
  if (format != meta.end() && format->second == kShardedFormat) return load_sharded_checkpoint(file, path);
  MT_CHECK(format != meta.end() && format->second == kFormat, "checkpoint ", path,
           ": not a minitrain checkpoint (metadata 'format' is ",
           format == meta.end() ? std::string("missing") : "'" + format->second + "'", ", expected '", kFormat, "')");
  Checkpoint c = detail::checkpoint_counters(meta, path);
  for (const auto& [name, t] : file.tensors) detail::add_checkpoint_tensor(c, name, t, path);
  return c;
}

// ---- checkpoint folders (Note [Checkpoint names]) ---------------------------------------------

namespace {
constexpr const char* kPrefix = "checkpoint-epoch-";
constexpr const char* kStepInfix = "-step-";
constexpr const char* kSuffix = ".safetensors";
constexpr int64_t kEpochEnd = std::numeric_limits<int64_t>::max();  // an epoch's own checkpoint sorts last

struct Found {
  int64_t epoch, step;  // step: kEpochEnd for an epoch checkpoint
  std::string path;
  bool operator<(const Found& o) const { return std::tie(epoch, step) < std::tie(o.epoch, o.step); }
};

// Whole-string digits (at most 12), or -1.
int64_t digits_value(const std::string& s) {
  if (s.empty() || s.size() > 12 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(s);
}

// dir's checkpoints, oldest first. Other files (and temp files of a save cut short, which end in
// ".tmp.<pid>") are not checkpoints and are left alone.
std::vector<Found> list_checkpoints(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<Found> found;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string prefix = kPrefix, suffix = kSuffix;
    if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string middle = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    const size_t infix = middle.find(kStepInfix);
    const int64_t epoch = digits_value(middle.substr(0, infix));
    const int64_t step = infix == std::string::npos ? kEpochEnd
                                                    : digits_value(middle.substr(infix + std::string(kStepInfix).size()));
    if (epoch < 0 || step < 0) continue;
    found.push_back({epoch, step, entry.path().string()});
  }
  std::sort(found.begin(), found.end());
  return found;
}
}  // namespace

std::string checkpoint_path(const std::string& dir, int64_t epoch) {
  char name[64];
  std::snprintf(name, sizeof name, "%s%06lld%s", kPrefix, static_cast<long long>(epoch), kSuffix);
  return (std::filesystem::path(dir) / name).string();
}

std::string step_checkpoint_path(const std::string& dir, int64_t epoch, int64_t step) {
  char name[96];
  std::snprintf(name, sizeof name, "%s%06lld%s%09lld%s", kPrefix, static_cast<long long>(epoch), kStepInfix,
                static_cast<long long>(step), kSuffix);
  return (std::filesystem::path(dir) / name).string();
}

std::string latest_checkpoint(const std::string& dir) {
  const auto found = list_checkpoints(dir);
  return found.empty() ? std::string() : found.back().path;
}

NewestIntact load_newest_intact_checkpoint(const std::string& dir) {
  const auto found = list_checkpoints(dir);  // oldest first
  NewestIntact newest;
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    try {
      newest.checkpoint = load_checkpoint(it->path);
      newest.path = it->path;
      return newest;
    } catch (const Error& e) {
      newest.skipped.push_back(e.what());
    }
  }
  MT_CHECK(found.empty(), "none of the ", found.size(), " checkpoints in ", dir,
           " loads, so training cannot resume from any of them; the newest: ", newest.skipped.front());
  return newest;
}

namespace {
// A folder of shards without its index is a save that never finished (a crash between the shards
// and the index: Note [Sharded checkpoints] in nn/sharded_checkpoint.h). Pruning runs after this process's own save has
// written its index, so no save of this run is between the two then, and such a folder goes.
void remove_orphan_shards(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string suffix = ".shards";
  std::vector<fs::path> orphans;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0 || name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0 || !entry.is_directory(ec))
      continue;
    const fs::path index = entry.path().parent_path() / (name.substr(0, name.size() - suffix.size()) + kSuffix);
    if (!fs::exists(index, ec)) orphans.push_back(entry.path());
  }
  for (const fs::path& p : orphans) fs::remove_all(p, ec);  // best effort, as in prune_checkpoints
}
}  // namespace

void prune_checkpoints(const std::string& dir, int keep) {
  const auto found = list_checkpoints(dir);  // oldest first
  const size_t kept = static_cast<size_t>(std::max(keep, 1));
  size_t epochs_seen = 0, steps_seen = 0;
  bool after_an_epoch_checkpoint = false;  // walking newest first: an epoch checkpoint is newer
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    const bool epoch_checkpoint = it->step == kEpochEnd;
    const bool keep_it = epoch_checkpoint ? ++epochs_seen <= kept : !after_an_epoch_checkpoint && ++steps_seen <= kept;
    after_an_epoch_checkpoint = after_an_epoch_checkpoint || epoch_checkpoint;
    if (keep_it) continue;
    std::error_code ec;
    std::filesystem::remove(it->path, ec);  // best effort: a leftover old file harms nothing
    std::filesystem::remove_all(shards_folder(it->path), ec);  // a sharded checkpoint's shards, if any
  }
  remove_orphan_shards(dir);
}

}  // namespace mt
