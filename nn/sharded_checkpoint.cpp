// Sharded checkpoints: shard files, the index, and consolidation (see nn/sharded_checkpoint.h,
// Note [Sharded checkpoints]).
#include "nn/sharded_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "nn/crc32c.h"
#include "nn/detail/checkpoint_parts.h"
#include "tensor/raw_ops.h"

namespace mt {

namespace {

constexpr const char* kShardFormat = "minitrain-checkpoint-shard-1";  // a shard file's "format"
constexpr const char* kSuffix = ".safetensors";

// One line of a table: a piece without its data.
struct Entry {
  std::string name;
  Shape shape;
  int64_t offset = 0, numel = 0;
  std::string crc;
};

std::string crc_of(const Tensor& t) {  // t contiguous on the CPU
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08x", crc32c(t.raw_data(), static_cast<size_t>(t.numel()) * element_size(t.dtype())));
  return hex;
}

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (int i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(s[i]);
  }
  out += ']';
  return out;
}

std::string piece_key(const std::string& name, int64_t offset) { return name + "@" + std::to_string(offset); }

// Rank r's table from the index's metadata; any malformed line is an error naming the index.
std::vector<Entry> parse_table(const std::string& table, const std::string& path, int rank) {
  std::vector<Entry> entries;
  std::istringstream lines(table);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    Entry e;
    std::string shape;
    in >> e.name >> shape >> e.offset >> e.numel >> e.crc;
    MT_CHECK(!in.fail() && shape.size() >= 2 && shape.front() == '[' && shape.back() == ']' && e.offset >= 0 &&
             e.numel >= 0, "checkpoint ", path, ": the index's table of shard ", rank, " has a malformed line '", line, "'");
    std::istringstream dims(shape.substr(1, shape.size() - 2));
    for (std::string d; std::getline(dims, d, ',');) e.shape.push_back(std::stoll(d));
    MT_CHECK(e.offset + e.numel <= e.shape.numel(), "checkpoint ", path, ": the index says '", e.name, "' of shape ",
             shape, " has elements [", e.offset, ", ", e.offset + e.numel, ") in shard ", rank);
    entries.push_back(std::move(e));
  }
  return entries;
}

int64_t meta_int(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& path) {
  const auto it = meta.find(key);
  MT_CHECK(it != meta.end() && !it->second.empty() && it->second.find_first_not_of("0123456789") == std::string::npos &&
           it->second.size() < 10, "checkpoint ", path, ": metadata '", key, "' is ",
           it == meta.end() ? std::string("missing") : "'" + it->second + "'", ", expected a whole number");
  return std::stoll(it->second);
}

// A whole tensor being filled from its pieces.
struct Whole {
  Shape shape;
  Tensor flat;                                       // undefined until the first piece sets the dtype
  std::vector<std::pair<int64_t, int64_t>> covered;  // [begin, end) of each piece
};

// The first element of [0, numel) that no range covers, or -1.
int64_t first_hole(std::vector<std::pair<int64_t, int64_t>> ranges, int64_t numel) {
  std::sort(ranges.begin(), ranges.end());
  int64_t reached = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin > reached) return reached;
    reached = std::max(reached, end);
  }
  return reached < numel ? reached : -1;
}

// The whole tensors being filled, and their names in the order they first came (shard 0 holds the
// model in its state_dict's order).
struct Wholes {
  std::map<std::string, Whole> by_name;
  std::vector<std::string> order;
};

// Shard `rank`'s file, checked against its table, its pieces put into `wholes`.
void read_shard(const std::string& path, int rank, int world, const std::vector<Entry>& table, Wholes& wholes) {
  const std::string file_path = shard_path(path, rank, world);
  std::error_code ec;
  MT_CHECK(std::filesystem::is_regular_file(file_path, ec), "checkpoint ", path, ": shard file ", file_path,
           " is missing (the index lists ", world, " shards)");
  const SafetensorsFile shard = load_safetensors(file_path);  // its checksums: damage
  const auto format = shard.metadata.find("format");
  MT_CHECK(format != shard.metadata.end() && format->second == kShardFormat, "checkpoint ", path, ": ", file_path,
           " is not a minitrain checkpoint shard");
  MT_CHECK(table.size() == shard.tensors.size(), "checkpoint ", path, ": shard ", file_path, " does not match the "
           "index: it holds ", shard.tensors.size(), " pieces, the index lists ", table.size());
  std::map<std::string, const Tensor*> by_key;
  for (const auto& [name, t] : shard.tensors) by_key[name] = &t;
  for (const Entry& e : table) {
    const auto it = by_key.find(piece_key(e.name, e.offset));
    MT_CHECK(it != by_key.end() && it->second->numel() == e.numel && crc_of(*it->second) == e.crc, "checkpoint ",
             path, ": shard ", file_path, " does not match the index: '", piece_key(e.name, e.offset), "' is ",
             it == by_key.end() ? std::string("not in it") : "not the piece the index describes (another save's shard?)");
    Whole& w = wholes.by_name[e.name];
    if (!w.flat.defined()) {
      wholes.order.push_back(e.name);
      w.shape = e.shape;
      w.flat = zeros({e.shape.numel()}, {.dtype = it->second->dtype()});
    }
    MT_CHECK(w.shape == e.shape && w.flat.dtype() == it->second->dtype(), "checkpoint ", path, ": the pieces of '",
             e.name, "' disagree on its shape or dtype (shard ", rank, ")");
    raw::copy_(raw::narrow(w.flat, 0, e.offset, e.numel), *it->second);
    w.covered.emplace_back(e.offset, e.offset + e.numel);
  }
}

}  // namespace

