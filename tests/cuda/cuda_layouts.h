// The layouts the conformance tests run each kernel over (tests/cuda/test_cuda_backend.cpp,
// test_cuda_lowp.cpp): one operand as contiguous, transposed, unaligned and broadcast tensors, and
// a copy onto the GPU that keeps the layout, so the kernels' strided and unaligned paths run too.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"

namespace mt::test {

// t on the GPU with t's own sizes, strides and storage offset: a transposed, broadcast (stride 0)
// or unaligned CPU operand stays one on the device. (raw::to_device would make a dense copy.)
inline Tensor gpu_as_laid_out(const Tensor& t) {
  const int64_t span = static_cast<int64_t>(t.storage()->nbytes() / element_size(t.dtype()));
  const Tensor storage_on_gpu = raw::to_device(raw::as_strided(t, {span}, {1}, 0), kGpu);
  return raw::as_strided(storage_on_gpu, t.sizes(), t.strides(), t.storage_offset());
}

// Layouts of one logical (rows, cols) operand, all of shape (rows, cols) with base's values (the
// broadcast one: its first column): contiguous, transposed storage, a dense view one element into
// its storage (not 16-byte aligned), and a column broadcast (stride 0).
inline std::vector<std::pair<std::string, Tensor>> layouts(const Tensor& base) {
  const int64_t r = base.size(0), c = base.size(1);
  Tensor shifted = empty({r * c + 1}, {.dtype = base.dtype()});
  const Tensor unaligned = raw::view(raw::narrow(shifted, 0, 1, r * c), {r, c});
  raw::copy_(unaligned, base);
  return {{"contiguous", base},
          {"transposed", raw::transpose(raw::contiguous(raw::transpose(base, 0, 1)), 0, 1)},
          {"unaligned", unaligned},
          {"broadcast", raw::expand(raw::narrow(base, 1, 0, 1), {r, c})}};
}

}  // namespace mt::test
