// UploadPool: host tensors copied to a GPU asynchronously, through a small pool of pinned host
// buffers and a copy stream of its own, so that a batch's transfer runs while the compute stream is
// busy with the previous step. What the DataLoader uses with pin_memory (data/batch_transfer.cpp).
//
//   UploadPool pool(0);                                   // cuda:0, two pinned buffers
//   UploadPool::Upload next = pool.start({x, y});         // x, y: dense CPU tensors; returns at once
//   ... queue the current step's kernels ...
//   std::vector<Tensor> on_gpu = next.finish();           // compute stream waits for this copy only
//
// Note [Upload pool]: three orderings make it safe, each an event, none a host wait on the GPU's work:
//   1. A buffer is refilled only after its previous copy has finished: start() waits on the host for
//      that buffer's copy event (with two buffers, the copy of two batches ago: long done, normally).
//   2. The copy stream waits for an event recorded on the compute stream when the device tensors are
//      made: their blocks come from the caching allocator, which ties blocks to the compute stream
//      and may hand out memory that kernels queued earlier there still read (Note [Caching
//      allocator]). So the copy of batch k+1, started before step k is queued, overlaps step k.
//   3. finish() makes the compute stream wait for the copy's event: kernels queued after it see the
//      data. An Upload dropped without finish() does the same in its destructor, so its tensors'
//      blocks never return to the allocator while the copy may still write them.
// Not here: device -> host copies, tensors that are not dense, several devices per pool.
// Only compiled into CUDA builds.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "tensor/cuda/cuda_event.h"
#include "tensor/tensor.h"

namespace mt::cuda {

class UploadPool {
 public:
  explicit UploadPool(int device, int buffers = 2);
  ~UploadPool();  // waits for the copies in flight, then frees the buffers and the stream
  UploadPool(const UploadPool&) = delete;
  UploadPool& operator=(const UploadPool&) = delete;

  // Tensors on the device whose contents arrive with one copy in flight.
  class Upload {
   public:
    Upload() = default;
    Upload(Upload&&) = default;
    Upload& operator=(Upload&& other);
    ~Upload();  // an unfinished upload is finished here (Note [Upload pool], 3)
    // The compute stream waits for the copy (the host does not); returns the device tensors.
    std::vector<Tensor> finish();
    bool arrived() const;  // the copy has finished (a query, for tests)

   private:
    friend class UploadPool;
    void wait_on_compute();
    std::vector<Tensor> tensors_;
    std::shared_ptr<Event> copied_;  // recorded on the copy stream after the copy
    int device_ = -1;
  };

  // Packs the dense CPU tensors `host` into the next pinned buffer (after its previous copy finished)
  // and queues their copy to the device on the copy stream. Returns at once; `host` may be reused.
  Upload start(const std::vector<Tensor>& host);

  int device() const { return device_; }
  int buffers() const { return static_cast<int>(slots_.size()); }
  cudaStream_t copy_stream() const { return stream_; }
  // The pinned buffer of each slot, for tests: a buffer's address is reused across starts.
  const void* buffer(int slot) const { return slots_[slot].host; }

 private:
  struct Slot {
    char* host = nullptr;  // cudaHostAlloc'd
    size_t capacity = 0;
    std::shared_ptr<Event> copied;  // the last copy out of this buffer
  };
  void reserve(Slot& slot, size_t bytes);

  int device_;
  cudaStream_t stream_ = nullptr;
  std::mutex mutex_;  // one start() at a time
  std::vector<Slot> slots_;
  size_t next_ = 0;  // the slot the next start() fills
};

}  // namespace mt::cuda
