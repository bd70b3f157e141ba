// Tensor: metadata queries, host access (item, to_vector) and printing. The computing methods are
// differentiable and live in autograd/tensor_methods.cpp.
#include "tensor/tensor.h"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "tensor/raw_ops.h"

namespace mt {

bool Tensor::is_contiguous() const {
  const TensorImpl& t = impl();
  int64_t expected = 1;
  for (int i = t.sizes.size() - 1; i >= 0; --i) {
    if (t.sizes[i] == 1) continue;  // the stride of a size-1 dim never matters
    if (t.strides[i] != expected) return false;
    expected *= t.sizes[i];
  }
  return true;
}

// Host copy as a contiguous CPU tensor of dtype T, then read it out.
template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = raw::contiguous(raw::cast(raw::to_device(*this, kCPU), dtype_of<T>::value));
  const T* p = host.data_ptr<T>();
  return std::vector<T>(p, p + host.numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

bool Tensor::is_sole_owner() const {
  const TensorImpl& t = impl();
  return impl_.use_count() == 1 && t.storage.use_count() == 1 && t.offset == 0 && is_contiguous() &&
         t.storage->nbytes() == static_cast<size_t>(numel()) * element_size(t.dtype);
}

double Tensor::item() const {
  MT_CHECK(numel() == 1, "item: expected a tensor with one element, got shape ", sizes());
  // The training loop reads its loss with item() every step: on the CPU a float32 or float64 value
  // is read in place (widening float to double is exact, as the cast kernel's is), not through a
  // cast tensor and a vector.
  if (device() == kCPU && dtype() == kFloat32) return static_cast<double>(*data_ptr<float>());
  if (device() == kCPU && dtype() == kFloat64) return *data_ptr<double>();
  return to_vector<double>()[0];
}

namespace {

// Writes nested brackets for dims [d, ndim), eliding the middle of long dims.
void print_dim(std::ostream& os, const std::vector<double>& v, const Shape& sizes, int d,
               int64_t base, bool integral) {
  const int64_t n = sizes[d];
  int64_t inner = 1;
  for (int i = d + 1; i < sizes.size(); ++i) inner *= sizes[i];
  constexpr int64_t kEdge = 3;
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (n > 2 * kEdge + 1 && i == kEdge) {
      os << "..., ";
      i = n - kEdge - 1;
      continue;
    }
    if (d + 1 == sizes.size()) {
      const double x = v[base + i];
      if (integral) os << static_cast<int64_t>(x);
      else os << x;
    } else {
      print_dim(os, v, sizes, d + 1, base + i * inner, integral);
    }
    if (i + 1 < n) os << ", ";
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << std::setprecision(4) << "tensor(";
  const std::vector<double> v = to_vector<double>();
  if (dim() == 0 && dtype() == kInt64) os << static_cast<int64_t>(v[0]);
  else if (dim() == 0) os << v[0];
  else if (numel() == 0) os << "[]";
  else print_dim(os, v, sizes(), 0, 0, dtype() == kInt64);
  os << ", shape=" << sizes() << ", dtype=" << dtype();
  if (!device().is_cpu()) os << ", device=" << device();
  if (requires_grad()) os << ", requires_grad";
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace mt
