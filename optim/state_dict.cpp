// The state-dict reader: strict loading with errors that name the key (see state_dict.h).
#include "optim/state_dict.h"

#include "tensor/raw_ops.h"

namespace mt::optim::detail {

Tensor scalar_entry(double value) { return scalar_tensor(value, {.dtype = kFloat64}); }

bool StateDictReader::has_prefix(const std::string& prefix) const {
  auto it = dict_.lower_bound(prefix);  // keys are sorted: the first key >= prefix is the candidate
  return it != dict_.end() && it->first.compare(0, prefix.size(), prefix) == 0;
}

size_t StateDictReader::count_indices(const std::string& prefix) const {
  std::set<std::string> indices;
  for (auto it = dict_.lower_bound(prefix); it != dict_.end(); ++it) {
    const std::string& key = it->first;
    if (key.compare(0, prefix.size(), prefix) != 0) break;
    indices.insert(key.substr(prefix.size(), key.find('.', prefix.size()) - prefix.size()));
  }
  return indices.size();
}

const Tensor& StateDictReader::at(const std::string& key) {
  auto it = dict_.find(key);
  MT_CHECK(it != dict_.end(), owner_, ": load_state_dict: missing key ", key,
           " (was the state saved by a different optimizer or scheduler, or with other options?)");
  MT_CHECK(it->second.defined(), owner_, ": load_state_dict: ", key, " is an undefined tensor");
  used_.insert(key);
  return it->second;
}

double StateDictReader::scalar(const std::string& key) {
  const Tensor& t = at(key);
  MT_CHECK(t.numel() == 1, owner_, ": load_state_dict: ", key, " should hold one number, it has shape ",
           t.sizes());
  return t.item();
}

void StateDictReader::expect_count(const std::string& key, size_t expected, const std::string& what) {
  const double n = scalar(key);
  MT_CHECK(n == static_cast<double>(expected), owner_, ": load_state_dict: ", what, " has ", n,
           " in the state dict but ", expected, " here (", key, ")");
}

Tensor StateDictReader::tensor_like(const std::string& key, const Tensor& like, const std::string& what) {
  const Tensor& t = at(key);
  MT_CHECK(t.sizes() == like.sizes(), owner_, ": load_state_dict: ", key, " has shape ", t.sizes(),
           " but ", what, " has shape ", like.sizes());
  MT_CHECK(is_floating(t.dtype()), owner_, ": load_state_dict: ", key, " is ", t.dtype(),
           ", expected a floating-point tensor");
  // Fresh storage: loaded state must not alias the dict (the dict may be loaded twice, or kept).
  Tensor out = empty(like.sizes(), {.dtype = like.dtype(), .device = like.device()});
  raw::copy_(out, raw::to_device(t, like.device()));
  return out;
}

void StateDictReader::check_all_used() const {
  for (const auto& [key, value] : dict_)
    MT_CHECK(used_.count(key), owner_, ": load_state_dict: unexpected key ", key,
             " (was the state saved by a different optimizer or scheduler, or with other options?)");
}

}  // namespace mt::optim::detail
