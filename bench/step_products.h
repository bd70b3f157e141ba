// The matrix products of the two training steps bench/steps.sh measures, and the flops a step is
// credited with: the one place both are counted. bench_gemm_floor times OpenBLAS on exactly these
// products and prints each step's flops; steps.sh divides those flops by every framework's step time.
//
// A step's flops are its products' 2·m·n·k, forward and backward; nothing else is counted (LayerNorm,
// GELU, softmax, BatchNorm, pooling, the optimizer: a few percent of the arithmetic, and memory-bound).
// Each product is counted at the shape a dense implementation computes: the causal attention's
// q·kᵀ and p·v over all T×T scores, masked half included, as the torch sides compute them.
#pragma once

#include <cstdint>
#include <vector>

namespace bench {

// C (m×n) = op(A) (m×k) · op(B) (k×n), as cblas_sgemm takes it (row-major; op transposes when
// trans_* is set), `count` times per step.
struct Product {
  const char* what;
  bool trans_a, trans_b;
  int64_t m, n, k, count;
};

inline double flops(const Product& p) {
  return 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k) *
         static_cast<double>(p.count);
}

inline double total_flops(const std::vector<Product>& products) {
  double sum = 0;
  for (const Product& p : products) sum += flops(p);
  return sum;
}

// The three products of a Linear y = x·Wᵀ over `rows` rows, `count` such layers per step:
//   x: (rows, in)  W: (out, in)  y: (rows, out)   =>   y = x·Wᵀ,  dx = dy·W,  dW = dyᵀ·x
// `input_grad` false for a first layer whose input needs no gradient.
inline void add_linear(std::vector<Product>& out, const char* what, int64_t rows, int64_t in, int64_t features,
                       int64_t count, bool input_grad = true) {
  out.push_back({what, false, true, rows, features, in, count});  // y = x·Wᵀ
  if (input_grad) out.push_back({what, false, false, rows, in, features, count});  // dx = dy·W
  out.push_back({what, true, false, features, in, rows, count});  // dW = dyᵀ·x
}

// The GPT preset (nn::GPTOptions' defaults: vocab 256, context 64, dim 128, 4 layers, 4 heads) at
// batch 32, as bench_gpt.cpp steps it: every Linear runs over the B·T = 2048 rows; the tied head is
// one more Linear (dim -> vocab) whose weight is the token embedding's. Attention, per sample, head
// and layer, with q, k, v, o: (T, d), d = dim / heads, and p: (T, T):
//   s = q·kᵀ, o = p·v   =>   dp = do·vᵀ, dv = pᵀ·do, dq = ds·k, dk = dsᵀ·q
inline std::vector<Product> gpt_step_products() {
  constexpr int64_t kBatch = 32, kT = 64, kDim = 128, kLayers = 4, kHeads = 4, kVocab = 256;
  constexpr int64_t kRows = kBatch * kT, kHeadDim = kDim / kHeads, kPerHead = kBatch * kHeads * kLayers;
  std::vector<Product> p;
  add_linear(p, "qkv", kRows, kDim, 3 * kDim, kLayers);
  p.push_back({"q·kᵀ", false, true, kT, kT, kHeadDim, kPerHead});
  p.push_back({"p·v", false, false, kT, kHeadDim, kT, kPerHead});
  p.push_back({"do·vᵀ", false, true, kT, kT, kHeadDim, kPerHead});
  p.push_back({"pᵀ·do", true, false, kT, kHeadDim, kT, kPerHead});
  p.push_back({"ds·k", false, false, kT, kHeadDim, kT, kPerHead});
  p.push_back({"dsᵀ·q", true, false, kT, kHeadDim, kT, kPerHead});
  add_linear(p, "proj", kRows, kDim, kDim, kLayers);
  add_linear(p, "fc1", kRows, kDim, 4 * kDim, kLayers);
  add_linear(p, "fc2", kRows, 4 * kDim, kDim, kLayers);
  add_linear(p, "head", kRows, kDim, kVocab, 1);
  return p;
}

// bench_conv.cpp's CNN (issue 12's Fashion-MNIST model) at batch 64, a convolution as the GEMMs of
// im2col, one sample at a time (the flops of a direct convolution, 2·O·C·9·H·W per sample):
//   cols: (C·9, H·W)  w: (O, C·9)  y: (O, H·W)   =>   y = w·cols,  dw = dy·colsᵀ,  dcols = wᵀ·dy
// The first convolution's input needs no gradient, so it has no dcols.
inline std::vector<Product> cnn_step_products() {
  constexpr int64_t kBatch = 64;
  std::vector<Product> p;
  const auto conv = [&](const char* what, int64_t in, int64_t outc, int64_t hw, bool input_grad) {
    p.push_back({what, false, false, outc, hw, in * 9, kBatch});     // y = w·cols
    p.push_back({what, false, true, outc, in * 9, hw, kBatch});      // dw = dy·colsᵀ
    if (input_grad) p.push_back({what, true, false, in * 9, hw, outc, kBatch});  // dcols = wᵀ·dy
  };
  conv("conv1", 1, 32, 28 * 28, false);
  conv("conv2", 32, 64, 14 * 14, true);
  add_linear(p, "fc1", kBatch, 3136, 128, 1);
  add_linear(p, "fc2", kBatch, 128, 10, 1);
  return p;
}

}  // namespace bench
