// Dataset: what a DataLoader reads from. A dataset has a size and returns example i as an
// {input, target} pair; TensorDataset serves examples out of two tensors whose first dim indexes them.
//
// Batches are a first-class request here (get_batch), unlike PyTorch's map-style Dataset, which only
// has __getitem__: for the small models minitrain trains, fetching B examples one by one and then
// stacking them costs more than the training step itself, while TensorDataset can gather a whole
// batch with one index_select. The default get_batch does the slow, obviously correct thing.
//
// Not here: transforms/augmentation, iterable (streaming) datasets, lazy loading from disk.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensor/tensor.h"

namespace mt::data {

// One example. Shapes are the dataset's per-example shapes, e.g. input (28, 28), target () for a label.
struct Example {
  Tensor input;
  Tensor target;
};

// Examples stacked along a new first dim: input (B, ...), target (B, ...), both contiguous.
struct Batch {
  Tensor input;
  Tensor target;
  int64_t size() const { return input.size(0); }
};

// Stacks examples that all have the same input shape and dtype, and the same target shape and dtype,
// into one contiguous Batch. Throws naming the first example that differs from example 0.
Batch collate(const std::vector<Example>& examples);

// A dataset of size() examples, indexed 0..size()-1.
//
// Thread safety: a DataLoader with num_workers > 0 calls get() and get_batch() from several threads
// at once, so both must be safe to call concurrently (they are const: keep it that way, or lock).
class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;

  // The examples at `indices`, in that order, collated. Default: get() each one, then collate().
  // Override when the dataset can do better (TensorDataset gathers the batch in one op).
  virtual Batch get_batch(std::span<const int64_t> indices) const;
};

// Examples are slices of two tensors along their first dim:
//   inputs: (N, ...)   targets: (N, ...)   example i = {inputs[i], targets[i]}
// e.g. images (60000, 28, 28) float32 with labels (60000) int64.
// The tensors are shared, not copied (a non-contiguous one is made contiguous once, here, so that
// each batch's index_select does not copy the whole dataset first). Any device the tensors live on.
class TensorDataset final : public Dataset {
 public:
  TensorDataset(Tensor inputs, Tensor targets);

  int64_t size() const override { return inputs_.size(0); }
  // Views into the dataset's tensors (no copy): writing to them writes to the dataset.
  Example get(int64_t index) const override;
  // Two index_selects: batch.input = inputs[indices], batch.target = targets[indices].
  Batch get_batch(std::span<const int64_t> indices) const override;

  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_;
  Tensor targets_;
};

}  // namespace mt::data
