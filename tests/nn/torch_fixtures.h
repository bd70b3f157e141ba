// PyTorch's values for the nn tests that compare with it (tests/nn/test_torch_ops.cpp,
// test_torch_layers.cpp, test_torch_spatial.cpp): a fixture file of tests/nn/fixtures, written by
// its make_*_fixtures.py, read at its first use; and the comparison they all make.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "minitrain.h"

namespace mt::test {

class TorchFixtures {
 public:
  explicit TorchFixtures(std::string file) : file_(std::move(file)) {}
  Tensor operator()(const std::string& name) const {
    const auto it = tensors().find(name);
    REQUIRE_MESSAGE(it != tensors().end(), file_, " has no tensor ", name);
    return it->second;
  }
  bool has(const std::string& name) const { return tensors().count(name) > 0; }

 private:
  const std::map<std::string, Tensor>& tensors() const {
    if (!loaded_) {
      for (auto& [name, t] : load_safetensors(std::string(MT_TEST_FIXTURES) + "/" + file_).tensors) tensors_[name] = t;
      loaded_ = true;
    }
    return tensors_;
  }
  std::string file_;
  mutable std::map<std::string, Tensor> tensors_;
  mutable bool loaded_ = false;
};

// |got - want| <= 1e-9·|want| elementwise, plus 1e-15 of the largest |want| for values that are 0
// up to rounding (a cumsum that cancels, a loss term of 0). At most five elements are reported.
inline void check_close_to_torch(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.sizes() == want.sizes());
  CHECK(got.dtype() == want.dtype());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = 0;
  for (double v : w) scale = std::max(scale, std::abs(v));
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    if (std::abs(g[i] - w[i]) <= 1e-9 * std::abs(w[i]) + 1e-15 * scale) continue;
    ++bad;
    FAIL_CHECK("element " << i << ": minitrain " << g[i] << ", PyTorch " << w[i]);
  }
}

}  // namespace mt::test
