// CudaBackend::copy: moving elements between host and device, and between two devices. Copies
// within one device (with casts and strides) are kernels, in cuda_copy.cu.
//
// Every transfer moves one dense block of bytes in the destination's dtype: a strided or
// differently-typed source is first packed on its own side (the CPU casts host data, the GPU casts
// device data), and a strided destination is filled from a dense temporary on its side.
//
// Host memory, pageable or pinned:
//   host -> device   pageable memory goes through two pinned staging buffers per device (4 MiB
//                    chunks, alternating, each guarded by an event): the host copies a chunk into
//                    pinned memory and queues cudaMemcpyAsync; it returns once the last chunk is
//                    queued. The caller's host memory has been read by then, so it may be reused at
//                    once, while the GPU work stays asynchronous.
//   device -> host   chunks are queued into the staging buffers and copied out as each arrives; it
//                    returns when all bytes are in host memory (the caller is about to read them).
//   pinned memory    (cuda::empty_pinned, is_pinned) skips the staging: one cudaMemcpyAsync.
//                    host -> device returns at once: the copy's event keeps the block from being
//                    reused before the GPU has read it (Note [Pinned copies], cuda_allocator.cpp),
//                    so the source must not be written until then (free it, or synchronize).
//                    device -> host waits for an event recorded right after the copy (the caller
//                    is about to read the bytes), not for the whole stream.
// Copies to the host are a synchronisation point: they also report kernel errors (Note [Device errors]).
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>

#include "tensor/cuda/cuda_allocator.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_error.h"
#include "tensor/cuda/cuda_event.h"

namespace mt::cuda {
namespace {

constexpr size_t kStagingChunk = size_t{4} << 20;

// Two pinned chunks and the events that say when the GPU is done with each.
struct Staging {
  std::mutex mutex;  // one transfer at a time per device uses the buffers
  char* buffer[2] = {nullptr, nullptr};
  std::unique_ptr<Event> done[2];
};

Staging& staging(int device) {
  struct Slot {
    std::once_flag once;
    Staging staging;
  };
  static const int count = device_count();
  static Slot* slots = new Slot[count > 0 ? count : 1];  // never freed: see cuda_allocator.cpp
  Slot& slot = slots[device];
  std::call_once(slot.once, [&] {
    for (int b = 0; b < 2; ++b) {
      MT_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&slot.staging.buffer[b]), kStagingChunk,
                                  cudaHostAllocPortable));
      slot.staging.done[b] = std::make_unique<Event>(device);
    }
  });
  return slot.staging;
}

// device <- host, nbytes of dense data; host_block is the data() of the source's Storage.
void upload(void* device_dst, const void* host_src, void* host_block, size_t nbytes, int device, cudaStream_t stream) {
  if (is_pinned(host_src)) {
    MT_CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, nbytes, cudaMemcpyHostToDevice, stream));
    if (!record_pinned_use(host_block, device, stream)) {  // someone else's pinned memory: wait for the copy
      Event copied(device);
      copied.record(stream);
      copied.synchronize();
    }
    return;
  }
  Staging& s = staging(device);
  std::lock_guard<std::mutex> lock(s.mutex);
  const char* from = static_cast<const char*>(host_src);
  char* to = static_cast<char*>(device_dst);
  for (size_t done = 0, chunk = 0; done < nbytes; done += kStagingChunk, ++chunk) {
    const int b = static_cast<int>(chunk % 2);
    const size_t len = std::min(kStagingChunk, nbytes - done);
    s.done[b]->synchronize();  // the GPU has finished reading this buffer's previous chunk
    std::memcpy(s.buffer[b], from + done, len);
    MT_CUDA_CHECK(cudaMemcpyAsync(to + done, s.buffer[b], len, cudaMemcpyHostToDevice, stream));
    s.done[b]->record(stream);
  }
}

// host <- device, nbytes of dense data; returns when the bytes are in host memory.
void download(void* host_dst, const void* device_src, size_t nbytes, int device, cudaStream_t stream) {
  if (is_pinned(host_dst)) {
    MT_CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, nbytes, cudaMemcpyDeviceToHost, stream));
    Event copied(device);  // the copy and the work before it; not what other threads queue later
    copied.record(stream);
    copied.synchronize();
    return;
  }
  Staging& s = staging(device);
  std::lock_guard<std::mutex> lock(s.mutex);
  const char* from = static_cast<const char*>(device_src);
  char* to = static_cast<char*>(host_dst);
  // Chunk c is queued into buffer c % 2 while chunk c - 1, already queued, is being waited for and
  // copied out: the bus and the host memcpy overlap.
  size_t pending_offset = 0, pending_len = 0;
  int pending_buffer = -1;
  auto drain = [&] {
    if (pending_buffer < 0) return;
    s.done[pending_buffer]->synchronize();
    std::memcpy(to + pending_offset, s.buffer[pending_buffer], pending_len);
    pending_buffer = -1;
  };
  for (size_t done = 0, chunk = 0; done < nbytes; done += kStagingChunk, ++chunk) {
    const int b = static_cast<int>(chunk % 2);
    const size_t len = std::min(kStagingChunk, nbytes - done);
    s.done[b]->synchronize();  // an earlier upload may still be reading this buffer
    MT_CUDA_CHECK(cudaMemcpyAsync(s.buffer[b], from + done, len, cudaMemcpyDeviceToHost, stream));
    s.done[b]->record(stream);
    drain();
    pending_offset = done;
    pending_len = len;
    pending_buffer = b;
  }
  drain();
}

