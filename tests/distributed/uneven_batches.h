// The uneven epoch both Join tests train (test_join.cpp, plain DDP; test_join_zero.cpp, ZeRO-1):
// rank r has 2 + r batches of (4, 3) -> (4, 2), and the reference a Join run must equal: one
// process that applies, step by step, the average over the whole world of the gradients of the
// ranks that still had a batch (a joined rank contributes zeros, Note [Join]).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <utility>

#include "autograd/ops.h"
#include "nn/nn.h"
#include "optim/optimizer.h"
#include "tensor/check.h"
#include "tensor/generator.h"

namespace mt::test {

inline int uneven_batches_of(int rank) { return 2 + rank; }  // rank 0 has 2 batches, rank 1 has 3, ...

// Rank r's batch b under `seed`: the same on every process that asks.
inline std::pair<Tensor, Tensor> uneven_batch(uint64_t seed, int rank, int b) {
  Generator gen(seed * rank + b);
  return {randn({4, 3}, gen), randn({4, 2}, gen)};
}

// Trains ref as that one process, with opt over ref's parameters; before_step runs between the
// summed backward and opt.step() (the ZeRO test clips there).
inline void train_uneven_reference(nn::Module& ref, optim::Optimizer& opt, int world, uint64_t seed,
                                   const std::function<void()>& before_step = {}) {
  for (int b = 0; b < uneven_batches_of(world - 1); ++b) {
    opt.zero_grad();
    for (int r = 0; r < world; ++r) {
      if (b >= uneven_batches_of(r)) continue;
      const auto [x, y] = uneven_batch(seed, r, b);
      mul(nn::F::mse_loss(ref.forward(x), y), 1.0 / world).backward();
    }
    if (before_step) before_step();
    opt.step();
  }
}

// Every parameter of got within tol of want's, elementwise; an MT_CHECK (the test runs in a rank).
inline void check_parameters_near(const nn::Module& got, const nn::Module& want, double tol) {
  const NamedTensors g = got.named_parameters(), w = want.named_parameters();
  for (size_t i = 0; i < g.size(); ++i) {
    const std::vector<float> u = g[i].second.to_vector<float>(), v = w[i].second.to_vector<float>();
    for (size_t k = 0; k < u.size(); ++k)
      MT_CHECK(std::abs(u[k] - v[k]) <= tol, g[i].first, "[", k, "] is ", u[k], ", expected ", v[k]);
  }
}

}  // namespace mt::test
