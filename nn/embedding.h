// Embedding: a lookup table of num_embeddings rows of embedding_dim values, like torch.nn.Embedding.
//   indices: (...) int64 in [0, num_embeddings)  weight: (num_embeddings, embedding_dim)  out: (..., embedding_dim)
// forward is mt::embedding (index_select): its backward adds each output row's gradient back to its
// index's row, so a token that occurs several times in a batch gets the sum of its gradients.
//
// With padding_idx p (PyTorch's): row p starts as zeros and gets no gradient, so a padding token's
// embedding stays what it is while the model trains; lookups of p still read the row.
//
// Not here: max_norm, sparse gradients.
#pragma once

#include <optional>

#include "nn/module.h"

namespace mt::nn {

struct EmbeddingOptions {
  std::optional<int64_t> padding_idx = std::nullopt;  // in [-num_embeddings, num_embeddings); < 0 counts from the end
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options = {});

  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;
  // weight ~ N(0, 1), PyTorch's default, from mt::default_generator(); the padding row zeros.
  void reset_parameters();

  const int64_t num_embeddings, embedding_dim;
  const std::optional<int64_t> padding_idx;  // resolved to [0, num_embeddings)
  Tensor weight;  // (num_embeddings, embedding_dim)
};

}  // namespace mt::nn

namespace mt::nn::functional {

// As F.embedding(indices, weight, padding_idx): rows of weight, and no gradient to row padding_idx.
// indices: (...) int64  weight: (num, dim)  ->  (..., dim)
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);

}  // namespace mt::nn::functional
