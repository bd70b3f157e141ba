// Generator: the host side of minitrain's random numbers. The numbers themselves come from the
// Philox block function (tensor/detail/philox.h); this file maps (seed, counter) onto its key and
// counter words and provides the default generator. Tensor fills (uniform, normal) live in the
// backends (tensor/cpu/cpu_random.cpp), which reserve blocks with Generator::advance.
#include "tensor/generator.h"

#include "tensor/detail/philox.h"

namespace mt {

std::array<uint32_t, 4> Generator::philox(uint64_t seed, uint64_t counter) {
  return detail::philox_block(seed, counter);
}

// Words 0 and 1 of one fresh block: word 1 is the high half.
uint64_t Generator::next_u64() {
  const auto w = philox(seed_, advance(1));
  return (static_cast<uint64_t>(w[1]) << 32) | w[0];
}

// The same mapping as a float64 uniform_ fill's first element: words 0 (high) and 1 (low).
double Generator::next_double() {
  const auto w = philox(seed_, advance(1));
  return uniform_double(w[0], w[1]);
}

// Like PyTorch's default generator, it is process-wide and not synchronised: concurrent draws from
// several threads need their own Generator objects.
Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().set_state(seed, 0); }

}  // namespace mt
