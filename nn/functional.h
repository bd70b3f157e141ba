// nn::functional (alias nn::F): the layers and losses as plain functions, for code that keeps its
// own parameters, as in libtorch's torch::nn::functional:
//
//   Tensor h = F::relu(F::linear(x, w1, b1));                 // x: (N, 784)  w1: (256, 784)
//   Tensor loss = F::cross_entropy(F::linear(h, w2, b2), y);  // logits: (N, 10)  y: (N) int64
//
// The modules (linear.h, activation.h, dropout.h, loss.h) call these. Everything is composed from
// the differentiable ops of autograd/ops.h, so nothing here has a backward of its own.
//
// What it does not do: K-dimensional (N, C, d1, ...) inputs or probability targets for the
// classification losses; broadcasting between input and target in the other losses (a shape
// mismatch is an error).
#pragma once

#include <cstdint>

#include "autograd/ops.h"
#include "tensor/generator.h"

namespace mt::nn {

// How a loss turns per-element (or per-sample) losses into its result.
enum class Reduction : uint8_t {
  None,  // no reduction: one loss per element (mse) or per sample (nll, cross-entropy)
  Mean,  // their mean (PyTorch's default)
  Sum,   // their sum
  BatchMean,  // their sum over the batch size, input.size(0): kl_div's only, where it is the true KL divergence
};
constexpr Reduction kNone = Reduction::None;
constexpr Reduction kMean = Reduction::Mean;
constexpr Reduction kSum = Reduction::Sum;
constexpr Reduction kBatchMean = Reduction::BatchMean;
const char* reduction_name(Reduction reduction);

// Options of mse_loss, and the reduction every loss module keeps (nn/loss.h):
// F::mse_loss(x, y, {.reduction = nn::kSum}). The other losses have their own options below.
struct LossOptions {
  Reduction reduction = kMean;
};

// nll_loss's: class weights, and a target value that contributes nothing (PyTorch's defaults).
struct NLLLossOptions {
  Reduction reduction = kMean;
  Tensor weight{};             // (C) per-class weight, or undefined for all 1
  int64_t ignore_index = -100;  // samples with this target add 0 and are left out of the mean's count
};

// cross_entropy's: nll_loss's, and label smoothing.
struct CrossEntropyOptions {
  Reduction reduction = kMean;
  Tensor weight{};
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;  // ε in [0, 1]: the target is (1 - ε)·onehot + ε/C uniform
};

// binary_cross_entropy's: a weight broadcast against the per-element losses.
struct BCEOptions {
  Reduction reduction = kMean;
  Tensor weight{};  // broadcasts to input's shape, or undefined
};

struct BCEWithLogitsOptions {
  Reduction reduction = kMean;
  Tensor weight{};    // broadcasts to input's shape, or undefined
  Tensor pos_weight{};  // weight of the positive term per class (last dim), or undefined
};

struct KLDivOptions {
  Reduction reduction = kMean;  // kBatchMean for the KL divergence itself; kMean divides by every element
  bool log_target = false;      // target given as log-probabilities
};

struct SmoothL1Options {
  Reduction reduction = kMean;
  double beta = 1.0;  // quadratic below |d| = beta, linear above; 0: the L1 loss
};

struct HuberOptions {
  Reduction reduction = kMean;
  double delta = 1.0;  // quadratic below |d| = delta, linear above
};

// GELU's two forms, as PyTorch's approximate='none' | 'tanh' (tensor/transformer_options.h).
using mt::GeluApproximate;

struct DropoutFuncOptions {
  double p = 0.5;                  // probability of zeroing an element, in [0, 1]
  bool training = true;            // false: the identity
  Generator* generator = nullptr;  // null: mt::default_generator()
};

}  // namespace mt::nn

namespace mt::nn::detail {
// mse_loss with mean or sum reduction as one autograd node (nn/functional.cpp).
Tensor fused_mse(const Tensor& input, const Tensor& target, bool mean);
// The per-sample cross-entropy ℓᵢ = log Σ_c e^{x_ic} − x_i,tᵢ of (N, C) logits and (N) int64 classes
// in [0, C), as one node (nn/cross_entropy.cpp, Note [Cross-entropy in row blocks]). (N), in float32
// for 16-bit logits, else in theirs. Arguments already checked.
Tensor cross_entropy_rows(const Tensor& logits, const Tensor& target);
}  // namespace mt::nn::detail

