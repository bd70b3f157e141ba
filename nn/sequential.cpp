// Sequential: forward through the chain, fusing the runs BatchNorm2d, ReLU (, MaxPool2d).
#include "nn/sequential.h"

#include <optional>
#include <typeinfo>

#include "nn/activation.h"
#include "nn/batchnorm.h"
#include "nn/pooling.h"

namespace mt::nn {

namespace {

// Element i when it is exactly an M (not a subclass, which may override forward) without hooks; else null.
template <typename M>
M* plain(const Sequential& seq, size_t i) {
  if (i >= seq.size()) return nullptr;
  Module* m = seq[i].get();
  return m && typeid(*m) == typeid(M) && !m->has_hooks() ? static_cast<M*>(m) : nullptr;
}

}  // namespace

// Note [Fused runs in Sequential]: consecutive elements BatchNorm2d, ReLU, and a MaxPool2d after them
// when there is one, run as one op, BatchNorm::forward_relu (Note [Fused batch norm, ReLU and pool]):
// the values, gradients and running statistics of calling each in turn, in fewer passes over the
// activations. A run is fused only where calling it whole cannot be told from calling each element:
// each is exactly its class (a subclass may override forward) and none has hooks (a hook must see the
// tensor between two of them). The modules stay where they are, so parameter names, the state dict,
// printing and named_modules are those of the unfused chain.
Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < size();) {
    if (BatchNorm2d* bn = plain<BatchNorm2d>(*this, i); bn && plain<ReLU>(*this, i + 1)) {
      const MaxPool2d* pool = plain<MaxPool2d>(*this, i + 2);
      h = bn->forward_relu(h, pool ? std::optional<Pool2dOptions>(pool->options) : std::nullopt);
      i += pool ? 3 : 2;
      continue;
    }
    h = (*(*this)[i])(h);
    ++i;
  }
  return h;
}

}  // namespace mt::nn
