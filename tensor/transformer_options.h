// The options of the transformer kernels (GELU's form, attention's mask and scale), shared by the
// Backend interface (tensor/backend.h), the raw ops and the differentiable ops (autograd/ops.h).
// Only plain types here, so autograd/ops.h can name them without the Backend interface.
#pragma once

#include <cstdint>
#include <optional>

namespace mt {

// GELU's two forms, as PyTorch's approximate='none' | 'tanh'.
enum class GeluApproximate : uint8_t { None, Tanh };

// scaled_dot_product_attention's options, as the user gives them.
struct AttentionOptions {
  bool causal = false;          // query i sees keys j <= i only (top-left aligned, like torch's is_causal)
  std::optional<double> scale = std::nullopt;  // unset: 1/√d, d = the head size
};

// What the kernels get: the scale resolved.
struct AttentionParams {
  bool causal = false;
  double scale = 1.0;
};

}  // namespace mt
