// ModuleDict: lookup by key. The entries are the module's children, so there is no second table.
#include "nn/module_dict.h"

#include <sstream>

namespace mt::nn {

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& entry : *this)
    if (entry.first == key) return true;
  return false;
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& key) const {
  for (const auto& entry : *this)
    if (entry.first == key) return entry.second;
  std::ostringstream known;
  for (const auto& entry : *this) known << (known.tellp() > 0 ? ", " : "") << entry.first;
  MT_FAIL("ModuleDict: no module under key '", key, "' (keys: ", known.str().empty() ? "none" : known.str(), ")");
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& entry : *this) out.push_back(entry.first);
  return out;
}

}  // namespace mt::nn
