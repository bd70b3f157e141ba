// ModuleList: indexed access.
#include "nn/module_list.h"

namespace mt::nn {

const std::shared_ptr<Module>& ModuleList::operator[](size_t i) const {
  MT_CHECK(i < modules_.size(), name(), ": index ", i, " is out of range for ", modules_.size(), " modules");
  return modules_[i];
}

}  // namespace mt::nn
