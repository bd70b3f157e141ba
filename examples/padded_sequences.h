// The model of examples/padded_sequences.cpp, in a header of its own so that a test can build the
// very same model: tests/nn/test_torch_examples.cpp trains it beside PyTorch's (from
// tests/nn/make_example_fixtures.py) and compares the losses and weights.
#pragma once

#include "minitrain.h"

namespace padded_sequences {

using mt::Tensor;

constexpr int64_t kPad = 0, kTokens = 4, kMaxLen = 16, kClasses = 3, kDim = 32, kHeads = 4;

// tokens (B, T) -> embedding (B, T, D) -> + masked self-attention -> mean over real positions (B, D)
// -> Linear -> logits (B, 3)
struct Classifier : mt::nn::Module {
  Classifier() {
    embed = register_module("embed", std::make_shared<mt::nn::Embedding>(kTokens, kDim, mt::nn::EmbeddingOptions{.padding_idx = kPad}));
    attn = register_module("attn", std::make_shared<mt::nn::MultiheadAttention>(kDim, kHeads));
    head = register_module("head", std::make_shared<mt::nn::Linear>(kDim, kClasses));
  }
  Tensor forward(const Tensor& tokens) override { return forward(tokens, mt::eq(tokens, mt::zeros_like(tokens))); }
  Tensor forward(const Tensor& tokens, const Tensor& padding) {
    const Tensor e = embed->forward(tokens);
    const Tensor h = e + attn->forward(e, {.key_padding_mask = padding});
    const Tensor real = (1.0 - padding.to(e.dtype())).unsqueeze(2);  // (B, T, 1): 1 at real positions
    return head->forward((h * real).sum({1}) / real.sum({1}));
  }
  std::shared_ptr<mt::nn::Embedding> embed;
  std::shared_ptr<mt::nn::MultiheadAttention> attn;
  std::shared_ptr<mt::nn::Linear> head;
};

}  // namespace padded_sequences
