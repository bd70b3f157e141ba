// SGD's update, twice: a fused loop over the raw data of contiguous CPU float32/float64 tensors (one
// pass, no temporaries: the seed model's step is a few hundred floats, where per-op overhead is the
// whole cost), and the same formulas in tensor ops for everything else. The tests check that both
// give the same numbers.
//
// torch.optim.SGD, for a parameter p with gradient g (μ momentum, τ dampening, λ weight decay):
//   g = g + λ·p                          if λ ≠ 0
//   b = g                                on the first step with momentum (no dampening yet)
//   b = μ·b + (1 − τ)·g                  on later steps                  } if μ ≠ 0
//   g = g + μ·b  if nesterov, else g = b                                 }
//   p = p − lr·g
#include "optim/sgd.h"

#include <cmath>

#include "autograd/ops.h"
#include "tensor/parallel.h"
#include "tensor/raw_ops.h"

namespace mt::optim {

void SGDOptions::check(size_t group) const {
  MT_CHECK(!std::isnan(lr), "SGD: lr is required and was not given for param group ", group,
           " (e.g. SGD(params, {.lr = 0.01}))");
  MT_CHECK(lr >= 0, "SGD: invalid learning rate ", lr, " for param group ", group, "; it must be >= 0");
  MT_CHECK(momentum >= 0, "SGD: invalid momentum ", momentum, " for param group ", group, "; it must be >= 0");
  MT_CHECK(weight_decay >= 0, "SGD: invalid weight_decay ", weight_decay, " for param group ", group,
           "; it must be >= 0");
  MT_CHECK(!nesterov || (momentum > 0 && dampening == 0), "SGD: Nesterov momentum requires a momentum > 0 "
           "and zero dampening; param group ", group, " has momentum ", momentum, " and dampening ", dampening);
}

namespace {

// Parameters with more elements than this update on several threads (tensor/parallel.h); measured
// in bench/README.md, "Threads".
constexpr int64_t kSgdGrain = 32768;

// p, grad, buf: (n) contiguous, dtype T. buf is null without momentum; `first` means it holds
// nothing yet and is to be set to the gradient.
template <typename T>
void sgd_fused(T* __restrict p, const T* __restrict grad, T* __restrict buf, bool first, int64_t n,
               const SGDOptions& o) {
  // Options in locals and __restrict pointers: the branches below are then loop-invariant, the
  // compiler splits the loop per case and vectorises each (with them read through `o` it did
  // neither, and this loop was a tenth of an MLP step).
  const T lr = o.lr, wd = o.weight_decay, mu = o.momentum, keep = 1 - o.dampening;
  const bool decay = wd != 0, nesterov = o.nesterov;
  for (int64_t j = 0; j < n; ++j) {
    T g = grad[j];
    if (decay) g = g + wd * p[j];                   // g = g + λ·p
    if (buf) {
      const T b = first ? g : mu * buf[j] + keep * g;  // b = g,  or  b = μ·b + (1 − τ)·g
      buf[j] = b;
      g = nesterov ? g + mu * b : b;                // g = g + μ·b  or  g = b
    }
    p[j] = p[j] - lr * g;                           // p = p − lr·g
  }
}

// The same update in tensor ops (any device, any strides). `grad` is never modified; `p` is a
// handle (copies share the data), taken by value because the in-place methods are non-const.
void sgd_reference(Tensor p, const Tensor& grad, SGDState& s, const SGDOptions& o) {
  Tensor g = grad;
  if (o.weight_decay != 0) g = g + p * o.weight_decay;
  if (o.momentum != 0) {
    Tensor& b = s.momentum_buffer;
    if (!b.defined()) {
      b = g.clone();
    } else {
      b.mul_(o.momentum).add_(g, 1 - o.dampening);
    }
    g = o.nesterov ? g + b * o.momentum : b;
  }
  p.add_(g, -o.lr);
}

}  // namespace

void SGD::step() {
  for_each_param_with_grad([](const Tensor& p, const Tensor& grad, SGDState& s, const SGDOptions& o) {
    if (!detail::fusable(p, grad, s.momentum_buffer)) return sgd_reference(p, grad, s, o);
    const bool first = o.momentum != 0 && !s.momentum_buffer.defined();
    if (first) s.momentum_buffer = empty_like(p);
    MT_DISPATCH_FLOAT(p.dtype(), "SGD", [&]<typename T>() {
      T* pp = p.data_ptr<T>();
      const T* g = grad.data_ptr<T>();
      T* buf = o.momentum != 0 ? s.momentum_buffer.data_ptr<T>() : nullptr;
      // Elements are independent: fixed chunks on the intra-op threads (Note [Fixed chunks]).
      parallel_for(p.numel(), kSgdGrain, [&](int64_t lo, int64_t hi) {
        sgd_fused<T>(pp + lo, g + lo, buf ? buf + lo : nullptr, first, hi - lo, o);
      });
    });
    p.storage()->bump_version();  // an in-place change, like raw ops: autograd's saved copies see it
  });
}

}  // namespace mt::optim
