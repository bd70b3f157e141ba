// cumsum: running sums along one dim, with a node of its own whose backward is the running sum taken
// from the other end. Both directions run the backend's scan (raw::cumsum, tensor/raw_scan.cpp).
#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "tensor/raw_ops.h"

namespace mt {

using detail::record;
using detail::set_history;

namespace {

// y[i] = Σ_{j <= i} x[j]   =>   dx[j] = Σ_{i >= j} dy[i], the running sum from the other end.
struct CumsumBackward final : Node {
  int dim = 0;
  TensorList apply(TensorList&& g) override { return {raw::cumsum(g[0], dim, /*reverse=*/true)}; }
  std::string name() const override { return "CumsumBackward"; }
};

}  // namespace

Tensor cumsum(const Tensor& x_in, int64_t dim) {
  const Tensor x = autocast::to_float32(x_in);  // Note [Autocast op lists]
  if (x.dim() == 0) return clone(x);
  const int d = wrap_dim(dim, x.dim(), "cumsum");
  Tensor y = raw::cumsum(x, d);  // one pass on the CPU; composed elsewhere (Note [Cumsum by doubling])
  if (auto node = record<CumsumBackward>({&x})) {
    node->dim = d;
    set_history(y, node);
  }
  return y;
}

}  // namespace mt
