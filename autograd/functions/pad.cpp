// pad, as F.pad: one dim at a time, composed from differentiable ops, so its backward is theirs.
//   Constant            narrow (a negative pad crops), then cat with blocks of `value`;
//                       the gradient is the middle block's (cat's backward).
//   Reflect, Replicate, index_select with the source index of every output position; the gradient
//   Circular            adds each output's back to its source (index_select's backward, index_add), so
//                       an edge element that several padded positions copy gets all their gradients.
#include <string>

#include "autograd/ops.h"
#include "autograd/spatial_ops.h"

namespace mt {

namespace {

const char* mode_name(PadMode mode) {
  switch (mode) {
    case PadMode::Constant: return "constant";
    case PadMode::Reflect: return "reflect";
    case PadMode::Replicate: return "replicate";
    case PadMode::Circular: return "circular";
  }
  return "?";
}

// Output position i in [-left, n + right) reads input position source(i) in [0, n).
int64_t source(PadMode mode, int64_t i, int64_t n) {
  switch (mode) {
    case PadMode::Reflect: return i < 0 ? -i : (i >= n ? 2 * (n - 1) - i : i);
    case PadMode::Replicate: return i < 0 ? 0 : (i >= n ? n - 1 : i);
    default: return ((i % n) + n) % n;  // Circular
  }
}

Tensor pad_constant(const Tensor& x, int d, int64_t left, int64_t right, double value) {
  Tensor y = x;
  const int64_t n = x.size(d);
  if (left < 0 || right < 0) {
    const int64_t start = left < 0 ? -left : 0, stop = right < 0 ? n + right : n;
    MT_CHECK(stop >= start, "pad: the negative pads (", left, ", ", right, ") crop more than dim ", d, "'s ", n,
             " elements of input ", x.sizes());
    y = narrow(y, d, start, stop - start);
  }
  std::vector<Tensor> parts;
  const auto block = [&](int64_t size) {
    Shape s = y.sizes();
    s[d] = size;
    return full(s, value, {.dtype = x.dtype(), .device = x.device()});
  };
  if (left > 0) parts.push_back(block(left));
  parts.push_back(y);
  if (right > 0) parts.push_back(block(right));
  return parts.size() == 1 ? y : cat(parts, d);
}

Tensor pad_indexed(const Tensor& x, int d, int64_t left, int64_t right, PadMode mode) {
  const int64_t n = x.size(d);
  const char* name = mode_name(mode);
  MT_CHECK(left >= 0 && right >= 0, "pad: ", name, " padding must be non-negative, got (", left, ", ", right,
           ") for dim ", d);
  MT_CHECK(n > 0, "pad: ", name, " padding needs a non-empty dim ", d, ", input ", x.sizes());
  if (mode == PadMode::Reflect)
    MT_CHECK(left < n && right < n, "pad: reflect padding (", left, ", ", right, ") must be less than dim ", d,
             "'s size ", n, " (input ", x.sizes(), ")");
  if (mode == PadMode::Circular)
    MT_CHECK(left <= n && right <= n, "pad: circular padding (", left, ", ", right, ") must be at most dim ", d,
             "'s size ", n, " (input ", x.sizes(), ")");
  std::vector<int64_t> index;
  for (int64_t i = -left; i < n + right; ++i) index.push_back(source(mode, i, n));
  const int64_t count = static_cast<int64_t>(index.size());
  return index_select(x, d, from_vector(index, {count}, {.dtype = kInt64, .device = x.device()}));
}

}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, PadOptions options) {
  const int64_t pairs = static_cast<int64_t>(pads.size()) / 2;
  MT_CHECK(pads.size() % 2 == 0 && pairs <= x.dim(), "pad: needs (left, right) pairs for at most the input's ",
           x.dim(), " dims, got ", pads.size(), " numbers");
  if (options.mode != PadMode::Constant) {
    MT_CHECK(pairs >= 1 && pairs <= 3 && (x.dim() == pairs + 1 || x.dim() == pairs + 2), "pad: ",
             mode_name(options.mode), " padding of the last ", pairs, " dims needs a ", pairs + 1, "-D or ",
             pairs + 2, "-D input (channels first, and a batch dim or not), got shape ", x.sizes());
  }
  Tensor y = x;
  for (int64_t k = 0; k < pairs; ++k) {
    const int d = static_cast<int>(x.dim() - 1 - k);
    const int64_t left = pads[2 * k], right = pads[2 * k + 1];
    if (left == 0 && right == 0) continue;
    y = options.mode == PadMode::Constant ? pad_constant(y, d, left, right, options.value)
                                          : pad_indexed(y, d, left, right, options.mode);
  }
  return y.is_same(x) ? clone(x) : y;  // a copy even when nothing is padded, as F.pad
}

}  // namespace mt
