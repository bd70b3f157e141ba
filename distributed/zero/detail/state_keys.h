// The key names of an optimizer state dict (Note [Optimizer state dict]) as ZeroRedundancyOptimizer
// and FsdpOptimizer read them when they consolidate or cut their pieces: "state.<i>.<field>" per
// parameter, "param_groups.<g>.<name>" per group, "param_groups.<g>.num_params" the group's count.
#pragma once

#include <string>

#include "tensor/check.h"

namespace mt::dist::detail {

inline const std::string kStateKey = "state.";
inline const std::string kGroupsKey = "param_groups.";

// "state.12.exp_avg" -> (12, "exp_avg"); false for other keys.
inline bool split_state_key(const std::string& key, size_t& index, std::string& field) {
  if (key.rfind(kStateKey, 0) != 0) return false;
  const size_t dot = key.find('.', kStateKey.size());
  if (dot == std::string::npos) return false;
  index = std::stoul(key.substr(kStateKey.size(), dot - kStateKey.size()));
  field = key.substr(dot + 1);
  return true;
}

// "param_groups.1.lr" -> 1. `who` names the optimizer in the error.
inline size_t group_of_key(const std::string& key, const char* who) {
  MT_CHECK(key.rfind(kGroupsKey, 0) == 0, who, ": unexpected optimizer state key '", key, "'");
  return std::stoul(key.substr(kGroupsKey.size(), key.find('.', kGroupsKey.size()) - kGroupsKey.size()));
}

// "param_groups.<g>.num_params": a count, which a sharded optimizer rewrites to the full group's.
inline bool is_count_key(const std::string& key) {
  const std::string suffix = ".num_params";
  return key.size() >= suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace mt::dist::detail