std::string shards_folder(const std::string& index_path) {
  const std::string suffix = kSuffix;
  const bool has = index_path.size() > suffix.size() &&
                   index_path.compare(index_path.size() - suffix.size(), suffix.size(), suffix) == 0;
  return (has ? index_path.substr(0, index_path.size() - suffix.size()) : index_path) + ".shards";
}

std::string shard_path(const std::string& index_path, int rank, int world) {
  char name[64];
  std::snprintf(name, sizeof name, "shard-%05d-of-%05d%s", rank, world, kSuffix);
  return (std::filesystem::path(shards_folder(index_path)) / name).string();
}

std::vector<ShardPiece> whole_pieces(const Checkpoint& c) {
  std::vector<ShardPiece> pieces;
  for (const auto& [name, t] : detail::checkpoint_tensors(c))
    pieces.push_back({.name = name, .shape = t.sizes(), .offset = 0, .data = raw::reshape(t, {t.numel()})});
  return pieces;
}

std::string save_checkpoint_shard(const std::string& index_path, int rank, int world,
                                  const std::vector<ShardPiece>& pieces) {
  NamedTensors tensors;
  std::string table;
  for (const ShardPiece& p : pieces) {
    MT_CHECK(p.name.find_first_of(" \n") == std::string::npos && p.data.dim() == 1 &&
             p.offset + p.data.numel() <= p.shape.numel(), "save_checkpoint_shard: piece '", p.name, "' at ", p.offset,
             " is not a 1-D range of a tensor of shape ", p.shape, " with a name without spaces");
    const Tensor host = raw::contiguous(p.data.to(kCPU));
    tensors.emplace_back(piece_key(p.name, p.offset), host);
    table += p.name + " " + shape_text(p.shape) + " " + std::to_string(p.offset) + " " + std::to_string(host.numel()) +
             " " + crc_of(host) + "\n";
  }
  std::error_code ec;
  std::filesystem::create_directories(shards_folder(index_path), ec);
  MT_CHECK(!ec, "checkpoint ", index_path, ": cannot create ", shards_folder(index_path), ": ", ec.message());
  save_safetensors(shard_path(index_path, rank, world), tensors,
                   {{"format", kShardFormat}, {"rank", std::to_string(rank)}, {"world", std::to_string(world)}});
  return table;
}

void save_sharded_index(const std::string& index_path, const Checkpoint& c, int stage,
                        const std::vector<std::string>& tables) {
  std::map<std::string, std::string> meta = detail::checkpoint_metadata(c, kShardedFormat);
  meta["world"] = std::to_string(tables.size());
  meta["stage"] = std::to_string(stage);
  meta["shards"] = std::filesystem::path(shards_folder(index_path)).filename().string();
  for (size_t r = 0; r < tables.size(); ++r) {
    char key[32];
    std::snprintf(key, sizeof key, "shard.%05zu", r);
    meta[key] = tables[r];
  }
  save_safetensors(index_path, {}, meta);
}

Checkpoint load_sharded_checkpoint(const SafetensorsFile& index, const std::string& path) {
  const auto& meta = index.metadata;
  Checkpoint c = detail::checkpoint_counters(meta, path);
  const int64_t world = meta_int(meta, "world", path);
  MT_CHECK(world >= 1 && index.tensors.empty(), "checkpoint ", path, ": a sharded checkpoint's index with ", world,
           " shards and ", index.tensors.size(), " tensors of its own");
  Wholes wholes;
  for (int r = 0; r < world; ++r) {
    char key[32];
    std::snprintf(key, sizeof key, "shard.%05d", r);
    const auto table = meta.find(key);
    MT_CHECK(table != meta.end(), "checkpoint ", path, ": the index has no table for shard ", r, " ('", key, "')");
    read_shard(path, r, static_cast<int>(world), parse_table(table->second, path, r), wholes);
  }
  for (const std::string& name : wholes.order) {
    const Whole& w = wholes.by_name.at(name);
    const int64_t hole = first_hole(w.covered, w.shape.numel());
    MT_CHECK(hole < 0, "checkpoint ", path, ": element ", hole, " of '", name, "' is in none of the ", world, " shards");
    detail::add_checkpoint_tensor(c, name, raw::view(w.flat, w.shape), path);
  }
  return c;
}

}  // namespace mt
