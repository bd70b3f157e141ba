// The parameter fingerprint DDP compares across ranks at construction (see ddp_fingerprint.h).
#include "distributed/ddp/detail/ddp_fingerprint.h"

#include <algorithm>
#include <sstream>

namespace mt::dist {

namespace {

// "fc1.weight [16, 6] float32": one line of the fingerprint.
std::string describe_parameter(const std::string& name, const Tensor& t) {
  std::ostringstream os;
  os << name << " " << t.sizes() << " " << t.dtype();
  return os.str();
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream is(s);
  for (std::string line; std::getline(is, line);) lines.push_back(line);
  return lines;
}

// Every rank's string, gathered on every rank. Strings of different lengths cannot be gathered
// directly (allgather wants equal sizes), so: gather the lengths, then the strings padded to the
// longest, one character per int64. The tensors live on the group's device (NCCL takes GPU tensors
// only) and come back to the host to be read.
std::vector<std::string> allgather_string(ProcessGroup& pg, const std::string& s) {
  std::vector<Tensor> lengths;
  pg.allgather(lengths, from_vector(std::vector<int64_t>{static_cast<int64_t>(s.size())}, {1}).to(pg.device()))
      ->wait();
  for (Tensor& l : lengths) l = l.to(kCPU);
  int64_t longest = 0;
  for (const Tensor& l : lengths) longest = std::max(longest, l.to_vector<int64_t>()[0]);
  std::vector<int64_t> padded(static_cast<size_t>(std::max<int64_t>(longest, 1)), 0);
  std::copy(s.begin(), s.end(), padded.begin());
  std::vector<Tensor> gathered;
  pg.allgather(gathered, from_vector(padded, {static_cast<int64_t>(padded.size())}).to(pg.device()))->wait();
  for (Tensor& g : gathered) g = g.to(kCPU);
  std::vector<std::string> out;
  for (size_t r = 0; r < gathered.size(); ++r) {
    const std::vector<int64_t> chars = gathered[r].to_vector<int64_t>();
    const int64_t length = lengths[r].to_vector<int64_t>()[0];
    out.emplace_back(chars.begin(), chars.begin() + length);
  }
  return out;
}

}  // namespace

void check_same_parameters(ProcessGroup& pg, const NamedTensors& params) {
  std::string fingerprint;
  for (const auto& [name, p] : params) fingerprint += describe_parameter(name, p) + "\n";
  const std::vector<std::string> all = allgather_string(pg, fingerprint);
  const std::vector<std::string> reference = split_lines(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    const std::vector<std::string> theirs = split_lines(all[r]);
    for (size_t i = 0; i < std::max(reference.size(), theirs.size()); ++i) {
      const std::string a = i < reference.size() ? reference[i] : "nothing";
      const std::string b = i < theirs.size() ? theirs[i] : "nothing";
      MT_CHECK(a == b, "DDP: the ranks' models differ at parameter #", i, ": rank 0 has ", a, ", rank ", r,
               " has ", b, ". Every rank must build the same model");
    }
  }
}

}  // namespace mt::dist
