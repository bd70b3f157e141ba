// What the CPU's normalisation kernels share (cpu_layer_norm.cpp, cpu_group_norm.cpp): Eigen views of
// a row of T, and the centring of a row around its mean.
#pragma once

#include "tensor/cpu/eigen_core.h"

namespace mt::cpu {

template <typename T>
using Row = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstRow = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// c = x - m - mean(x - m); returns mean(x - m), what the rounding of m left in the row. Why it is
// taken off: Note [Layer norm rows that do not sum to 0] in cpu_layer_norm.cpp.
template <typename T>
T centre(Eigen::Array<T, Eigen::Dynamic, 1>& c, const ConstRow<T>& x, T m) {
  c = x - m;
  const T residue = c.sum() / T(c.size());
  c -= residue;
  return residue;
}

}  // namespace mt::cpu
