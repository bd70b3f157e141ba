// Raw views: new TensorImpls over the same Storage with other sizes/strides/offset. Nothing here
// copies data except reshape/contiguous when the strides leave no choice.
#include <algorithm>
#include <numeric>

#include "tensor/raw_ops.h"
#include "tensor/small_blocks.h"

namespace mt::raw {

Tensor as_strided(const Tensor& t, const Shape& sizes, const Shape& strides, int64_t offset) {
  auto impl = detail::make_small<TensorImpl>();
  impl->storage = t.storage();
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MT_CHECK(infer < 0, op, ": only one dimension can be -1, got ", shape);
      infer = i;
    } else {
      MT_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", shape);
      known *= out[i];
    }
  }
  if (infer >= 0) {
    MT_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape, " is invalid for ", numel, " elements");
    out[infer] = numel / known;
  }
  MT_CHECK(out.numel() == numel, op, ": shape ", shape, " is invalid for ", numel, " elements");
  return out;
}

namespace {
// Strides that let `old` data be read with shape `want` without copying, or false.
// Old dims are grouped into runs that are contiguous with each other; each run of the new shape
// must fall inside one such run (the classic view-compatibility rule).
bool view_strides(const Shape& old_sizes, const Shape& old_strides, const Shape& want, Shape& out) {
  out.resize(want.size());
  if (old_sizes.numel() == 0) {
    out = contiguous_strides(want);
    return true;
  }
  int view_d = want.size() - 1;
  int64_t tensor_numel = 1, view_numel = 1;
  int64_t chunk_base_stride = old_strides.empty() ? 1 : old_strides.back();
  for (int d = old_sizes.size() - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[d];
    // A run ends where the next-outer dim is not laid out right after this one.
    const bool run_ends = d == 0 || (old_sizes[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride);
    if (run_ends) {
      while (view_d >= 0 && (view_numel < tensor_numel || want[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= want[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}
}  // namespace

Tensor view(const Tensor& t, const Shape& shape) {
  const Shape want = infer_shape(shape, t.numel(), "view");
  if (t.is_contiguous()) return as_strided(t, want, contiguous_strides(want), t.storage_offset());
  Shape strides;
  MT_CHECK(view_strides(t.sizes(), t.strides(), want, strides), "view: shape ", want,
           " is not compatible with the input's sizes ", t.sizes(), " and strides ", t.strides(),
           "; use reshape, which copies when it must");
  return as_strided(t, want, strides, t.storage_offset());
}

Tensor reshape(const Tensor& t, const Shape& shape) {
  const Shape want = infer_shape(shape, t.numel(), "reshape");
  if (t.is_contiguous()) return as_strided(t, want, contiguous_strides(want), t.storage_offset());
  Shape strides;
  if (view_strides(t.sizes(), t.strides(), want, strides)) return as_strided(t, want, strides, t.storage_offset());
  return view(clone(t), want);
}

Tensor transpose(const Tensor& t, int64_t d0, int64_t d1) {
  const int a = wrap_dim(d0, t.dim(), "transpose"), b = wrap_dim(d1, t.dim(), "transpose");
  if (t.dim() == 0) return t;
  Shape sizes = t.sizes(), strides = t.strides();
  std::swap(sizes[a], sizes[b]);
  std::swap(strides[a], strides[b]);
  return as_strided(t, sizes, strides, t.storage_offset());
}

Tensor permute(const Tensor& t, const Shape& order) {
  MT_CHECK(order.size() == t.dim(), "permute: order ", order, " has ", order.size(),
           " entries for a tensor of ", t.dim(), " dims");
  Shape sizes, strides;
  bool seen[kMaxDims] = {};
  for (int i = 0; i < order.size(); ++i) {
    const int d = wrap_dim(order[i], t.dim(), "permute");
    MT_CHECK(!seen[d], "permute: dim ", d, " appears twice in ", order);
    seen[d] = true;
    sizes.push_back(t.sizes()[d]);
    strides.push_back(t.strides()[d]);
  }
  return as_strided(t, sizes, strides, t.storage_offset());
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  MT_CHECK(t.dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  const int d = wrap_dim(dim, t.dim(), "narrow");
  const int64_t n = t.sizes()[d];
  if (start < 0) start += n;
  MT_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: start ", start, " length ", length,
           " is out of range for dim ", d, " of size ", n, " (shape ", t.sizes(), ")");
  Shape sizes = t.sizes();
  sizes[d] = length;
  return as_strided(t, sizes, t.strides(), t.storage_offset() + start * t.strides()[d]);
}

Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  MT_CHECK(t.dim() > 0, "slice: cannot slice a 0-dim tensor");
  MT_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int d = wrap_dim(dim, t.dim(), "slice");
  const int64_t n = t.sizes()[d];
  // Python's rules: negative counts from the end, out-of-range clamps.
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sizes = t.sizes(), strides = t.strides();
  sizes[d] = (end - start + step - 1) / step;
  strides[d] *= step;
  return as_strided(t, sizes, strides, t.storage_offset() + start * t.strides()[d]);
}

Tensor expand(const Tensor& t, const Shape& shape) {
  MT_CHECK(shape.size() >= t.dim(), "expand: target shape ", shape, " has fewer dims than the input ", t.sizes());
  const int lead = shape.size() - t.dim();
  Shape sizes;
  sizes.resize(shape.size());
  for (int i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      MT_CHECK(shape[i] >= 0, "expand: new leading dim ", i, " cannot be ", shape[i]);
      sizes[i] = shape[i];
      continue;
    }
    const int64_t have = t.sizes()[i - lead];
    const int64_t want = shape[i] == -1 ? have : shape[i];
    MT_CHECK(have == want || have == 1, "expand: cannot expand ", t.sizes(), " to ", shape, " (dim ", i,
             " has size ", have, ", not 1)");
    sizes[i] = want;
  }
  return as_strided(t, sizes, broadcast_strides(t.sizes(), t.strides(), sizes), t.storage_offset());
}

Tensor squeeze(const Tensor& t) {
  Shape sizes, strides;
  for (int i = 0; i < t.dim(); ++i) {
    if (t.sizes()[i] == 1) continue;
    sizes.push_back(t.sizes()[i]);
    strides.push_back(t.strides()[i]);
  }
  return as_strided(t, sizes, strides, t.storage_offset());
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  if (t.dim() == 0) return t;
  const int d = wrap_dim(dim, t.dim(), "squeeze");
  if (t.sizes()[d] != 1) return t;  // PyTorch: squeezing a dim that is not 1 leaves it
  Shape sizes = t.sizes(), strides = t.strides();
  sizes.erase(d);
  strides.erase(d);
  return as_strided(t, sizes, strides, t.storage_offset());
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  const int d = wrap_dim(dim, t.dim() + 1, "unsqueeze");
  Shape sizes = t.sizes(), strides = t.strides();
  const int64_t stride = d < t.dim() ? t.sizes()[d] * t.strides()[d] : 1;
  sizes.insert(d, 1);
  strides.insert(d, stride);
  return as_strided(t, sizes, strides, t.storage_offset());
}

Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim) {
  if (t.dim() == 0) return reshape(t, Shape{1});
  const int s = wrap_dim(start_dim, t.dim(), "flatten"), e = wrap_dim(end_dim, t.dim(), "flatten");
  MT_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape shape;
  for (int i = 0; i < s; ++i) shape.push_back(t.sizes()[i]);
  int64_t merged = 1;
  for (int i = s; i <= e; ++i) merged *= t.sizes()[i];
  shape.push_back(merged);
  for (int i = e + 1; i < t.dim(); ++i) shape.push_back(t.sizes()[i]);
  return reshape(t, shape);
}

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : clone(t); }

}  // namespace mt::raw
