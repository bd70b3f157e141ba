// Tensor: a cheap handle (one shared pointer) to a TensorImpl = {storage, sizes, strides, offset,
// dtype, autograd metadata}. Copying a Tensor shares its data, like libtorch. Views share storage.
//
// Layering: this header declares the whole user-facing Tensor API, but the methods that compute or
// make views are *differentiable* and are defined in autograd/ (autograd/tensor_methods.cpp), on top
// of the raw, autograd-free ops in tensor/raw_ops.h. Code below autograd/ uses mt::raw only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"
#include "tensor/storage.h"

namespace mt {

struct AutogradMeta;  // autograd/autograd_meta.h
class Node;           // autograd/node.h
class Tensor;

struct TensorOptions {
  DType dtype = kFloat32;
  Device device = kCPU;
  bool requires_grad = false;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;        // in elements
  int64_t offset = 0;   // in elements
  DType dtype = kFloat32;
  std::shared_ptr<AutogradMeta> autograd;  // null for tensors autograd does not track
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata -------------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  int dim() const { return impl().sizes.size(); }
  const Shape& sizes() const { return impl().sizes; }
  const Shape& strides() const { return impl().strides; }
  int64_t size(int64_t d) const { return sizes()[wrap_dim(d, dim(), "size")]; }
  int64_t stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }
  int64_t numel() const { return impl().sizes.numel(); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  int64_t storage_offset() const { return impl().offset; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  TensorImpl* unsafe_impl() const { return impl_.get(); }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  // True when this handle is the only reference to its impl and to its storage, which the
  // tensor's elements fill exactly: nobody else can see the data, so it may be taken over.
  bool is_sole_owner() const;
  uint64_t version() const { return impl().storage->version(); }

  // Pointer to the first element. T must match dtype (checked).
  template <typename T>
  T* data_ptr() const {
    MT_CHECK(dtype_of<T>::value == dtype(), "data_ptr: tensor is ", dtype(), ", asked for ",
             dtype_name(dtype_of<T>::value));
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const {
    const Storage& storage = *impl().storage;
    MT_CHECK(!storage.released(), "a tensor whose storage has released its bytes was used: a parameter sharded "
             "by FullyShardedDataParallel is only whole during its unit's forward and backward, or inside "
             "summon_full_params() (Note [Storage that lets go of its bytes])");
    return static_cast<char*>(storage.data()) + impl().offset * element_size(dtype());
  }
  // The value of a one-element tensor (any dtype), on the host.
  double item() const;
  template <typename T> T item() const { return static_cast<T>(item()); }
  // All elements in row-major order, converted to T, on the host.
  template <typename T> std::vector<T> to_vector() const;
  std::string str() const;

  // ---- autograd (autograd/tensor_methods.cpp) --------------------------------------------------
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);
  // The accumulated gradient of a leaf (undefined until a backward reaches it).
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  // Runs the engine from this tensor. `grad` may be omitted for a one-element tensor (=1).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // same data, no history
  std::shared_ptr<Node> grad_fn() const;
  bool is_leaf() const;
  // Runs after this leaf's .grad has been accumulated, once per backward. DDP attaches here.
  void register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;

  // ---- views: share storage (differentiable) ---------------------------------------------------
  Tensor view(const Shape& shape) const;      // needs compatible strides; one size may be -1
  Tensor reshape(const Shape& shape) const;   // a view when possible, else a copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;                           // 2-D transpose
  Tensor permute(const Shape& order) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor expand(const Shape& shape) const;    // stride-0 broadcast view; -1 keeps a size
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;                  // itself when already contiguous

  // ---- math (differentiable) -------------------------------------------------------------------
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor abs() const;
  Tensor pow(double exponent) const;
  Tensor sum() const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  // (values, int64 indices) along dim, as libtorch's: `auto [v, i] = x.max(1);`. The gradient goes to
  // the indexed element only (Note [Max along a dim returns indices] in autograd/functions/reductions.cpp).
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  // Values only, over any dims (all when empty); ties share the gradient, as torch.amax.
  Tensor amax(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor amin(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;  // int64, not differentiable
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor to(DType dtype) const;               // differentiable between floating dtypes
  Tensor to(Device device) const;
  Tensor clone() const;
  // Sorting (autograd/ops.h): auto [values, indices] = x.topk(3); values differentiable, indices int64.
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true) const;
  Tensor repeat(const Shape& repeats) const;  // as torch's x.repeat (autograd/ops.h)

  // ---- in place (not differentiable; bump the version counter) ---------------------------------
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);           // broadcasts src; casts dtype
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& sub_(const Tensor& other) { return add_(other, -1.0); }
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& add_(double value);

 private:
  TensorImpl& impl() const {
    MT_CHECK(impl_ != nullptr, "use of an undefined tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- factories (tensor/factories.cpp); requires_grad in the options makes a leaf ---------------
Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
Tensor arange(double start, double end, double step = 1.0, TensorOptions opts = {});
Tensor arange(int64_t end, TensorOptions opts = {.dtype = kInt64});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
// From host values, row-major. The element type picks the dtype unless opts says otherwise.
Tensor from_vector(const std::vector<float>& values, const Shape& shape, TensorOptions opts = {});
Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                   TensorOptions opts = {.dtype = kFloat64});
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape,
                   TensorOptions opts = {.dtype = kInt64});
Tensor scalar_tensor(double value, TensorOptions opts = {});

// Random factories draw from `gen`, or without one from mt::default_generator(), which
// mt::manual_seed(s) reseeds, as torch.manual_seed does (tensor/generator.h).
class Generator;
Tensor rand(const Shape& shape, Generator& gen, TensorOptions opts = {});   // U[0, 1)
Tensor rand(const Shape& shape, TensorOptions opts = {});
Tensor randn(const Shape& shape, Generator& gen, TensorOptions opts = {});  // N(0, 1)
Tensor randn(const Shape& shape, TensorOptions opts = {});
// Integers uniform in [low, high), int64 unless opts says otherwise.
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen, TensorOptions opts = {.dtype = kInt64});
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = {.dtype = kInt64});

// to_vector is instantiated in tensor/tensor.cpp for float, double and int64_t.
extern template std::vector<float> Tensor::to_vector<float>() const;
extern template std::vector<double> Tensor::to_vector<double>() const;
extern template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

}  // namespace mt
