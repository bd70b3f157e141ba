// What the CNN and transformer GPU tests share (tests/cuda/test_cuda_conv.cpp,
// test_cuda_transformer.cpp, and the emulator's tests/cuda_emu/test_conv_batched.cu): the device
// under test, a dense copy onto it, and reproducible inputs.
// The copy that keeps an operand's strides, and the layouts it is given in: cuda_layouts.h.
#pragma once

#include <cstdint>

#include "minitrain.h"
#include "tensor/raw_ops.h"

namespace mt::test {

inline const Device kGpu = cuda_device(0);

// t copied onto the GPU, dense.
inline Tensor gpu(const Tensor& t) { return raw::to_device(t, kGpu); }

// Uniform values in [-2, 2) of shape s and a floating dtype, the same for the same seed.
inline Tensor sample(const Shape& s, DType dtype, uint64_t seed) {
  Generator gen(seed);
  Tensor t = empty(s, {.dtype = dtype});
  raw::uniform_(t, gen, -2.0, 2.0);
  return t;
}

}  // namespace mt::test
