// Samplers decide which examples an epoch visits and in what order. A sampler hands the DataLoader
// the whole epoch's index list at once; the loader cuts it into batches (batch k = the k-th chunk).
//
//   SequentialSampler    0, 1, ..., N-1
//   RandomSampler        a permutation of 0..N-1 from Generator(seed + epoch)
//   DistributedSampler   one rank's share of a (shuffled) epoch, with PyTorch's semantics
//
// Note [Epoch seeding]: shuffling samplers are pure functions of (seed, epoch). Nothing advances by
// itself: call set_epoch(e) at the start of each epoch (DataLoader::set_epoch forwards it), or every
// epoch visits the examples in the same order. This is PyTorch's DistributedSampler contract, and it
// is what keeps every rank's permutation identical without any communication, and what makes a
// resumed run (restart at epoch e) see exactly the order it would have seen.
//
// Not here: weighted or stratified sampling, sampling with replacement, batch samplers.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/generator.h"

namespace mt::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // How many indices one epoch yields.
  virtual int64_t size() const = 0;
  // This epoch's indices, in visiting order; size() of them.
  virtual std::vector<int64_t> indices() const = 0;
  // Selects the epoch for samplers whose order depends on it (Note [Epoch seeding]); others ignore it.
  virtual void set_epoch(int64_t epoch) {}
};

// A uniformly random permutation of 0..n-1: Fisher–Yates driven by `gen` (Note [Unbiased shuffle]
// in sampler.cpp). Same seed and offset, same permutation, on every platform.
// It is not torch.randperm's permutation (that comes from PyTorch's Mersenne Twister); only the
// distribution is the same.
std::vector<int64_t> randperm(int64_t n, Generator& gen);

class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(int64_t size);
  int64_t size() const override { return size_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t size_;
};

class RandomSampler final : public Sampler {
 public:
  explicit RandomSampler(int64_t size, uint64_t seed = 0);
  int64_t size() const override { return size_; }
  // randperm(size, Generator(seed + epoch)).
  std::vector<int64_t> indices() const override;
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 private:
  int64_t size_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;     // must be the same on every rank
  bool drop_last = false;
};

// Splits each epoch across `num_replicas` ranks, like torch.utils.data.DistributedSampler:
//   1. indices = shuffle ? randperm(N, Generator(seed + epoch)) : 0..N-1     (the same on every rank)
//   2. not drop_last: pad to total_size = ceil(N / replicas) * replicas by repeating indices from the
//      front (the whole list again as often as needed when the padding exceeds N);
//      drop_last: truncate to total_size = floor(N / replicas) * replicas
//   3. rank r takes indices[r], indices[r + replicas], ...: num_samples = total_size / replicas
// Every rank gets the same number of samples. That is the point of the padding: DDP runs one
// all-reduce per step, and a rank with one batch fewer than the others would leave them waiting in a
// collective forever. The price is that up to replicas-1 examples are seen twice per epoch (or, with
// drop_last, up to replicas-1 are not seen at all that epoch).
// The permutation is ours (randperm above), so for the same seed the order differs from PyTorch's;
// the padding, the split and the epoch seeding are the same.
class DistributedSampler final : public Sampler {
 public:
  DistributedSampler(int64_t size, int64_t num_replicas, int64_t rank, DistributedSamplerOptions opts = {});

  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices() const override;
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }

  int64_t epoch() const { return epoch_; }
  int64_t num_samples() const { return num_samples_; }  // per rank
  int64_t total_size() const { return num_samples_ * num_replicas_; }  // all ranks, padding included
  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }

 private:
  int64_t size_;
  int64_t num_replicas_;
  int64_t rank_;
  DistributedSamplerOptions opts_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace mt::data
