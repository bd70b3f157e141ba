// How a DataLoader delivers its batches on DataLoaderOptions::device (data/dataloader.h): as built
// on the host (kCPU: no transfer at all), copied to a GPU with Tensor::to, or, with pin_memory,
// through the CUDA backend's pinned upload pool on a copy stream of its own (tensor/cuda/cuda_upload.h),
// one batch ahead, so that batch k+1 crosses the bus while step k computes. Internal to data/.
#pragma once

#include <memory>

#include "data/dataloader.h"

namespace mt::data::detail {

// A batch whose copy to the device may still be running: read it only after BatchTransfer::finish.
struct InFlightBatch {
  Batch batch;
  std::shared_ptr<void> copy;  // what finish() orders the compute stream after; null: nothing
};

class BatchTransfer {
 public:
  virtual ~BatchTransfer() = default;
  // Null when batches stay where they are built (opts.device is the CPU).
  static std::shared_ptr<BatchTransfer> for_options(const DataLoaderOptions& opts);

  // Starts moving `host` to the device; returns without waiting for the copy.
  virtual InFlightBatch start(const Batch& host) = 0;
  // The batch, safe to use from the compute stream (which waits for its copy; the host does not).
  virtual Batch finish(InFlightBatch in_flight) = 0;
  // Whether start() runs asynchronously, so the loader should start batch k+1 before handing out k.
  virtual bool overlaps() const = 0;
};

}  // namespace mt::data::detail
