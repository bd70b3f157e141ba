// Shape helpers: printing, contiguous strides, broadcasting, dim wrapping. Also the names of
// dtypes and the parsing of device strings, which are equally small.
#include "tensor/shape.h"

#include <sstream>

#include "tensor/device.h"
#include "tensor/dtype.h"

namespace mt {

std::string Shape::str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < n_; ++i) os << (i ? ", " : "") << d_[i];
  os << ']';
  return os.str();
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides;
  strides.resize(sizes.size());
  int64_t s = 1;
  for (int i = sizes.size() - 1; i >= 0; --i) {
    strides[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  if (a == b) return a;
  const int n = std::max(a.size(), b.size());
  Shape out;
  out.resize(n);
  for (int i = 0; i < n; ++i) {
    // Align from the right: a missing leading dim acts as size 1.
    const int ia = a.size() - n + i, ib = b.size() - n + i;
    const int64_t sa = ia >= 0 ? a[ia] : 1, sb = ib >= 0 ? b[ib] : 1;
    MT_CHECK(sa == sb || sa == 1 || sb == 1, op, ": shapes ", a, " and ", b,
             " cannot be broadcast (dim ", i, ": ", sa, " vs ", sb, ")");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

Shape broadcast_strides(const Shape& sizes, const Shape& strides, const Shape& to) {
  const int lead = to.size() - sizes.size();
  Shape out;
  out.resize(to.size());
  for (int i = lead; i < to.size(); ++i) out[i] = sizes[i - lead] == to[i] ? strides[i - lead] : 0;
  return out;
}

int wrap_dim_checked(int64_t dim, int ndim, const char* op) {
  const int64_t n = std::max(ndim, 1);  // a 0-dim tensor accepts dim 0 and -1, like PyTorch
  MT_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a tensor of ", ndim,
           " dims (expected ", -n, " to ", n - 1, ")");
  return static_cast<int>(dim < 0 ? dim + n : dim);
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int64: return "int64";
    case DType::BFloat16: return "bfloat16";
    case DType::Float16: return "float16";
  }
  return "?";
}

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    *this = kCPU;
    return;
  }
  if (spec.rfind("cuda", 0) == 0) {
    if (spec.size() == 4) {
      *this = Device(DeviceType::CUDA, 0);
      return;
    }
    if (spec[4] == ':' && spec.size() > 5 && spec.size() < 10 &&
        spec.find_first_not_of("0123456789", 5) == std::string::npos) {
      *this = Device(DeviceType::CUDA, std::stoi(spec.substr(5)));
      return;
    }
  }
  MT_FAIL("unknown device '", spec, "' (expected cpu, cuda or cuda:N)");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

}  // namespace mt
