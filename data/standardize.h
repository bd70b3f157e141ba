// Standardising a dataset's inputs in place: x' = (x - mean) / std with one scalar mean and standard
// deviation over every element (what mini_train's --standardize does, and saves with the model).
//
// Note [One copy of a dataset]: the inputs are the largest thing a small model's training holds
// (Fashion-MNIST: 209 MiB of float32 for a 2 MiB model), and freed large CPU blocks stay with the
// process (Note [Large CPU blocks are cached] in tensor/cpu/cpu_allocator.cpp). So the statistics are
// accumulated straight from the data and the transform is applied in place: no temporary the size
// of the data is ever made, and the peak is the data plus one batch. Written as
// `raw::unary(MulScalar, raw::unary(AddScalar, x, -mean), 1/std)`, with the variance from
// `mean(pow(x - mean, 2))`, the same step held three copies at once.
//
// Not here: per-feature (per-channel) statistics.
#pragma once

#include "tensor/tensor.h"

namespace mt::data {

struct Standardization {
  double mean = 0;
  double std = 1;  // the population standard deviation, at least 1e-6 (a constant input stays finite)
};

// The mean and standard deviation of every element of `x` (contiguous float32 or float64, on the
// CPU), accumulated in float64 in two passes over the data.
Standardization fit_standardization(const Tensor& x);

// x = (x - s.mean) * (1 / s.std), in place, by the same element-wise kernels (and so to the same bits)
// as the out-of-place form used on new inputs at inference.
void standardize_(const Tensor& x, Standardization s);

}  // namespace mt::data
