// Embedding: the table, PyTorch's N(0, 1) initialisation, and the lookup.
#include "nn/embedding.h"

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "nn/init.h"

namespace mt::nn {

namespace {

// padding_idx in [-num, num) -> [0, num), as PyTorch resolves it.
std::optional<int64_t> resolve_padding_idx(std::optional<int64_t> padding_idx, int64_t num) {
  if (!padding_idx) return std::nullopt;
  MT_CHECK(*padding_idx >= -num && *padding_idx < num, "embedding: padding_idx ", *padding_idx,
           " must be in [", -num, ", ", num, ") for ", num, " embeddings");
  return *padding_idx < 0 ? *padding_idx + num : *padding_idx;
}

}  // namespace

namespace functional {

// Note [Padding row]: the padding positions' outputs are replaced by their own detached copies:
// where(keep, out, out.detach()) has out's values everywhere, and its backward sends the gradient of
// a padding position to the detached side, where it stops, so row padding_idx receives nothing,
// however often it is looked up.
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  MT_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (num_embeddings, dim), got ", weight.sizes());
  const Tensor out = mt::embedding(weight, indices);
  const std::optional<int64_t> p = resolve_padding_idx(padding_idx, weight.size(0));
  if (!p) return out;
  const Tensor pad = full(Shape{}, static_cast<double>(*p), {.dtype = kInt64, .device = indices.device()});
  return where(unsqueeze(ne(indices, pad), -1), out, out.detach());
}

}  // namespace functional

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options)
    : num_embeddings(num_embeddings), embedding_dim(embedding_dim),
      padding_idx(resolve_padding_idx(options.padding_idx, num_embeddings)) {
  MT_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding: num_embeddings (", num_embeddings,
           ") and embedding_dim (", embedding_dim, ") must be positive");
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  reset_parameters();
}

void Embedding::reset_parameters() {
  init::normal_(weight, 0.0, 1.0);
  if (padding_idx) {
    NoGradGuard no_grad;
    Tensor row = weight.narrow(0, *padding_idx, 1);
    row.zero_();
  }
}

Tensor Embedding::forward(const Tensor& indices) {
  MT_CHECK(indices.dtype() == kInt64, "Embedding(", num_embeddings, ", ", embedding_dim,
           "): indices must be int64, got ", indices.dtype());
  return functional::embedding(indices, weight, padding_idx);
}

std::string Embedding::extra_repr() const {
  return std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim) +
         (padding_idx ? ", padding_idx=" + std::to_string(*padding_idx) : "");
}

}  // namespace mt::nn
