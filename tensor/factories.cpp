// Factories: new tensors with fresh storage. `empty` is the one place that allocates; the others
// fill what it returns.
#include <cmath>
#include <cstring>
#include <vector>

#include "tensor/backend.h"
#include "tensor/generator.h"
#include "tensor/raw_ops.h"
#include "tensor/small_blocks.h"

namespace mt {

namespace {
Tensor finish(Tensor t, const TensorOptions& opts) {
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

// The bytes of a contiguous tensor of this shape and dtype. A product past 2^63 is refused here,
// the one place that allocates: wrapped, it would be a small request whose writes run past it.
size_t storage_bytes(const Shape& shape, DType dtype) {
  for (int64_t s : shape) MT_CHECK(s >= 0, "empty: negative size in shape ", shape);
  for (int64_t s : shape)
    if (s == 0) return 0;  // nothing to hold, whatever the other sizes are
  int64_t bytes = static_cast<int64_t>(element_size(dtype));
  for (int64_t s : shape)
    MT_CHECK(!__builtin_mul_overflow(bytes, s, &bytes), "empty: a ", dtype, " tensor of shape ", shape,
             " would take more than 2^63 bytes");
  return static_cast<size_t>(bytes);
}
}  // namespace

Tensor empty(const Shape& shape, TensorOptions opts) {
  const size_t nbytes = storage_bytes(shape, opts.dtype);
  auto impl = detail::make_small<TensorImpl>();
  impl->storage = make_storage(nbytes, opts.device, backend(opts.device).allocator());
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = opts.dtype;
  return finish(Tensor(std::move(impl)), opts);
}

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  const bool rg = opts.requires_grad;
  opts.requires_grad = false;
  Tensor t = empty(shape, opts);
  backend(opts.device).fill(t, value);
  opts.requires_grad = rg;
  return finish(t, opts);
}

Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }
Tensor empty_like(const Tensor& t) { return empty(t.sizes(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor scalar_tensor(double value, TensorOptions opts) { return full(Shape{}, value, opts); }

Tensor arange(double start, double end, double step, TensorOptions opts) {
  MT_CHECK(step != 0, "arange: step must be non-zero");
  MT_CHECK(std::isfinite(start) && std::isfinite(end), "arange: start and end must be finite");
  const double count = std::ceil((end - start) / step);
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = start + static_cast<double>(i) * step;
  return from_vector(values, Shape{n}, opts);
}

Tensor arange(int64_t end, TensorOptions opts) { return arange(0.0, static_cast<double>(end), 1.0, opts); }

namespace {
// Host values of type T into a tensor of opts.dtype on opts.device.
template <typename T>
Tensor from_host(const std::vector<T>& values, const Shape& shape, TensorOptions opts) {
  MT_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "from_vector: ", values.size(),
           " values do not fill shape ", shape, " (", shape.numel(), " elements)");
  Tensor host = empty(shape, {.dtype = dtype_of<T>::value});
  if (!values.empty()) std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(T));
  Tensor t = raw::to_device(raw::cast(host, opts.dtype), opts.device);
  return finish(t, opts);
}
}  // namespace

Tensor from_vector(const std::vector<float>& v, const Shape& s, TensorOptions o) { return from_host(v, s, o); }
Tensor from_vector(const std::vector<double>& v, const Shape& s, TensorOptions o) { return from_host(v, s, o); }
Tensor from_vector(const std::vector<int64_t>& v, const Shape& s, TensorOptions o) { return from_host(v, s, o); }

namespace {
// A bfloat16 or float16 draw is the float32 draw rounded: the same generator state gives the same
// numbers in every floating dtype, up to the rounding (PyTorch draws these dtypes its own way).
DType draw_dtype(DType t) { return is_low_precision(t) ? kFloat32 : t; }
}  // namespace

Tensor rand(const Shape& shape, Generator& gen, TensorOptions opts) {
  MT_CHECK(is_floating(opts.dtype), "rand: needs a floating dtype, got ", opts.dtype);
  Tensor t = empty(shape, {.dtype = draw_dtype(opts.dtype), .device = opts.device});
  raw::uniform_(t, gen, 0.0, 1.0);
  return finish(raw::cast(t, opts.dtype), opts);
}

Tensor randn(const Shape& shape, Generator& gen, TensorOptions opts) {
  MT_CHECK(is_floating(opts.dtype), "randn: needs a floating dtype, got ", opts.dtype);
  Tensor t = empty(shape, {.dtype = draw_dtype(opts.dtype), .device = opts.device});
  raw::normal_(t, gen, 0.0, 1.0);
  return finish(raw::cast(t, opts.dtype), opts);
}

Tensor rand(const Shape& shape, TensorOptions opts) { return rand(shape, default_generator(), opts); }
Tensor randn(const Shape& shape, TensorOptions opts) { return randn(shape, default_generator(), opts); }

// Drawn on the host, one Philox block per element, so every device gets the same integers. Each is
// low + a uniform integer below high - low, by Lemire's exact multiply-shift (Note [Unbiased shuffle]
// in data/sampler.cpp): the high half of next_u64()·range, redrawn in the rare case the low half
// falls below 2^64 mod range.
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen, TensorOptions opts) {
  MT_CHECK(low < high, "randint: low (", low, ") must be below high (", high, ")");
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  const uint64_t threshold = (0 - range) % range;  // 2^64 mod range
  std::vector<int64_t> values(static_cast<size_t>(shape.numel()));
  for (int64_t& v : values) {
    unsigned __int128 m = static_cast<unsigned __int128>(gen.next_u64()) * range;
    while (static_cast<uint64_t>(m) < threshold) m = static_cast<unsigned __int128>(gen.next_u64()) * range;
    v = static_cast<int64_t>(static_cast<uint64_t>(low) + static_cast<uint64_t>(m >> 64));
  }
  return from_vector(values, shape, opts);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts) {
  return randint(low, high, shape, default_generator(), opts);
}

}  // namespace mt