namespace mt::nn::functional {

// ---- layers and activations -----------------------------------------------------------------------

// y = x·wᵀ + b, fused (the GEMM accumulates onto the broadcast bias).  x: (..., in)  w: (out, in)  b: (out)
inline Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor()) { return mt::linear(x, w, b); }
inline Tensor relu(const Tensor& x) { return mt::relu(x); }        // max(x, 0)
inline Tensor tanh(const Tensor& x) { return mt::tanh(x); }
inline Tensor sigmoid(const Tensor& x) { return mt::sigmoid(x); }  // 1 / (1 + e⁻ˣ)
inline Tensor softmax(const Tensor& x, int64_t dim) { return mt::softmax(x, dim); }
inline Tensor log_softmax(const Tensor& x, int64_t dim) { return mt::log_softmax(x, dim); }

// None: GELU(x) = x·Φ(x) = 0.5·x·(1 + erf(x/√2))                       (exact; PyTorch's default)
// Tanh: GELU(x) ≈ 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))         (Hendrycks & Gimpel's approximation)
Tensor gelu(const Tensor& x, GeluApproximate approximate = GeluApproximate::None);

// SiLU (swish): x·σ(x)
Tensor silu(const Tensor& x);
// x for x > 0, negative_slope·x otherwise
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
// x for x > 0, α·(eˣ - 1) otherwise
Tensor elu(const Tensor& x, double alpha = 1.0);
// log(1 + e^(β·x))/β, and x itself where β·x > threshold (PyTorch's linear region)
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
// x·tanh(softplus(x))
Tensor mish(const Tensor& x);
// x·relu6(x + 3)/6: 0 below -3, x above 3
Tensor hardswish(const Tensor& x);

// Inverted dropout: while training, each element is zeroed with probability p and the survivors
// are scaled by 1/(1-p), so the expected value is unchanged and evaluation needs no rescaling.
// Identity when !training or p = 0 (the input itself is returned); zeros when p = 1.
Tensor dropout(const Tensor& x, DropoutFuncOptions options = {});

// ---- losses -----------------------------------------------------------------------------------------

// Mean squared error: ℓᵢ = (inputᵢ - targetᵢ)², then reduced. input and target: the same shape.
Tensor mse_loss(const Tensor& input, const Tensor& target, LossOptions options = {});

// Negative log-likelihood of class indices:  ℓᵢ = -w[tᵢ]·log_probs[i, tᵢ], then reduced; 'mean'
// divides by Σᵢ w[tᵢ], and samples whose target is ignore_index count for nothing in either sum.
// log_probs: (N, C), e.g. from log_softmax(logits, 1)   target: (N) int64 in [0, C), or ignore_index
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, NLLLossOptions options = {});

// Cross-entropy of logits against class indices: nll_loss(log_softmax(logits, 1), target).
//   ℓᵢ = -logits[i, tᵢ] + log Σ_c exp(logits[i, c])
// log_softmax subtracts each row's max before exponentiating, so large logits do not overflow; its
// backward gives the familiar d(mean ℓ)/dlogits = (softmax(logits) - onehot(target)) / N.
// Weights and ignore_index as in nll_loss. With label smoothing ε each sample's target becomes
// (1 - ε)·onehot(tᵢ) + ε/C, so   ℓᵢ = (1 - ε)·nllᵢ + ε/C·Σ_c -w[c]·log_softmax(logits)[i, c],
// and 'mean' divides both parts by Σᵢ w[tᵢ] over the samples not ignored (PyTorch 1.13).
// logits: (N, C)   target: (N) int64 in [0, C), or ignore_index
Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions options = {});

// Binary cross-entropy of probabilities:  ℓ = -w·(t·log x + (1 - t)·log(1 - x)), each log clamped
// to >= -100 as PyTorch does, so x = 0 or 1 gives a large finite loss. input, target: the same shape.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, BCEOptions options = {});

// The same of logits x, without forming σ(x):  ℓ = w·((1 - t)·x + (1 + (p - 1)·t)·log(1 + e⁻ˣ)), p the
// pos_weight (1 when undefined); log(1 + e⁻ˣ) is taken in its stable form (Note [Stable log(1 + e^-x)]).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, BCEWithLogitsOptions options = {});

// Kullback-Leibler divergence of target from input, with input as log-probabilities:
//   ℓ = t·(log t - input)   (0 where t = 0),   or with log_target: ℓ = eᵗ·(t - input).
Tensor kl_div(const Tensor& input, const Tensor& target, KLDivOptions options = {});

// With d = input - target:  ℓ = 0.5·d²/β where |d| < β, else |d| - 0.5·β.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, SmoothL1Options options = {});
// With d = input - target:  ℓ = 0.5·d² where |d| < δ, else δ·(|d| - 0.5·δ)  (smooth_l1 scaled by δ).
Tensor huber_loss(const Tensor& input, const Tensor& target, HuberOptions options = {});

}  // namespace mt::nn::functional

namespace mt::nn {
namespace F = functional;
}  // namespace mt::nn
