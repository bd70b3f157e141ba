// One gradcheck as a doctest check, with gradcheck's own message when it fails: what the autograd
// and nn gradient tests (tests/autograd/test_*.cpp, tests/nn/test_loss.cpp, test_norm_attention.cpp)
// call for each case.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <vector>

#include "minitrain.h"

namespace mt::test {

inline void check_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                            const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(f, inputs);
  INFO(r.message);
  CHECK(r.ok);
}

}  // namespace mt::test
