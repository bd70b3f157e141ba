// Conv1d and Conv2d: parameters, PyTorch's initialisation, the input checks, the padding ("same",
// "valid", padding modes) and the forward; and their functional forms.
#include "nn/conv.h"

#include <cmath>
#include <sstream>

#include "autograd/ops.h"
#include "nn/init.h"

namespace mt::nn {

namespace {

// The padding before and after the input in each spatial dim (h, w).
struct SidePadding {
  Size2 left, right;
};

// "same": dilation·(k - 1) in all, left = total/2 and the rest on the right (PyTorch's split), stride 1.
SidePadding side_padding(const ConvPadding& p, Size2 kernel, Size2 stride, Size2 dilation, const char* op) {
  switch (p.kind) {
    case ConvPadding::Kind::Valid: return {0, 0};
    case ConvPadding::Kind::Same: {
      MT_CHECK(stride == Size2(1), op, ": padding=\"same\" needs stride 1, got stride ", stride);
      const Size2 total{dilation.h * (kernel.h - 1), dilation.w * (kernel.w - 1)};
      const Size2 left{total.h / 2, total.w / 2};
      return {left, {total.h - left.h, total.w - left.w}};
    }
    default:
      MT_CHECK(p.size.h >= 0 && p.size.w >= 0, op, ": padding must be non-negative, got ", p.size);
      return {p.size, p.size};
  }
}

PadMode pad_mode(PaddingMode m) {
  switch (m) {
    case PaddingMode::Reflect: return PadMode::Reflect;
    case PaddingMode::Replicate: return PadMode::Replicate;
    case PaddingMode::Circular: return PadMode::Circular;
    default: return PadMode::Constant;
  }
}

// The input padded as the convolution needs it, and the (symmetric) padding conv2d itself then adds.
// zeros: conv2d pads `left` on each side, and an uneven "same" gets its extra right column from pad
// first, as PyTorch's _convolution_same; another mode: pad does all of it, conv2d none, as nn.Conv2d.
// One spatial dim (Conv1d): only the w entries count, and pad gets one pair.
struct Padded {
  Tensor x;
  Size2 conv_padding;
};
Padded apply_padding(const Tensor& x, const SidePadding& s, PaddingMode mode, bool one_dim) {
  const auto pads = [&](Size2 l, Size2 r) {
    return one_dim ? std::vector<int64_t>{l.w, r.w} : std::vector<int64_t>{l.w, r.w, l.h, r.h};
  };
  if (mode != PaddingMode::Zeros) {
    if (s.left == Size2(0) && s.right == Size2(0)) return {x, 0};
    return {pad(x, pads(s.left, s.right), {.mode = pad_mode(mode)}), 0};
  }
  if (s.left == s.right) return {x, s.left};
  return {pad(x, pads(0, {s.right.h - s.left.h, s.right.w - s.left.w})), s.left};
}

std::string padding_repr(const ConvPadding& p, bool one_dim) {
  std::ostringstream os;
  if (p.kind == ConvPadding::Kind::Same) os << "padding=same";
  else if (p.kind == ConvPadding::Kind::Valid) os << "padding=valid";
  else if (p.size != Size2(0)) os << "padding=" << (one_dim ? Size2(p.size.w, p.size.w) : p.size);
  return os.str();
}

const char* mode_repr(PaddingMode m) {
  switch (m) {
    case PaddingMode::Reflect: return "reflect";
    case PaddingMode::Replicate: return "replicate";
    case PaddingMode::Circular: return "circular";
    default: return "zeros";
  }
}

}  // namespace

namespace detail {

void check_conv_channels(const char* layer, int64_t in_channels, int64_t out_channels, int64_t groups) {
  MT_CHECK(in_channels > 0 && out_channels > 0, layer, ": in_channels (", in_channels, ") and out_channels (",
           out_channels, ") must be positive");
  MT_CHECK(groups > 0 && in_channels % groups == 0 && out_channels % groups == 0, layer, ": groups = ", groups,
           " must divide in_channels (", in_channels, ") and out_channels (", out_channels, ")");
}

// kaiming_uniform_(a = √5): gain = √(2 / (1 + 5)) = √(1/3), bound = gain·√(3 / fan_in) = 1/√fan_in, the
// same bound PyTorch then uses for the bias (its reset_parameters computes it from fan_in).
void reset_conv_parameters(const Tensor& weight, const Tensor& bias) {
  init::kaiming_uniform_(weight, {.a = std::sqrt(5.0)});
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::calculate_fans(weight).fan_in));
    init::uniform_(bias, -bound, bound);
  }
}

}  // namespace detail

