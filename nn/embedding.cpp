// Embedding: the table, PyTorch's N(0, 1) initialisation, and the lookup.
#include "nn/embedding.h"

#include "autograd/ops.h"
#include "nn/init.h"

namespace mt::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim)
    : num_embeddings(num_embeddings), embedding_dim(embedding_dim) {
  MT_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding: num_embeddings (", num_embeddings,
           ") and embedding_dim (", embedding_dim, ") must be positive");
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  reset_parameters();
}

void Embedding::reset_parameters() { init::normal_(weight, 0.0, 1.0); }

Tensor Embedding::forward(const Tensor& indices) {
  MT_CHECK(indices.dtype() == kInt64, "Embedding(", num_embeddings, ", ", embedding_dim,
           "): indices must be int64, got ", indices.dtype());
  return mt::embedding(weight, indices);
}

std::string Embedding::extra_repr() const {
  return std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
}

}  // namespace mt::nn
