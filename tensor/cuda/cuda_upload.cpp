// UploadPool (tensor/cuda/cuda_upload.h, Note [Upload pool]): pinned buffers filled round-robin,
// copies on a non-blocking stream, and the events that order them.
#include "tensor/cuda/cuda_upload.h"

#include <cstring>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_device.h"

namespace mt::cuda {
namespace {

// Tensors share one buffer, each at an offset rounded up to this (what cudaMalloc aligns to).
constexpr size_t kAlign = 256;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
size_t nbytes_of(const Tensor& t) { return static_cast<size_t>(t.numel()) * element_size(t.dtype()); }

}  // namespace

UploadPool::UploadPool(int device, int buffers) : device_(device), slots_(static_cast<size_t>(buffers)) {
  MT_CHECK(buffers >= 1, "UploadPool: needs at least one buffer, got ", buffers);
  DeviceGuard guard(device);
  // Non-blocking: the copy stream does not synchronise with the legacy default stream.
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

UploadPool::~UploadPool() {
  // No throwing from a destructor: errors here surface at the next synchronisation of the device.
  DeviceGuard guard(device_);
  (void)cudaStreamSynchronize(stream_);
  for (Slot& s : slots_)
    if (s.host != nullptr) (void)cudaFreeHost(s.host);
  (void)cudaStreamDestroy(stream_);
}

void UploadPool::reserve(Slot& slot, size_t bytes) {
  if (slot.capacity >= bytes) return;
  if (slot.host != nullptr) MT_CUDA_CHECK(cudaFreeHost(slot.host));  // its copy has finished (start())
  slot.host = nullptr;
  slot.capacity = 0;
  MT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&slot.host), bytes, cudaHostAllocPortable));
  slot.capacity = bytes;
}

UploadPool::Upload UploadPool::start(const std::vector<Tensor>& host) {
  for (const Tensor& t : host)
    MT_CHECK(t.defined() && t.device().is_cpu(), "UploadPool: expects CPU tensors, got one on ",
             t.defined() ? t.device() : kCPU);
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceGuard guard(device_);
  Slot& slot = slots_[next_];
  next_ = (next_ + 1) % slots_.size();
  if (slot.copied) slot.copied->synchronize();  // Note [Upload pool], 1: its last copy has read it
  size_t total = 0;
  for (const Tensor& t : host) total += aligned(nbytes_of(t));
  reserve(slot, total);

  Upload up;
  up.device_ = device_;
  Event made(device_);  // Note [Upload pool], 2: the copy waits for the compute stream's earlier work
  for (const Tensor& t : host) up.tensors_.push_back(empty(t.sizes(), {.dtype = t.dtype(), .device = cuda_device(device_)}));
  made.record(current_stream(device_));
  made.wait(stream_);
  size_t offset = 0;
  for (size_t i = 0; i < host.size(); ++i) {
    const Tensor src = host[i].contiguous();
    const size_t bytes = nbytes_of(src);
    if (bytes > 0) {
      std::memcpy(slot.host + offset, src.raw_data(), bytes);
      MT_CUDA_CHECK(cudaMemcpyAsync(up.tensors_[i].raw_data(), slot.host + offset, bytes, cudaMemcpyHostToDevice, stream_));
    }
    offset += aligned(bytes);
  }
  up.copied_ = std::make_shared<Event>(device_);
  up.copied_->record(stream_);
  slot.copied = up.copied_;
  return up;
}

UploadPool::Upload& UploadPool::Upload::operator=(Upload&& other) {
  if (this != &other) {
    wait_on_compute();
    tensors_ = std::move(other.tensors_);
    copied_ = std::move(other.copied_);
    device_ = other.device_;
  }
  return *this;
}

UploadPool::Upload::~Upload() {
  try {
    wait_on_compute();
  } catch (...) {  // a lost device: nothing to order any more, and destructors must not throw
  }
}

void UploadPool::Upload::wait_on_compute() {
  if (!copied_) return;
  copied_->wait(current_stream(device_));
  copied_.reset();
}

std::vector<Tensor> UploadPool::Upload::finish() {
  MT_CHECK(copied_ != nullptr, "UploadPool::Upload::finish: nothing in flight (finished already, or empty)");
  wait_on_compute();
  return std::move(tensors_);
}

bool UploadPool::Upload::arrived() const { return !copied_ || copied_->query(); }

}  // namespace mt::cuda