size_t nbytes_of(const Tensor& t) { return static_cast<size_t>(t.numel()) * element_size(t.dtype()); }

}  // namespace

void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
  MT_CHECK(dst.sizes() == src.sizes(), "copy: shapes differ: ", dst.sizes(), " and ", src.sizes());
  if (dst.numel() == 0) return;
  const bool dst_cuda = dst.device().is_cuda(), src_cuda = src.device().is_cuda();
  if (dst_cuda && src_cuda) {
    if (dst.device() == src.device()) {
      MT_CHECK(dst.device().index == device_, "copy: cuda:", device_, "'s backend got tensors on ", dst.device());
      copy_on_device(dst, src);
    } else {
      copy_from_peer(dst, src);
    }
  } else if (dst_cuda) {
    copy_from_host(dst, src);
  } else {
    MT_CHECK(src_cuda, "copy: the CUDA backend got two CPU tensors");
    copy_to_host(dst, src);
  }
}

void CudaBackend::copy_from_host(const Tensor& dst, const Tensor& src) {
  MT_CHECK(dst.device().index == device_, "copy: cuda:", device_, "'s backend asked to copy into ", dst.device());
  DeviceGuard guard(device_);
  Tensor host = src;
  if (src.dtype() != dst.dtype() || !is_dense(src)) {
    host = empty(src.sizes(), {.dtype = dst.dtype(), .device = kCPU});
    backend(kCPU).copy(host, src);
  }
  Tensor target = is_dense(dst) ? dst : empty(dst.sizes(), {.dtype = dst.dtype(), .device = dst.device()});
  upload(target.raw_data(), host.raw_data(), host.storage()->data(), nbytes_of(target), device_, stream_);
  if (!target.is_same(dst)) copy_on_device(dst, target);
}

void CudaBackend::copy_to_host(const Tensor& dst, const Tensor& src) {
  MT_CHECK(src.device().index == device_, "copy: cuda:", device_, "'s backend asked to copy from ", src.device());
  DeviceGuard guard(device_);
  Tensor packed = src;
  if (src.dtype() != dst.dtype() || !is_dense(src)) {
    packed = empty(src.sizes(), {.dtype = dst.dtype(), .device = src.device()});
    copy_on_device(packed, src);
  }
  Tensor host = is_dense(dst) ? dst : empty(dst.sizes(), {.dtype = dst.dtype(), .device = kCPU});
  download(host.raw_data(), packed.raw_data(), nbytes_of(host), device_, stream_);
  detail::check_device_errors();  // the stream is drained up to here: report what kernels found
  if (!host.is_same(dst)) backend(kCPU).copy(dst, host);
}

// Called on the destination's backend (raw::to_device asks the destination's device).
void CudaBackend::copy_from_peer(const Tensor& dst, const Tensor& src) {
  MT_CHECK(dst.device().index == device_, "copy: cuda:", device_, "'s backend asked to copy into ", dst.device());
  auto& src_backend = static_cast<CudaBackend&>(detail::backend_for_device(src.device().index));
  Tensor packed = src;
  if (src.dtype() != dst.dtype() || !is_dense(src)) {
    packed = empty(src.sizes(), {.dtype = dst.dtype(), .device = src.device()});
    src_backend.copy_on_device(packed, src);
  }
  DeviceGuard guard(device_);
  Tensor target = is_dense(dst) ? dst : empty(dst.sizes(), {.dtype = dst.dtype(), .device = dst.device()});
  // The copy runs on our stream, after everything queued so far on the source's stream.
  Event ready(src_backend.device());
  ready.record(src_backend.stream());
  ready.wait(stream_);
  MT_CUDA_CHECK(cudaMemcpyPeerAsync(target.raw_data(), device_, packed.raw_data(), src_backend.device(),
                                    nbytes_of(target), stream_));
  // src and packed belong to the source device's stream: once this function returns, their memory
  // may be recycled by work there, which is not ordered after our stream. Waiting here keeps the
  // rule of Note [Caching allocator]; cross-device copies are rare (moving a model), so it is cheap.
  MT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (!target.is_same(dst)) copy_on_device(dst, target);
}

}  // namespace mt::cuda