// ---- Conv2d -----------------------------------------------------------------------------------

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dLayerOptions options)
    : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), options(options) {
  detail::check_conv_channels("Conv2d", in_channels, out_channels, options.groups);
  MT_CHECK(kernel_size.h > 0 && kernel_size.w > 0, "Conv2d: kernel_size must be positive, got ", kernel_size);
  side_padding(options.padding, kernel_size, options.stride, options.dilation, "Conv2d");  // checks it
  weight = register_parameter("weight", empty({out_channels, in_channels / options.groups, kernel_size.h, kernel_size.w}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void Conv2d::reset_parameters() { detail::reset_conv_parameters(weight, bias); }

Tensor Conv2d::forward(const Tensor& x) {
  MT_CHECK((x.dim() == 4 || x.dim() == 3) && x.size(x.dim() - 3) == in_channels, "Conv2d(", extra_repr(),
           "): expected input of shape (N, ", in_channels, ", H, W) or (", in_channels, ", H, W), got ", x.sizes());
  const SidePadding s = side_padding(options.padding, kernel_size, options.stride, options.dilation, "Conv2d");
  const Padded p = apply_padding(x, s, options.padding_mode, /*one_dim=*/false);
  return mt::conv2d(p.x, weight, bias,
                    {.stride = options.stride, .padding = p.conv_padding, .dilation = options.dilation,
                     .groups = options.groups});
}

std::string Conv2d::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=" << kernel_size << ", stride=" << options.stride;
  if (const std::string p = padding_repr(options.padding, false); !p.empty()) os << ", " << p;
  if (options.dilation != Size2(1)) os << ", dilation=" << options.dilation;
  if (options.groups != 1) os << ", groups=" << options.groups;
  if (!bias.defined()) os << ", bias=false";
  if (options.padding_mode != PaddingMode::Zeros) os << ", padding_mode=" << mode_repr(options.padding_mode);
  return os.str();
}

// ---- Conv1d -----------------------------------------------------------------------------------

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dLayerOptions options)
    : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), options(options) {
  detail::check_conv_channels("Conv1d", in_channels, out_channels, options.groups);
  MT_CHECK(kernel_size > 0, "Conv1d: kernel_size must be positive, got ", kernel_size);
  side_padding(options.padding, {1, kernel_size}, {1, options.stride}, {1, options.dilation}, "Conv1d");
  weight = register_parameter("weight", empty({out_channels, in_channels / options.groups, kernel_size}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void Conv1d::reset_parameters() { detail::reset_conv_parameters(weight, bias); }

Tensor Conv1d::forward(const Tensor& x) {
  MT_CHECK((x.dim() == 3 || x.dim() == 2) && x.size(x.dim() - 2) == in_channels, "Conv1d(", extra_repr(),
           "): expected input of shape (N, ", in_channels, ", L) or (", in_channels, ", L), got ", x.sizes());
  const SidePadding s =
      side_padding(options.padding, {1, kernel_size}, {1, options.stride}, {1, options.dilation}, "Conv1d");
  const Padded p = apply_padding(x, s, options.padding_mode, /*one_dim=*/true);
  return mt::conv1d(p.x, weight, bias,
                    {.stride = options.stride, .padding = p.conv_padding.w, .dilation = options.dilation,
                     .groups = options.groups});
}

std::string Conv1d::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=" << kernel_size << ", stride=" << options.stride;
  if (options.padding.kind != ConvPadding::Kind::Explicit) os << ", " << padding_repr(options.padding, true);
  else if (options.padding.size.w != 0) os << ", padding=" << options.padding.size.w;
  if (options.dilation != 1) os << ", dilation=" << options.dilation;
  if (options.groups != 1) os << ", groups=" << options.groups;
  if (!bias.defined()) os << ", bias=false";
  if (options.padding_mode != PaddingMode::Zeros) os << ", padding_mode=" << mode_repr(options.padding_mode);
  return os.str();
}

}  // namespace mt::nn

namespace mt::nn::functional {

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dFuncOptions& o) {
  MT_CHECK(w.dim() == 4, "conv2d: weight must be (O, C/groups, kh, kw), got ", w.sizes());
  const SidePadding s = side_padding(o.padding, {w.size(2), w.size(3)}, o.stride, o.dilation, "conv2d");
  const Padded p = apply_padding(x, s, PaddingMode::Zeros, /*one_dim=*/false);
  return mt::conv2d(p.x, w, b,
                    {.stride = o.stride, .padding = p.conv_padding, .dilation = o.dilation, .groups = o.groups});
}

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv1dFuncOptions& o) {
  MT_CHECK(w.dim() == 3, "conv1d: weight must be (O, C/groups, k), got ", w.sizes());
  const SidePadding s = side_padding(o.padding, {1, w.size(2)}, {1, o.stride}, {1, o.dilation}, "conv1d");
  const Padded p = apply_padding(x, s, PaddingMode::Zeros, /*one_dim=*/true);
  return mt::conv1d(p.x, w, b,
                    {.stride = o.stride, .padding = p.conv_padding.w, .dilation = o.dilation, .groups = o.groups});
}

}  // namespace mt::nn::functional
