// TransformerBlock and GPT: construction, GPT-2's initialisation, and the forward passes.
#include "nn/transformer.h"

#include <cmath>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "nn/init.h"

namespace mt::nn {

TransformerBlock::TransformerBlock(int64_t dim, int64_t heads) {
  ln1 = register_module("ln1", std::make_shared<LayerNorm>(dim));
  attn = register_module("attn", std::make_shared<MultiheadAttention>(dim, heads, MultiheadAttentionOptions{.causal = true}));
  ln2 = register_module("ln2", std::make_shared<LayerNorm>(dim));
  fc1 = register_module("fc1", std::make_shared<Linear>(dim, 4 * dim));
  fc2 = register_module("fc2", std::make_shared<Linear>(4 * dim, dim));
}

Tensor TransformerBlock::forward(const Tensor& x) {
  // Children are called, not forward()ed, so their hooks run (Note [Hooks run in operator()]).
  const Tensor h = x + (*attn)((*ln1)(x));
  return h + (*fc2)(mt::gelu((*fc1)((*ln2)(h))));
}

GPT::GPT(GPTOptions o) : options(o) {
  MT_CHECK(o.vocab > 0 && o.context > 0 && o.dim > 0 && o.layers > 0 && o.heads > 0,
           "GPT: vocab, context, dim, layers and heads must be positive, got ", o.vocab, ", ", o.context, ", ", o.dim,
           ", ", o.layers, ", ", o.heads);
  MT_CHECK(o.dim % o.heads == 0, "GPT: heads (", o.heads, ") must divide dim (", o.dim, ")");
  tok_emb = register_module("tok_emb", std::make_shared<Embedding>(o.vocab, o.dim));
  pos_emb = register_module("pos_emb", std::make_shared<Embedding>(o.context, o.dim));
  blocks = register_module("blocks", std::make_shared<Sequential>());
  for (int64_t l = 0; l < o.layers; ++l) blocks->push_back(std::make_shared<TransformerBlock>(o.dim, o.heads));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(o.dim));
  reset_parameters();
}

void GPT::reset_parameters() {
  constexpr double kStd = 0.02;
  const double residual_std = kStd / std::sqrt(2.0 * static_cast<double>(options.layers));
  init::normal_(tok_emb->weight, 0.0, kStd);
  init::normal_(pos_emb->weight, 0.0, kStd);
  for (const auto& child : blocks->children()) {
    auto& block = static_cast<TransformerBlock&>(*child);
    for (Linear* lin : {block.attn->qkv.get(), block.attn->proj.get(), block.fc1.get(), block.fc2.get()}) {
      const bool residual = lin == block.attn->proj.get() || lin == block.fc2.get();
      init::normal_(lin->weight, 0.0, residual ? residual_std : kStd);
      if (lin->bias.defined()) init::zeros_(lin->bias);
    }
  }
}

Tensor GPT::forward(const Tensor& idx) {
  MT_CHECK(idx.dim() == 2 && idx.dtype() == kInt64, "GPT: input must be (B, T) int64 token ids, got ", idx.sizes(),
           " ", idx.dtype());
  const int64_t T = idx.size(1);
  MT_CHECK(T >= 1 && T <= options.context, "GPT: sequence length ", T, " must be in [1, context = ", options.context,
           "]");
  const Tensor positions = arange(T, {.dtype = kInt64, .device = idx.device()});  // (T)
  Tensor h = (*tok_emb)(idx) + (*pos_emb)(positions);  // (B, T, dim) + (T, dim)
  h = (*ln_f)((*blocks)(h));
  // Note [Cast before the head]: under autocast the head reads ln_f's float32 output only through
  // its 16-bit cast, and the head's GEMM runs when every activation of the step is saved: the
  // step's peak. Cast here, in a statement of its own, and the float32 output (a residual stream's
  // worth) is freed before that GEMM, instead of living as h to the end of forward. Outside
  // autocast the cast is the identity; the values are the same either way (linear would cast them).
  h = autocast::to_lower(h);
  return mt::linear(h, tok_emb->weight);  // Note [Tied embedding]
}

std::string GPT::extra_repr() const {
  return "vocab=" + std::to_string(options.vocab) + ", context=" + std::to_string(options.context) +
         ", dim=" + std::to_string(options.dim) + ", layers=" + std::to_string(options.layers) +
         ", heads=" + std::to_string(options.heads);
}

}  // namespace mt::nn
