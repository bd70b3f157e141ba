// DataLoader: turns a Dataset and a Sampler into an epoch of collated batches, optionally built
// ahead of time on background threads.
//
//   auto data = std::make_shared<TensorDataset>(x, y);            // x: (N, 10)  y: (N, 1)
//   DataLoader loader(data, {.batch_size = 32, .shuffle = true, .num_workers = 2, .seed = 0});
//   for (int64_t epoch = 0; epoch < 5; ++epoch) {
//     loader.set_epoch(epoch);                                    // Note [Epoch seeding]
//     for (const Batch& b : loader) { ... b.input: (32, 10)  b.target: (32, 1) ... }
//   }
//
// Note [Batch order]: batch k is always built from the k-th chunk of batch_size indices of the
// sampler's epoch list, whatever num_workers is. Workers may finish out of order; the consumer waits
// for batch k before it yields it. So a run's batches, and hence its training, do not depend on how
// many workers loaded them.
//
// Workers are threads, not processes (PyTorch forks processes to get around Python's GIL; C++ has no
// GIL). They are started by begin() and stopped and joined when the loop ends, breaks early or throws.
//
// Batches for a GPU: with `.device = cuda_device(0)` the loop receives batches already on that GPU;
// with `.pin_memory = true` as well (mini_train's default on a GPU), each is copied into one of a
// few pinned host buffers and sent with cudaMemcpyAsync on a copy stream of its own while the
// previous step computes; the compute stream waits for that batch's copy event only, and the host
// not at all (Note [One batch ahead], Note [Upload pool] in tensor/cuda/cuda_upload.h). Unlike
// PyTorch's pin_memory, which hands out pinned CPU tensors for a later .to(device, non_blocking),
// the copy is the loader's: it has to know the device anyway to overlap it.
//
// Not here: persistent workers across epochs, custom collate functions, per-worker random state for
// augmentation (there are no transforms yet), collating straight into the pinned buffer (the
// batch is built in pageable memory, then copied into it on the loop's thread).
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>

#include "data/dataset.h"
#include "data/sampler.h"

namespace mt::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;     // RandomSampler(dataset size, seed); only without an explicit sampler
  bool drop_last = false;   // drop the last batch when it has fewer than batch_size examples
  int num_workers = 0;      // 0: batches are built in the loop's own thread, when asked for
  int prefetch = 2;         // batches built ahead per worker (PyTorch's prefetch_factor)
  uint64_t seed = 0;        // for shuffle
  // Where the loop receives its batches. kCPU: as built. A CUDA device: copied there before they
  // are handed out (Tensor::to, or the pinned path below).
  Device device = kCPU;
  // With a CUDA device: copy through `pinned_buffers` page-locked buffers on a copy stream,
  // asynchronously, one batch ahead (Note [One batch ahead]). Ignored with a CPU device (there is
  // nothing to copy), as PyTorch ignores it without an accelerator.
  bool pin_memory = false;
  int pinned_buffers = 2;
};

namespace detail {
class EpochRun;       // one pass over the data: its index list, its workers and their queue (dataloader.cpp)
class BatchTransfer;  // how batches reach opts.device (batch_transfer.h)
}

class DataLoader {
 public:
  // Sequential order, or RandomSampler(dataset->size(), opts.seed) when opts.shuffle.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions opts = {});
  // An explicit sampler (e.g. DistributedSampler); opts.shuffle must then be false: the sampler decides.
  DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler,
             DataLoaderOptions opts = {});

  // Single-pass input iterator over one epoch. Copies share the epoch's workers; once one copy has
  // been advanced, the others must not be used. The last copy to go stops and joins the workers.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;

    Iterator() = default;
    const Batch& operator*() const { return batch_; }
    const Batch* operator->() const { return &batch_; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return run_ == nullptr; }

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<detail::EpochRun> run);
    void fetch();  // the run's next batch into batch_, or become the end iterator
    std::shared_ptr<detail::EpochRun> run_;  // null at the end
    Batch batch_;
  };

  // Starts an epoch: takes the sampler's index list, starts the workers, returns the first batch.
  // Each call is an independent pass. An exception from building a batch (in a worker or not) is
  // rethrown here or from operator++, unchanged, and the iterator is then at the end.
  Iterator begin() const { return begin_at(0); }
  // The same epoch from batch `first_batch` on (0 <= first_batch <= size()): batches before it are
  // neither built nor yielded, and batch k is still the k-th chunk of the sampler's list (Note
  // [Batch order]). What a run resumed mid-epoch (Note [Mid-epoch resume] in
  // apps/mini_train/checkpoint_step.h) needs to see exactly the batches the interrupted one had left.
  Iterator begin_at(int64_t first_batch) const;
  std::default_sentinel_t end() const { return {}; }

  // Number of batches in an epoch.
  int64_t size() const;
  void set_epoch(int64_t epoch) { sampler_->set_epoch(epoch); }

  const Dataset& dataset() const { return *dataset_; }
  Sampler& sampler() const { return *sampler_; }
  const DataLoaderOptions& options() const { return opts_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::shared_ptr<Sampler> sampler_;
  DataLoaderOptions opts_;
  std::shared_ptr<detail::BatchTransfer> transfer_;  // null: batches stay on the host
};

}  // namespace mt::data
