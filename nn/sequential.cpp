// Sequential: forward through the chain.
#include "nn/sequential.h"

namespace mt::nn {

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& m : *this) h = (*m)(h);
  return h;
}

}  // namespace mt::nn
