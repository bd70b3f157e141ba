// The table from device type to Backend, and the names of the ops for error messages.
// The CPU backend is in the table from the start (constant-initialised: no static-order surprises).
// CUDA has one backend object per device (tensor/cuda/cuda_backend.h), so in a CUDA build backend()
// asks tensor/cuda/ for the device's object. Calling it from here, rather than registering from a
// static constructor in the CUDA files, also guarantees that the linker keeps the CUDA backend when
// libminitrain is a static library (an object file nothing references is dropped, constructor and all).
// register_backend stays for backends that are one object per device type.
#include <array>

#include "tensor/cpu/cpu_backend.h"

#if defined(MT_HAVE_CUDA) && MT_HAVE_CUDA
namespace mt::cuda::detail {
Backend& backend_for_device(int index);  // tensor/cuda/cuda_backend.cpp
}
#endif

namespace mt {
namespace {

constinit CpuBackend cpu_backend;

constexpr size_t kNumDeviceTypes = 2;
constinit std::array<Backend*, kNumDeviceTypes> backends = {&cpu_backend, nullptr};

size_t slot(DeviceType type) {
  const auto i = static_cast<size_t>(type);
  MT_CHECK(i < kNumDeviceTypes, "unknown device type ", i);
  return i;
}

}  // namespace

// Called for every op, so it is a bounds check and a load; the error path is out of line.
Backend& backend(Device device) {
  Backend* b = backends[slot(device.type)];
  if (b == nullptr) [[unlikely]] {
#if defined(MT_HAVE_CUDA) && MT_HAVE_CUDA
    if (device.type == DeviceType::CUDA) return cuda::detail::backend_for_device(device.index);
#endif
    MT_CHECK(device.type != DeviceType::CUDA,
             "CUDA device requested but this build has no CUDA backend (configure with -DMT_CUDA=ON "
             "on a machine with nvcc)");
    MT_FAIL("no backend registered for device ", device.str());
  }
  return *b;
}

void register_backend(DeviceType type, Backend* backend) {
  MT_CHECK(backend != nullptr, "register_backend: backend is null");
  backends[slot(type)] = backend;
}

const char* op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Sign: return "sign";
    case UnaryOp::Erf: return "erf";
    case UnaryOp::Expm1: return "expm1";
    case UnaryOp::Log1p: return "log1p";
    case UnaryOp::Pow: return "pow";
    case UnaryOp::AddScalar: return "add_scalar";
    case UnaryOp::MulScalar: return "mul_scalar";
  }
  return "unknown unary op";
}

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Maximum: return "maximum";
    case BinaryOp::Minimum: return "minimum";
    case BinaryOp::Eq: return "eq";
    case BinaryOp::Ne: return "ne";
    case BinaryOp::Lt: return "lt";
    case BinaryOp::Le: return "le";
    case BinaryOp::Gt: return "gt";
    case BinaryOp::Ge: return "ge";
  }
  return "unknown binary op";
}

const char* op_name(ReductionOp op) {
  switch (op) {
    case ReductionOp::Sum: return "sum";
    case ReductionOp::Max: return "max";
    case ReductionOp::Min: return "min";
    case ReductionOp::ArgMax: return "argmax";
  }
  return "unknown reduce op";
}

}  // namespace mt
