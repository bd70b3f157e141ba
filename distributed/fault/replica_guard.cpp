// The replica guard (see replica_guard.h): hash each parameter, allgather, compare with rank 0.
#include "distributed/fault/replica_guard.h"

#include <cstring>
#include <sstream>

namespace mt::dist {

namespace {

uint64_t mix(uint64_t h, uint64_t word) {
  h ^= word * 0x9e3779b97f4a7c15ull;
  h = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 32);
}

}  // namespace

int64_t replica_hash(const Tensor& t) {
  const Tensor host = t.detach().to(kCPU).contiguous();
  uint64_t h = mix(0, static_cast<uint64_t>(host.dtype()));
  for (const int64_t size : host.sizes()) h = mix(h, static_cast<uint64_t>(size));
  const auto* bytes = static_cast<const unsigned char*>(host.raw_data());
  const size_t n = static_cast<size_t>(host.numel()) * element_size(host.dtype());
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {  // eight bytes at a time: a pass over the model should cost little
    uint64_t word;
    std::memcpy(&word, bytes + i, 8);
    h = mix(h, word);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes + i, n - i);
  h = mix(h, tail ^ (static_cast<uint64_t>(n - i) << 56));
  return static_cast<int64_t>(h >> 1);  // non-negative: reads well in a message
}

void check_replicas(ProcessGroup& pg, const NamedTensors& parameters, const std::string& when) {
  if (pg.size() == 1) return;
  std::vector<int64_t> hashes;
  for (const auto& [name, p] : parameters) hashes.push_back(replica_hash(p));
  hashes.push_back(static_cast<int64_t>(parameters.size()));  // so that no rank has an empty tensor
  std::vector<Tensor> all;
  pg.allgather(all, from_vector(hashes, {static_cast<int64_t>(hashes.size())}).to(pg.device()))->wait();
  std::vector<std::vector<int64_t>> per_rank;
  for (const Tensor& t : all) per_rank.push_back(t.to(kCPU).to_vector<int64_t>());
  for (size_t i = 0; i < parameters.size(); ++i) {
    std::vector<int> differ;
    for (int r = 1; r < pg.size(); ++r)
      if (per_rank[r][i] != per_rank[0][i]) differ.push_back(r);
    if (differ.empty()) continue;
    std::ostringstream ranks;
    for (size_t k = 0; k < differ.size(); ++k) ranks << (k ? ", " : "") << differ[k];
    MT_FAIL("replica guard on rank ", pg.rank(), " ", when, ": the model replicas differ. Parameter '",
            parameters[i].first, "' (#", i, " of ", parameters.size(), ") on rank", differ.size() > 1 ? "s " : " ",
            ranks.str(), " is not bit-for-bit rank 0's (hash ", per_rank[differ[0]][i], " against ",
            per_rank[0][i], "). Every rank must apply the same updates to the same values; a rank that "
            "skipped a step, a non-deterministic kernel or a comm hook that did not leave the same average "
            "everywhere makes them drift");
  }
}

}  // namespace mt::dist
