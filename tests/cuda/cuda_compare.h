// The CPU-against-GPU comparison the op, layer, spatial and transformer GPU tests share
// (tests/cuda/test_cuda_*.cpp, run on a GPU and, through the emulator, in `ctest -L cuda-emu`).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.h"

namespace mt::test {

// got_t (on the GPU) equals want_t (on the CPU, of the same or a wider dtype) in shape, and
// elementwise within tol * (1 + |want|); a NaN on either side fails. At most five elements are
// reported.
inline void check_values_close(const Tensor& want_t, const Tensor& got_t, double tol, const std::string& what) {
  INFO(what);
  REQUIRE(got_t.device() == kGpu);
  REQUIRE(want_t.sizes() == got_t.sizes());
  const std::vector<double> want = want_t.to_vector<double>(), got = got_t.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i)
    if (!(std::abs(want[i] - got[i]) <= tol * (1 + std::abs(want[i])))) {
      ++bad;
      FAIL_CHECK("element " << i << ": cpu " << want[i] << ", cuda " << got[i]);
    }
}

// The same, and of one dtype: the GPU ran the op in the CPU's dtype.
inline void check_close(const Tensor& want_t, const Tensor& got_t, double tol, const std::string& what) {
  {
    INFO(what);
    CHECK(want_t.dtype() == got_t.dtype());
  }
  check_values_close(want_t, got_t, tol, what);
}

}  // namespace mt::test
