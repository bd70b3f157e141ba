// safetensors.cpp: the writer of nn/safetensors.h (plan the layout, stream the bytes to a string or,
// atomically, to a file, checksumming each tensor on the way). The strict reader is
// safetensors_read.cpp; the format itself is described in safetensors.h.
//
// Not here: memory mapping, or anything that knows about Modules. Nothing is converted on the way
// out: tensors are written in their own dtype.
#include "nn/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "nn/crc32c.h"
#include "nn/detail/safetensors_format.h"
#include "tensor/output_file.h"

namespace mt {
namespace {

using namespace detail;
// nlohmann does the quoting and escaping of names and metadata.
using Json = nlohmann::json;

const char* safetensors_dtype_name(DType dtype, const std::string& tensor) {
  for (const auto& d : kDTypeNames)
    if (d.dtype == dtype) return d.name;
  MT_FAIL("save_safetensors: tensor '", tensor, "' has dtype ", dtype,
          ", which minitrain does not save (F32, F64, I64, BF16 and F16 only)");
}

// Note [Data order]: the data section holds 8-byte dtypes first, then 4-byte, then 2-byte ones (a
// stable sort by descending element size), and within one element size the caller's order. Every tensor then
// starts at a multiple of its element size from the 8-aligned data section, so readers that map the
// file and view it in place (numpy.frombuffer, safetensors' zero-copy loads) see aligned data. The
// reference implementation does the same but sorts by name within a size; keeping the caller's
// order instead means a state dict comes back in registration order. Readers must not rely on any
// order: load returns tensors in the order of their data, whatever wrote the file.

// Note [Tensor checksums]: every file we write carries, in its metadata, the CRC32C (nn/crc32c.h) of
// each tensor's bytes as they lie in the data section: key "mt.crc32c.<tensor name>", value 8
// lowercase hex digits ("mt.crc32c.0.weight": "e3069283"). One key per tensor, because the format
// allows only strings there, and so that a reader finds a tensor's checksum by its name alone.
// The loader checks every tensor that has one and refuses the file, naming the tensor, when its
// bytes differ: a flipped bit in the data would otherwise load as a silently different model.
// The keys are the file's, not the caller's: save refuses metadata that uses the prefix, and load
// takes them out of the metadata it returns, so metadata round-trips unchanged. Files without any
// checksum (older minitrain files, Python's safetensors, PyTorch's) load unchecked, as before;
// a file with some must have one for every tensor and none for a tensor it lacks.
// The checksums are computed as the data streams out (each tensor is copied to the host once, on
// its way to the file), after the header that holds them has been written: the header goes out
// with zeros in their place and is written again over itself once they are known. Fixed-width
// values keep the second header exactly as long as the first.
// Not covered: the header itself. Damage there is mostly caught by the strict parser (Note
// [Hostile files]: broken JSON, offsets that no longer tile the data), but a changed digit in a
// metadata value would pass.

struct Plan {
  std::string prefix;  // the 8-byte length and the padded JSON header: everything before the data
  NamedTensors data;   // the caller's tensors, in data order
  std::map<std::string, std::string> metadata;  // the caller's
};

// The 8-byte length and the padded header for `plan`'s tensors with checksums `crcs` (in data order).
std::string file_prefix(const Plan& plan, const std::vector<uint32_t>& crcs) {
  std::map<std::string, std::string> metadata = plan.metadata;
  for (size_t i = 0; i < plan.data.size(); ++i) metadata[kChecksumPrefix + plan.data[i].first] = checksum_hex(crcs[i]);
  // The header object is written key by key, so that it lists the tensors in data order (a Json
  // object would sort them by name); nlohmann still does the quoting and escaping.
  std::string json = "{";
  try {
    if (!metadata.empty()) json += Json(kMetadataKey).dump() + ":" + Json(metadata).dump();
    uint64_t offset = 0;
    for (const auto& [name, t] : plan.data) {
      uint64_t nbytes = static_cast<uint64_t>(t.numel()) * element_size(t.dtype());
      Json entry = {{"dtype", safetensors_dtype_name(t.dtype(), name)},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
      if (json.size() > 1) json += ",";
      json += Json(name).dump() + ":" + entry.dump();
      offset += nbytes;
    }
  } catch (const Json::exception& e) {  // a name or metadata string that is not valid UTF-8
    MT_FAIL("save_safetensors: cannot write the header: ", e.what());
  }
  json += "}";
  // Spaces are JSON whitespace, so padding keeps the header valid while aligning the data to 8 bytes.
  json.append((8 - json.size() % 8) % 8, ' ');

  uint64_t n = json.size();
  std::string prefix(8, '\0');
  std::memcpy(prefix.data(), &n, 8);  // little-endian: see the static_assert above
  return prefix + json;
}

Plan plan_file(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    MT_CHECK(name != kMetadataKey, "save_safetensors: '", kMetadataKey,
             "' is reserved for the metadata map and cannot name a tensor");
    MT_CHECK(seen.insert(name).second, "save_safetensors: duplicate tensor name '", name, "'");
    MT_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    safetensors_dtype_name(t.dtype(), name);
  }
  for (const auto& [key, value] : metadata)
    MT_CHECK(key.rfind(kChecksumPrefix, 0) != 0, "save_safetensors: metadata key '", key, "' starts with '",
             kChecksumPrefix, "', which is reserved for the file's own tensor checksums");

  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return element_size(tensors[a].second.dtype()) > element_size(tensors[b].second.dtype());
  });
  Plan plan;
  for (size_t i : order) plan.data.push_back(tensors[i]);
  plan.metadata = metadata;
  // With placeholder checksums: the real ones have the same width (Note [Tensor checksums]), and
  // anything in the names or metadata that cannot be written fails here, before any file is touched.
  plan.prefix = file_prefix(plan, std::vector<uint32_t>(plan.data.size(), 0));
  return plan;
}

