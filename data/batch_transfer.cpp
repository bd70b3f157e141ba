// BatchTransfer (data/detail/batch_transfer.h): Tensor::to for pageable batches, and in CUDA builds the
// pinned upload pool for pin_memory. A build without the CUDA backend has no CUDA device to copy to
// (Tensor::to then says so), and pin_memory has nothing to do there.
#include "data/detail/batch_transfer.h"

#if defined(MT_HAVE_CUDA) && MT_HAVE_CUDA
#include "tensor/cuda/cuda_upload.h"
#endif

namespace mt::data::detail {
namespace {

// Batches copied with Tensor::to: through the CUDA backend's staging buffers, the host memory read
// before the call returns (tensor/cuda/cuda_copy.cpp).
class CopyTransfer final : public BatchTransfer {
 public:
  explicit CopyTransfer(Device device) : device_(device) {}
  InFlightBatch start(const Batch& host) override { return {{host.input.to(device_), host.target.to(device_)}, nullptr}; }
  Batch finish(InFlightBatch in_flight) override { return std::move(in_flight.batch); }
  bool overlaps() const override { return false; }

 private:
  Device device_;
};

#if defined(MT_HAVE_CUDA) && MT_HAVE_CUDA
// pin_memory: input and target share one pinned buffer of the pool and one copy event.
class PinnedTransfer final : public BatchTransfer {
 public:
  PinnedTransfer(Device device, int buffers) : pool_(device.index, buffers) {}
  InFlightBatch start(const Batch& host) override {
    auto up = std::make_shared<cuda::UploadPool::Upload>(pool_.start({host.input, host.target}));
    return {{}, std::move(up)};
  }
  Batch finish(InFlightBatch in_flight) override {
    std::vector<Tensor> t = static_cast<cuda::UploadPool::Upload*>(in_flight.copy.get())->finish();
    return {t[0], t[1]};
  }
  bool overlaps() const override { return true; }

 private:
  cuda::UploadPool pool_;
};
#endif

}  // namespace

std::shared_ptr<BatchTransfer> BatchTransfer::for_options(const DataLoaderOptions& opts) {
  if (!opts.device.is_cuda()) return nullptr;
#if defined(MT_HAVE_CUDA) && MT_HAVE_CUDA
  if (opts.pin_memory) return std::make_shared<PinnedTransfer>(opts.device, opts.pinned_buffers);
#endif
  return std::make_shared<CopyTransfer>(opts.device);
}

}  // namespace mt::data::detail
