// TransformerBlock and GPT: a decoder-only transformer language model (Radford et al., 2019, GPT-2),
// built from Embedding, LayerNorm, MultiheadAttention, Linear and GELU.
//
// TransformerBlock, pre-LayerNorm (each sub-layer normalises its input; the residual stream is not
// normalised, which trains stably without warm-up tricks):
//   x = x + attn(ln1(x))                         attn: causal MultiheadAttention
//   x = x + fc2(gelu(fc1(ln2(x))))               fc1: dim -> 4·dim, fc2: 4·dim -> dim
// GPT:
//   h = tok_emb(idx) + pos_emb(0..T-1)           idx: (B, T) int64 in [0, vocab)   h: (B, T, dim)
//   h = blocks(h); h = ln_f(h)
//   logits = h·tok_emb.weightᵀ                   (B, T, vocab)
// Note [Tied embedding]: the output head has no weight of its own: it is the token embedding's
// matrix, used a second time (Press & Wolf, 2017). One parameter, two uses: autograd sums both
// contributions into its one .grad before its post-accumulate-grad hook runs, once (the engine runs
// a leaf's AccumulateGrad after all its incoming gradients are summed), so DDP reduces it once.
// The state dict has it once, as "tok_emb.weight".
//
// Initialisation (GPT-2's): Linear and Embedding weights ~ N(0, 0.02), biases 0, LayerNorms 1 and 0,
// and the projections that write into the residual stream (attn.proj, fc2) ~ N(0, 0.02/√(2·layers)),
// so the stream's variance does not grow with depth.
//
// Not here: dropout, key/value caching for generation, sampling (apps/).
#pragma once

#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/sequential.h"

namespace mt::nn {

class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t dim, int64_t heads);

  // x: (B, T, dim) -> (B, T, dim)
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<MultiheadAttention> attn;
  std::shared_ptr<Linear> fc1, fc2;
};

struct GPTOptions {
  int64_t vocab = 256;   // byte-level text
  int64_t context = 64;  // longest sequence (positions)
  int64_t dim = 128;
  int64_t layers = 4;
  int64_t heads = 4;
};

class GPT : public Module {
 public:
  explicit GPT(GPTOptions options = {});

  // idx: (B, T) int64, T <= context  ->  logits (B, T, vocab)
  Tensor forward(const Tensor& idx) override;
  std::string extra_repr() const override;
  // GPT-2's initialisation (see the header comment), from mt::default_generator().
  void reset_parameters();

  const GPTOptions options;
  std::shared_ptr<Embedding> tok_emb, pos_emb;
  std::shared_ptr<Sequential> blocks;
  std::shared_ptr<LayerNorm> ln_f;
};

}  // namespace mt::nn
