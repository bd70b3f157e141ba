// Autocast (mixed precision): a scoped policy under which each differentiable op picks the dtype it
// computes in. The GEMM-shaped ops (matmul, linear) take bfloat16 or float16 inputs, the ops that
// need range or accuracy (softmax, norms, losses, reductions, exp/log/pow) take float32, and a few
// that join tensors take the widest of their inputs (Note [Autocast op lists], autograd/autocast.cpp).
//
//   mt::AutocastGuard guard(mt::kBFloat16);   // torch.autocast("cpu", dtype=torch.bfloat16)
//   Tensor loss = loss_fn(model(x), y);        // forward and loss in mixed precision
//   (leave the scope) loss.backward();         // parameters stay float32 and get float32 gradients
//
// The casts are ordinary differentiable casts (mt::cast), recorded in the graph like any op, so a
// float32 parameter's gradient comes back to it in float32 through the cast's backward. What it
// does not do: change any tensor's dtype in place, touch backward formulas (they run on raw ops,
// which autocast never sees), or keep one state per device type as PyTorch does (one state here,
// for every device). The state is per thread, like grad mode.
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace mt {

struct AutocastOptions {
  bool enabled = true;        // false: a region where autocast is off, as torch.autocast(enabled=False)
  bool cache_enabled = true;  // reuse a weight's cast within the region (Note [Autocast cast cache])
};

// Turns autocast on (or off, with .enabled = false) for its scope, with `dtype` (bfloat16 or
// float16) as the low precision; restores the previous state on every exit path. Guards nest; the
// outermost one to exit drops the cached weight casts.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = kBFloat16, AutocastOptions options = {});
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
  bool prev_cache_enabled_;
};

namespace autocast {

bool is_enabled();
DType dtype();  // the low-precision dtype of the innermost guard (bfloat16 when there is none)

// The three policies an op applies to its inputs (Note [Autocast op lists]). Each returns its input
// unchanged when autocast is off, and leaves alone what autocast never casts: undefined tensors,
// int64 and float64 tensors (so a float64 gradcheck under autocast stays float64).
Tensor to_lower(const Tensor& t);    // floating -> the low-precision dtype; weights once per region
Tensor to_float32(const Tensor& t);  // bfloat16/float16 -> float32
// Every floating input to the widest floating dtype among them (float32 if any is float32, or if
// bfloat16 meets float16; float64 inputs are left alone and do not count), as PyTorch's "promote".
std::vector<Tensor> promote(const std::vector<Tensor>& tensors);

// How many weight casts the cache holds now (tests; Note [Autocast cast cache]).
size_t cached_casts();

}  // namespace autocast
}  // namespace mt
