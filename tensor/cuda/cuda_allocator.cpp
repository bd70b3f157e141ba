// The CUDA caching allocator and the pinned host allocator: BlockCache (tensor/caching_allocator.cpp)
// for the bookkeeping, plus the raw calls that get memory from the driver. This file only adapts
// BlockCache to mt::Allocator; the rules are in Note [Caching allocator].
//
// The allocators are made on first use and never destroyed: a tensor at namespace scope may be freed
// during exit after this file's statics would be gone, and cudaFree after the runtime has shut down
// fails. The driver reclaims everything at process exit anyway.
#include "tensor/cuda/cuda_allocator.h"

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_event.h"

namespace mt::cuda {
namespace {

class DeviceAllocator final : public Allocator {
 public:
  explicit DeviceAllocator(int device)
      : device_(device),
        cache_(
            [device](size_t bytes) -> void* {
              DeviceGuard guard(device);
              void* ptr = nullptr;
              const cudaError_t status = cudaMalloc(&ptr, bytes);
              if (status == cudaErrorMemoryAllocation) {
                (void)cudaGetLastError();  // out of memory is recoverable: BlockCache frees and retries
                return nullptr;
              }
              // Anything else (a sticky error of a crashed kernel) is not out of memory, and is
              // reported as itself (Note [Only out of memory is retried], caching_allocator.cpp).
              if (status != cudaSuccess)
                MT_FAIL("CUDA error in cudaMalloc of ", bytes, " bytes on cuda:", device, ": ",
                        cudaGetErrorString(status));
              return ptr;
            },
            [device](void* ptr, size_t) {
              DeviceGuard guard(device);
              MT_CUDA_CHECK(cudaFree(ptr));
            },
            "cuda:" + std::to_string(device)) {}

  // Every block belongs to the compute stream: see the header.
  void* allocate(size_t nbytes) override {
    return cache_.allocate(nbytes, reinterpret_cast<BlockCache::StreamId>(current_stream(device_)));
  }
  void deallocate(void* ptr, size_t) override { cache_.deallocate(ptr); }
  BlockCache& cache() { return cache_; }

 private:
  int device_;
  BlockCache cache_;
};

DeviceAllocator& allocator_of(int device) {
  static std::once_flag once;
  static DeviceAllocator** allocators = nullptr;
  static int count = 0;
  std::call_once(once, [] {
    count = device_count();
    allocators = new DeviceAllocator*[count > 0 ? count : 1]();
    for (int d = 0; d < count; ++d) allocators[d] = new DeviceAllocator(d);
  });
  MT_CHECK(device >= 0 && device < count, "cuda:", device, " does not exist: this process sees ", count,
           " CUDA device(s)");
  return *allocators[device];
}

// Note [Pinned copies]: a copy from pinned memory to a GPU is queued and left running
// (cuda_copy.cpp); the host does not wait. The block it reads must then not be handed out again
// before the copy has read it, so each such copy records an event on its stream here, and a block
// freed while one of its events is pending waits in `deferred_` until they all completed: the
// allocator checks them (cudaEventQuery, no waiting) whenever it is asked for memory. A block that is
// never freed only has its finished events dropped. This is what PyTorch's CachingHostAllocator
// does with record_stream.
class PinnedAllocator final : public Allocator {
 public:
  PinnedAllocator()
      : cache_(
            [](size_t bytes) -> void* {
              void* ptr = nullptr;
              // Portable: usable for copies to and from every device, not just the current one.
              const cudaError_t status = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
              if (status == cudaErrorMemoryAllocation) {
                (void)cudaGetLastError();
                return nullptr;
              }
              MT_CUDA_CHECK(status);
              return ptr;
            },
            [](void* ptr, size_t) { MT_CUDA_CHECK(cudaFreeHost(ptr)); }, "pinned host memory") {}

  // Host memory has no stream of its own: blocks are shared by all, and Note [Pinned copies] keeps
  // a block out of the cache while a copy may still read it.
  void* allocate(size_t nbytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_finished();
    return cache_.allocate(nbytes, 0);
  }
  void deallocate(void* ptr, size_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pending_.find(ptr);
    if (it != pending_.end()) drop_finished(it->second);
    if (it == pending_.end() || it->second.empty()) {
      if (it != pending_.end()) pending_.erase(it);
      cache_.deallocate(ptr);
      return;
    }
    deferred_.push_back(ptr);
  }
  bool record_use(void* block, int device, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!cache_.owns(block)) return false;
    auto& events = pending_[block];
    drop_finished(events);
    events.push_back(std::make_unique<Event>(device));
    events.back()->record(stream);
    return true;
  }
  BlockCache& cache() { return cache_; }

 private:
  using Events = std::vector<std::unique_ptr<Event>>;
  static void drop_finished(Events& events) {
    std::erase_if(events, [](const std::unique_ptr<Event>& e) { return e->query(); });
  }
  // Returns deferred blocks whose copies have all finished to the cache.
  void release_finished() {
    std::erase_if(deferred_, [&](void* ptr) {
      auto it = pending_.find(ptr);
      drop_finished(it->second);
      if (!it->second.empty()) return false;
      pending_.erase(it);
      cache_.deallocate(ptr);
      return true;
    });
  }

  std::mutex mutex_;
  BlockCache cache_;
  std::unordered_map<void*, Events> pending_;  // blocks with copies that may still be in flight
  std::vector<void*> deferred_;               // freed blocks waiting for theirs
};

PinnedAllocator& pinned() {
  static PinnedAllocator* allocator = new PinnedAllocator;
  return *allocator;
}

}  // namespace

Allocator& device_allocator(int device) { return allocator_of(device); }
CacheStats memory_stats(int device) { return allocator_of(device).cache().stats(); }
void set_memory_limit(int device, size_t bytes) { allocator_of(device).cache().set_limit(bytes); }
void empty_cache(int device) {
  // cudaFree waits for the device anyway; syncing first also surfaces kernel errors here, at the
  // call that caused the wait, rather than inside the allocator.
  synchronize(device);
  allocator_of(device).cache().empty_cache();
}

Allocator& pinned_allocator() { return pinned(); }
bool record_pinned_use(void* block, int device, cudaStream_t stream) { return pinned().record_use(block, device, stream); }
CacheStats pinned_memory_stats() { return pinned().cache().stats(); }

bool is_pinned(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

Tensor empty_pinned(const Shape& shape, DType dtype) {
  for (int64_t s : shape) MT_CHECK(s >= 0, "empty_pinned: negative size in shape ", shape);
  auto impl = std::make_shared<TensorImpl>();
  const size_t nbytes = static_cast<size_t>(shape.numel()) * element_size(dtype);
  impl->storage = std::make_shared<Storage>(nbytes, kCPU, pinned_allocator());
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

}  // namespace mt::cuda
