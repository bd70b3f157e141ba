// Uses the installed headers and library: one gradient, checked against its known value.
#include <cstdio>

#include "minitrain.h"

int main() {
  mt::Tensor w = mt::full({3}, 2.0, {.requires_grad = true});
  (w * w).sum().backward();  // d/dw Σw² = 2w = 4
  const double g = w.grad().sum().item();
  std::printf("consumer: grad sum %.1f\n", g);
  return g == 12.0 ? 0 : 1;
}
