// Memory for CUDA tensors and page-locked host memory, both through BlockCache
// (tensor/caching_allocator.h, Note [Caching allocator]): a training loop in steady state calls
// neither cudaMalloc nor cudaHostAlloc.
//
//   CacheStats s = memory_stats(0);   // bytes in use / reserved, cudaMalloc calls, cache hits, peak
//   empty_cache(0);                   // gives cached, unused segments back to the driver
//   Tensor staging = empty_pinned({B, 784});   // a CPU tensor in page-locked memory
//
// Device blocks are tied to the device's compute stream (current_stream), the only stream the
// backend queues work on. Code that uses a tensor on another stream (ProcessGroupNCCL's comm
// stream) must keep the tensor alive until that stream's work is done, or order the compute stream
// after it with an Event, before the tensor is freed. Only compiled into CUDA builds.
#pragma once

#include <cuda_runtime.h>

#include "tensor/caching_allocator.h"
#include "tensor/tensor.h"

namespace mt::cuda {

// The allocator of cuda:`device` (what Backend::allocator() returns for that device).
Allocator& device_allocator(int device);
CacheStats memory_stats(int device);
void empty_cache(int device);
// Note [Memory limit] (tensor/memory.h): caps the bytes cuda:`device`'s tensors hold; 0: no cap.
void set_memory_limit(int device, size_t bytes);

// Page-locked (pinned) host memory: copies from and to it skip the driver's own staging copy and can
// run at full bus speed. Tensors made with it are ordinary CPU tensors (device kCPU).
Allocator& pinned_allocator();
CacheStats pinned_memory_stats();
// True when ptr points into page-locked host memory (ours or anyone's cudaHostAlloc/Register).
bool is_pinned(const void* ptr);
// Tells the pinned allocator that work queued on `stream` so far reads or writes `block` (the data()
// of a Storage from pinned_allocator()): the block is not handed out again until that work is done
// (Note [Pinned copies] in cuda_allocator.cpp). False when `block` is not from pinned_allocator(),
// whose owner must then wait for the work itself.
bool record_pinned_use(void* block, int device, cudaStream_t stream);
// A contiguous CPU tensor whose storage comes from pinned_allocator(). (TensorOptions has no
// "pinned" field; this is the one factory that makes such tensors.)
Tensor empty_pinned(const Shape& shape, DType dtype = kFloat32);

}  // namespace mt::cuda
