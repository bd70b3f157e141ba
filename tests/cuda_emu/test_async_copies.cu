// Asynchronous pinned copies (Note [Pinned copies] in tensor/cuda/cuda_allocator.cpp), which need
// the GPU to be slow on purpose: a kernel that sleeps holds the compute stream while the test checks
// that the host did not wait, and that the pinned block was not handed out again before the GPU
// read it. A sleeping kernel is host code, so this case exists only in the emulated build.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "minitrain.h"
#include "tensor/cuda/cuda_allocator.h"
#include "tensor/cuda/cuda_device.h"
#include "tensor/raw_ops.h"

namespace {
__global__ void sleep_kernel(int milliseconds) { std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds)); }
}  // namespace

TEST_CASE("pinned copies: host -> device does not wait for the stream, and the block is not reused under it") {
  using namespace mt;
  const Device gpu = cuda_device(0);
  cudaStream_t stream = cuda::current_stream(0);
  Tensor on_gpu;
  void* block = nullptr;
  {
    Tensor pinned = cuda::empty_pinned({1000});
    raw::fill_(pinned, 1.0);
    block = pinned.storage()->data();
    sleep_kernel<<<1, 1, 0, stream>>>(300);
    on_gpu = raw::to_device(pinned, gpu);
    CHECK(cudaStreamQuery(stream) == cudaErrorNotReady);  // the copy is queued behind the kernel
    (void)cudaGetLastError();  // which stays as the last error until cleared (Note [Not ready is a last error])
  }  // `pinned` is freed while its copy has not run
  Tensor next = cuda::empty_pinned({1000});
  CHECK(next.storage()->data() != block);  // its block stays out of the cache until the copy ran
  raw::fill_(next, 2.0);
  CHECK(on_gpu.to_vector<float>() == std::vector<float>(1000, 1.0f));
  // Device -> pinned host waits for the copy (the caller reads it next).
  Tensor back = cuda::empty_pinned({1000});
  sleep_kernel<<<1, 1, 0, stream>>>(100);
  backend(gpu).copy(back, on_gpu);
  CHECK(back.to_vector<float>() == std::vector<float>(1000, 1.0f));
}
