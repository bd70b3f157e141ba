// dataset.cpp: collate (stack examples into a batch), Dataset's default get_batch, and
// TensorDataset. Autograd-free: everything here uses mt::raw ops, so loading data never records
// history, whatever the grad mode.
#include "data/dataset.h"

#include <array>
#include <cstring>
#include <utility>

#include "tensor/raw_ops.h"

namespace mt::data {
namespace {

// (B, ...) for per-example shape (...).
Shape batched(int64_t batch, const Shape& example) {
  Shape s{batch};
  for (int64_t d : example) s.push_back(d);
  return s;
}

// Stacks one field (input or target) of every example into a fresh (B, ...) tensor.
Tensor stack(const std::vector<Example>& examples, Tensor Example::*field, const char* name) {
  const Tensor& first = examples[0].*field;
  MT_CHECK(first.defined(), "collate: example 0 has no ", name);
  const int64_t batch = static_cast<int64_t>(examples.size());
  Tensor out = empty(batched(batch, first.sizes()), {.dtype = first.dtype(), .device = first.device()});
  for (int64_t i = 0; i < batch; ++i) {
    const Tensor& t = examples[i].*field;
    MT_CHECK(t.defined() && t.sizes() == first.sizes() && t.dtype() == first.dtype() &&
                 t.device() == first.device(),
             "collate: example ", i, "'s ", name, " is ",
             t.defined() ? t.sizes().str() + " " + dtype_name(t.dtype()) : std::string("undefined"),
             " but example 0's is ", first.sizes(), " ", first.dtype(),
             "; every example in a batch must have the same shape and dtype");
    raw::copy_(raw::squeeze(raw::narrow(out, 0, i, 1), 0), t);
  }
  return out;
}

void check_index(int64_t index, int64_t size, const char* what) {
  MT_CHECK(index >= 0 && index < size, what, ": index ", index, " is out of range for a dataset of ",
           size, " examples");
}

}  // namespace

Batch collate(const std::vector<Example>& examples) {
  MT_CHECK(!examples.empty(), "collate: no examples to stack");
  return {stack(examples, &Example::input, "input"), stack(examples, &Example::target, "target")};
}

Batch Dataset::get_batch(std::span<const int64_t> indices) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) examples.push_back(get(i));
  return collate(examples);
}

TensorDataset::TensorDataset(Tensor inputs, Tensor targets) {
  MT_CHECK(inputs.defined() && targets.defined(), "TensorDataset: inputs and targets must be defined");
  MT_CHECK(inputs.dim() >= 1 && targets.dim() >= 1,
           "TensorDataset: inputs and targets need a first dim that indexes examples, got inputs ",
           inputs.sizes(), " and targets ", targets.sizes());
  MT_CHECK(inputs.size(0) == targets.size(0), "TensorDataset: inputs have ", inputs.size(0),
           " examples (shape ", inputs.sizes(), ") but targets have ", targets.size(0), " (shape ",
           targets.sizes(), ")");
  MT_CHECK(inputs.device() == targets.device(), "TensorDataset: inputs are on ", inputs.device(),
           " but targets on ", targets.device());
  inputs_ = raw::contiguous(inputs);
  targets_ = raw::contiguous(targets);
}

Example TensorDataset::get(int64_t index) const {
  check_index(index, size(), "TensorDataset::get");
  return {raw::squeeze(raw::narrow(inputs_, 0, index, 1), 0),
          raw::squeeze(raw::narrow(targets_, 0, index, 1), 0)};
}

namespace {
// Rows of Bytes bytes, a constant: the compiler inlines each copy as a few moves. A memcpy call per
// 40-byte row (the seed job's 10 features) cost more than the copy: 9 % of the seed job.
template <size_t Bytes>
void copy_rows(char* dst, const char* src, std::span<const int64_t> indices) {
  for (size_t j = 0; j < indices.size(); ++j) std::memcpy(dst + j * Bytes, src + indices[j] * Bytes, Bytes);
}
using RowCopy = void (*)(char*, const char*, std::span<const int64_t>);
template <size_t... W>
constexpr std::array<RowCopy, sizeof...(W)> short_row_copies(std::index_sequence<W...>) {
  return {&copy_rows<(W + 1) * 4>...};
}
constexpr auto kShortRowCopies = short_row_copies(std::make_index_sequence<16>{});  // 4, 8, ..., 64 bytes

// Rows `indices` of a contiguous CPU tensor t: (n, ...) -> (k, ...), a fresh tensor. What
// index_select(t, 0, index) computes (the same row copies), without building an index tensor and
// the views around the kernel: for the seed job's 32-row batches those were a fifth of a step.
Tensor gather_rows(const Tensor& t, std::span<const int64_t> indices) {
  Shape shape = t.sizes();
  shape[0] = static_cast<int64_t>(indices.size());
  Tensor out = empty(shape, {.dtype = t.dtype()});
  const size_t row = t.size(0) == 0 ? 0 : t.numel() / t.size(0) * element_size(t.dtype());
  const char* src = static_cast<const char*>(t.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  if (row % 4 == 0 && row >= 4 && row <= 4 * kShortRowCopies.size()) {
    kShortRowCopies[row / 4 - 1](dst, src, indices);
  } else {
    for (size_t j = 0; j < indices.size(); ++j) std::memcpy(dst + j * row, src + indices[j] * row, row);
  }
  return out;
}
}  // namespace

Batch TensorDataset::get_batch(std::span<const int64_t> indices) const {
  const int64_t k = static_cast<int64_t>(indices.size());
  for (int64_t i : indices) check_index(i, size(), "TensorDataset::get_batch");
  if (inputs_.device() == kCPU)  // inputs_ and targets_ are contiguous (the constructor made them so)
    return {gather_rows(inputs_, indices), gather_rows(targets_, indices)};
  Tensor index = empty({k}, {.dtype = kInt64});
  if (k > 0) std::memcpy(index.data_ptr<int64_t>(), indices.data(), k * sizeof(int64_t));
  index = raw::to_device(index, inputs_.device());
  return {raw::index_select(inputs_, 0, index), raw::index_select(targets_, 0, index)};
}

}  // namespace mt::data
