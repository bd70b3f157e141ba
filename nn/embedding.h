// Embedding: a lookup table of num_embeddings rows of embedding_dim values, like torch.nn.Embedding.
//   indices: (...) int64 in [0, num_embeddings)  weight: (num_embeddings, embedding_dim)  out: (..., embedding_dim)
// forward is mt::embedding (index_select): its backward adds each output row's gradient back to its
// index's row, so a token that occurs several times in a batch gets the sum of its gradients.
//
// Not here: padding_idx, max_norm, sparse gradients.
#pragma once

#include "nn/module.h"

namespace mt::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);

  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;
  // weight ~ N(0, 1), PyTorch's default, from mt::default_generator().
  void reset_parameters();

  const int64_t num_embeddings, embedding_dim;
  Tensor weight;  // (num_embeddings, embedding_dim)
};

}  // namespace mt::nn
