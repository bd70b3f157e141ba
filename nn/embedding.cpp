// Embedding: the table, PyTorch's N(0, 1) initialisation, and the lookup.
#include "nn/embedding.h"

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "nn/init.h"
#include "tensor/raw_ops.h"

namespace mt::nn {

namespace {

// padding_idx in [-num, num) -> [0, num), as PyTorch resolves it.
std::optional<int64_t> resolve_padding_idx(std::optional<int64_t> padding_idx, int64_t num) {
  if (!padding_idx) return std::nullopt;
  MT_CHECK(*padding_idx >= -num && *padding_idx < num, "embedding: padding_idx ", *padding_idx,
           " must be in [", -num, ", ", num, ") for ", num, " embeddings");
  return *padding_idx < 0 ? *padding_idx + num : *padding_idx;
}

// Note [Padding row]: the lookup reads the weight through an alias whose node zeroes row
// padding_idx of the gradient on its way back, so that row receives nothing however often it is
// looked up, and the others exactly what index_select's backward gives them. The zeroing is in
// place: the gradient arriving there is the (num, dim) tensor index_select's backward (index_add
// into zeros) has just made for this node alone, so it costs dim writes. Masking the output
// instead (a where against a detached copy) costs two passes over the (..., dim) output, which
// measured 4-5 times the lookup itself.
struct PaddingRowBackward final : Node {
  int64_t row = 0;
  // y = w  =>  dw = dy with dy[row, :] = 0
  TensorList apply(TensorList&& g) override {
    Tensor d = std::move(g[0]);
    if (d.defined()) raw::fill_(raw::narrow(d, 0, row, 1), 0.0);
    return {d};
  }
  std::string name() const override { return "EmbeddingPaddingBackward"; }
};

}  // namespace

namespace functional {

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  MT_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (num_embeddings, dim), got ", weight.sizes());
  const std::optional<int64_t> p = resolve_padding_idx(padding_idx, weight.size(0));
  if (!p) return mt::embedding(weight, indices);
  Tensor table = raw::view(weight, weight.sizes());  // the same storage, its own history
  if (auto node = mt::detail::record<PaddingRowBackward>({&weight})) {
    node->row = *p;
    mt::detail::set_history(table, node);
  }
  return mt::embedding(table, indices);
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
