// Note [Gradient destination]: a leaf whose gradient lives in memory someone else owns (DDP's
// bucket). The first gradient into an undefined .grad is written there, later ones add in place,
// set_to_none forgets .grad, a destination that does not match the leaf is a clear error, and a
// destination scale divides the first gradient as it is written (Note [Dividing while writing]).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autograd/accumulate_grad.h"
#include "minitrain.h"

using namespace mt;

TEST_CASE("the first gradient is written into the leaf's gradient destination, which becomes .grad") {
  Tensor w = from_vector(std::vector<double>{1, 2, 3}, {3}, {.dtype = kFloat64, .requires_grad = true});
  Tensor buffer = full({5}, 7.0, {.dtype = kFloat64});  // stale values: no zeroing pass may be needed
  const Tensor slice = buffer.narrow(0, 1, 3);
  set_grad_destination(w, slice);
  (w * w).sum().backward();  // d/dw sum(w²) = 2w
  CHECK(buffer.to_vector<double>() == std::vector<double>{7, 2, 4, 6, 7});
  CHECK(w.grad().raw_data() == slice.raw_data());
  (w * w).sum().backward();  // accumulates in place
  CHECK(buffer.to_vector<double>() == std::vector<double>{7, 4, 8, 12, 7});
  w.set_grad(Tensor());      // zero_grad(set_to_none): forgotten, and the next one lands there again
  (w * 3.0).sum().backward();
  CHECK(buffer.to_vector<double>() == std::vector<double>{7, 3, 3, 3, 7});

  set_grad_destination(w, Tensor());  // back to the engine's own memory
  w.set_grad(Tensor());
  (w * 5.0).sum().backward();
  CHECK(w.grad().raw_data() != slice.raw_data());
  CHECK(buffer.to_vector<double>() == std::vector<double>{7, 3, 3, 3, 7});
}

TEST_CASE("a gradient destination that does not match the leaf is an error naming both") {
  Tensor w = zeros({2, 3}, {.requires_grad = true});
  std::string message;
  try {
    set_grad_destination(w, zeros({6}));
  } catch (const Error& e) {
    message = e.what();
  }
  CHECK(message.find("expected [2, 3] float32") != std::string::npos);
  CHECK(message.find("got [6] float32") != std::string::npos);
}

TEST_CASE("a destination scale divides the first gradient on its way in, once, and says so") {
  // Note [Dividing while writing]: DDP's buckets receive g / world in the pass that writes g.
  Tensor w = from_vector(std::vector<double>{1, 2, 3}, {3}, {.dtype = kFloat64, .requires_grad = true});
  Tensor buffer = zeros({3}, {.dtype = kFloat64});
  set_grad_destination(w, buffer);
  set_grad_destination_scale(w, 0.25);
  (w * w).sum().backward();  // 2w / 4
  CHECK(buffer.to_vector<double>() == std::vector<double>{0.5, 1.0, 1.5});
  CHECK(take_destination_scaled(w));
  CHECK_FALSE(take_destination_scaled(w));  // taken: cleared
  (w * 4.0).sum().backward();                // .grad is defined now: it accumulates, unscaled
  CHECK(buffer.to_vector<double>() == std::vector<double>{4.5, 5.0, 5.5});
  CHECK_FALSE(take_destination_scaled(w));
  set_grad_destination_scale(w, 1.0);        // a plain copy again
  w.set_grad(Tensor());
  (w * 2.0).sum().backward();
  CHECK(buffer.to_vector<double>() == std::vector<double>{2, 2, 2});
  CHECK_FALSE(take_destination_scaled(w));
}
