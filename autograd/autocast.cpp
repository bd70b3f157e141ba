// Autocast's state (one per thread), its guard, the three cast policies, and the weight-cast cache.
// The ops that apply the policies call them at their top (autograd/functions/*.cpp, nn/loss.cpp).
#include "autograd/autocast.h"

#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "tensor/check.h"

namespace mt {

// Note [Autocast op lists]: which ops autocast changes, and to what. The lists follow PyTorch's
// "Autocast Op Reference" (https://pytorch.org/docs/stable/amp.html) and its source,
// aten/src/ATen/autocast_mode.cpp, restricted to the ops minitrain has:
//   lower precision (to_lower: inputs to bfloat16/float16): matmul, linear, conv2d (conv1d is
//     conv2d), conv_transpose2d, scaled_dot_product_attention. GEMM-shaped work gains the most from
//     16-bit operands and sums in float32 anyway (Note [Low-precision GEMM in tiles], Note
//     [Low-precision convolution], Note [Low-precision attention]). PyTorch's CUDA list has all of
//     them, and PyTorch 2's CPU list scaled_dot_product_attention; 1.13's CPU list keeps
//     conv_transpose in float32.
//   float32 (to_float32: 16-bit inputs to float32): softmax, log_softmax, layer_norm (and the group
//     norm built on it), batch_norm_train, sum, mean, var, std, logsumexp, cumsum, exp, expm1, log,
//     log1p, pow, and every loss in nn/loss.cpp. This is PyTorch's CUDA list ("CUDA Ops that can
//     autocast to float32") plus mean, var, std and batch norm, whose statistics need the range.
//     cross_entropy's common case takes its 16-bit logits as they are and computes in float32 block
//     by block inside its node: float32's arithmetic and a float32 loss, without a float32 copy of
//     the logits (Note [Cross-entropy in row blocks]).
//     PyTorch 1.13's CPU list is shorter (losses, not softmax or the norms): its CPU kernels for
//     bfloat16 softmax and layer norm compute in float32 inside and round their result to bfloat16.
//     Ours have no 16-bit path (softmax's and layer norm's kernels take float32 and float64), so
//     those ops run in float32 and return float32, which is what such a kernel computes inside
//     anyway; the values stay within bfloat16 rounding of PyTorch's (tests/nn/test_autocast_torch.cpp
//     lists where the dtypes differ).
//   promote (promote: all inputs to the widest): cat, stack, as PyTorch's list. Binary elementwise
//     ops (add, mul, where, ...) need no list: they promote by the dtype rules of every region, so
//     bfloat16 + float32 is float32 with or without autocast.
//   everything else runs in the dtype of its inputs (relu, gelu, views, embedding, ...), as in
//     PyTorch: a GPT's GELU reads the bfloat16 output of its linear and writes bfloat16.
// An op that is a composition of others (attention with a mask, the losses) gets its constituents'
// policies, since autocast is not switched off inside an op as PyTorch's dispatcher does: a
// composition exists here where a kernel does not, and its pieces must each run where a kernel is.

namespace {

struct State {
  bool enabled = false;
  DType dtype = kBFloat16;
  bool cache_enabled = true;
  int depth = 0;  // guards alive on this thread, enabled or not
};
thread_local State state;

// Note [Autocast cast cache]: a float32 weight used by several low-precision ops in one region (a
// tied embedding and output head; a weight used at every time step) is cast once, as PyTorch caches
// the casts of leaves that require grad (aten/src/ATen/autocast_mode.cpp, cached_cast). The cache
// lives until the outermost guard on the thread exits, so a training step under one guard casts each
// weight once, and the next step, under a new guard, sees the updated weights. Three departures
// from PyTorch 1.13, each closing a way to get a stale or dead cast:
//   - the cast is made with grad mode on even inside no_grad, so a cast cached during an evaluation
//     pass still carries the weight's gradient when training follows in the same region (1.13 hands
//     out the history-less cast and the weight silently gets no gradient: pytorch/pytorch#112583,
//     fixed the same way by pytorch/pytorch#165068);
//   - an entry remembers the weight's version and is cast again once the weight changed in place (an
//     optimizer step inside the region);
//   - the entry holds the weight itself, not a weak reference, so its address cannot be reused by
//     another tensor while the entry lives (the region ends before memory matters).
struct CachedCast {
  Tensor weight;
  uint64_t version = 0;
  DType dtype = kBFloat16;
  Tensor cast;
};
thread_local std::unordered_map<const TensorImpl*, CachedCast> cache;

// What autocast may cast at all: floating tensors other than float64, as PyTorch's is_eligible.
bool eligible(const Tensor& t) { return t.defined() && is_floating(t.dtype()) && t.dtype() != kFloat64; }

bool cacheable(const Tensor& t) {
  return state.cache_enabled && t.dtype() == kFloat32 && t.requires_grad() && t.is_leaf();
}

// Grad mode on for its scope (the cache's casts, above), restored on every exit path.
class GradOn {
 public:
  GradOn() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~GradOn() { GradMode::set_enabled(prev_); }
  GradOn(const GradOn&) = delete;
  GradOn& operator=(const GradOn&) = delete;

 private:
  bool prev_;
};

Tensor cached_cast(const Tensor& t, DType dtype) {
  auto it = cache.find(t.unsafe_impl());
  if (it != cache.end() && it->second.version == t.version() && it->second.dtype == dtype) return it->second.cast;
  Tensor c;
  {
    GradOn on;
    c = cast(t, dtype);
  }
  cache[t.unsafe_impl()] = CachedCast{t, t.version(), dtype, c};
  return c;
}

}  // namespace

AutocastGuard::AutocastGuard(DType dtype, AutocastOptions options)
    : prev_enabled_(state.enabled), prev_dtype_(state.dtype), prev_cache_enabled_(state.cache_enabled) {
  MT_CHECK(dtype == kBFloat16 || dtype == kFloat16, "AutocastGuard: the low-precision dtype must be bfloat16 or "
           "float16, got ", dtype);
  state.enabled = options.enabled;
  state.dtype = dtype;
  state.cache_enabled = options.cache_enabled;
  ++state.depth;
}

AutocastGuard::~AutocastGuard() {
  if (--state.depth == 0) cache.clear();
  state.enabled = prev_enabled_;
  state.dtype = prev_dtype_;
  state.cache_enabled = prev_cache_enabled_;
}

namespace autocast {

bool is_enabled() { return state.enabled; }
DType dtype() { return state.dtype; }

Tensor to_lower(const Tensor& t) {
  if (!state.enabled || !eligible(t) || t.dtype() == state.dtype) return t;
  return cacheable(t) ? cached_cast(t, state.dtype) : cast(t, state.dtype);
}

Tensor to_float32(const Tensor& t) {
  if (!state.enabled || !eligible(t) || t.dtype() == kFloat32) return t;
  return cast(t, kFloat32);
}

std::vector<Tensor> promote(const std::vector<Tensor>& tensors) {
  if (!state.enabled) return tensors;
  DType widest = state.dtype;
  for (const Tensor& t : tensors)
    if (eligible(t) && t.dtype() != widest) widest = kFloat32;  // float32, or bfloat16 meeting float16
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) out.push_back(eligible(t) ? cast(t, widest) : t);
  return out;
}

size_t cached_casts() { return cache.size(); }

}  // namespace autocast
}  // namespace mt