// Hands `sink` the file's bytes in order, the header with placeholder checksums, and returns the
// header with the real ones (the same length), which the caller writes over the first. Each tensor
// is copied to contiguous CPU memory just before its bytes are needed, so saving a GPU model never
// holds more than one tensor's host copy at once.
std::string emit(const Plan& plan, const std::function<void(const void*, size_t)>& sink) {
  sink(plan.prefix.data(), plan.prefix.size());
  std::vector<uint32_t> crcs;
  for (const auto& [name, t] : plan.data) {
    size_t nbytes = static_cast<size_t>(t.numel()) * element_size(t.dtype());
    crcs.push_back(0);  // the CRC32C of no bytes
    if (nbytes == 0) continue;  // an empty tensor may have no storage bytes to point at
    // detach(): the copy is for the file, not for autograd; no graph is recorded.
    Tensor host = t.detach().to(kCPU).contiguous();
    crcs.back() = crc32c(host.raw_data(), nbytes);
    sink(host.raw_data(), nbytes);
  }
  std::string prefix = file_prefix(plan, crcs);
  MT_CHECK(prefix.size() == plan.prefix.size(), "save_safetensors: the header changed length with its checksums");
  return prefix;
}

}  // namespace

std::string encode_safetensors(const NamedTensors& tensors,
                               const std::map<std::string, std::string>& metadata) {
  Plan plan = plan_file(tensors, metadata);
  std::string out;
  const std::string prefix = emit(plan, [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  out.replace(0, prefix.size(), prefix);
  return out;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // Everything that can fail on bad input fails here, before any file is touched.
  Plan plan = plan_file(tensors, metadata);
  // Written atomically, a symlink through to its file, a device refused (Note [Output files]).
  AtomicFile file(path, "save_safetensors");
  const std::string prefix = emit(plan, [&](const void* p, size_t n) { file.write(p, n); });
  file.write_at(0, prefix.data(), prefix.size());
  file.commit();
}

}  // namespace mt
