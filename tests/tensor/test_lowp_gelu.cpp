// GELU on bfloat16 and float16 (tensor/cpu/cpu_gelu.cpp): the float32 formulas on the widened
// values, each result rounded once (Note [Low-precision compute type]), so the bits are those of the
// float32 kernel's result rounded; forward and backward, both forms, the negative tail included.
// PyTorch's bfloat16 GELU in a GPT block: tests/nn/test_autocast_torch.cpp.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "minitrain.h"
#include "tensor/raw_ops.h"

using namespace mt;

namespace {

// The 16-bit patterns of a bfloat16 or float16 tensor (tests/tensor/lowp_test_util.h has the same,
// beside the fixture file that this test does not read).
std::vector<uint16_t> bits16(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint16_t> out(static_cast<size_t>(c.numel()));
  std::memcpy(out.data(), c.raw_data(), out.size() * 2);
  return out;
}

}  // namespace

TEST_CASE("lowp: GELU and its gradient in bfloat16 and float16 are the float32 kernel's results rounded once") {
  Generator gen(11);
  // 3000 values in [-8, 8): several blocks of the 16-bit path and a ragged last one.
  const Tensor x32 = rand({3000}, gen) * 16.0 - 8.0;
  const Tensor dy32 = randn({3000}, gen);
  for (DType dtype : {kBFloat16, kFloat16}) {
    for (GeluApproximate form : {GeluApproximate::None, GeluApproximate::Tanh}) {
      INFO(dtype, form == GeluApproximate::Tanh ? " tanh" : " exact");
      const Tensor x = x32.to(dtype), dy = dy32.to(dtype);
      const Tensor y = raw::gelu(x, form);
      CHECK(y.dtype() == dtype);
      CHECK(bits16(y) == bits16(raw::gelu(x.to(kFloat32), form).to(dtype)));
      const Tensor dx = raw::gelu_backward(dy, x, form);
      CHECK(dx.dtype() == dtype);
      CHECK(bits16(dx) == bits16(raw::gelu_backward(dy.to(kFloat32), x.to(kFloat32), form).to(dtype)));
    }
  }
}
