// The CUDA runtime's two kinds of error state, as the emulator models them (Note [Last error and
// sticky errors], emu_runtime.cpp): the per-thread last error that cudaGetLastError clears and
// cudaPeekAtLastError does not, "not ready" kept there by event and stream queries (Note [Not ready
// is a last error], emu_streams.cpp), and the sticky fault of a kernel, seen at the next
// synchronising call and never cleared. Then what depends on them: an event poll followed by a
// launch check (Note [Polling an event]) and the allocator's report of a sticky error (Note [Only
// out of memory is retried]). Translated like tensor/cuda/*.cu (translate_launches).
#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "tensor/check.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_event.h"
#include "tensor/tensor.h"

namespace {

__global__ void sleep_kernel(int milliseconds) { std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds)); }
__global__ void write_kernel(int* x) { *x = 1; }

// Thread 0 sleeps, then waits at a barrier thread 1 never reaches: a fault `milliseconds` after the
// kernel starts, long after its launch returned.
__global__ void late_fault_kernel(int milliseconds) {
  if (threadIdx.x == 0) std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
  if (threadIdx.x == 1) return;
  __syncthreads();
}

// What a launch check throws, or "" (MT_CUDA_CHECK_LAUNCH reads the last error, cuda_check.h).
std::string launch_check_error() {
  try {
    MT_CUDA_CHECK_LAUNCH();
  } catch (const mt::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("last error: a failing call sets it for its own thread; cudaGetLastError clears it, cudaPeekAtLastError does not") {
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(cudaSetDevice(99) == cudaErrorInvalidDevice);
  int* x = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&x), sizeof(int)) == cudaSuccess);  // a success clears nothing
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidDevice);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidDevice);
  std::thread([] { CHECK(cudaPeekAtLastError() == cudaSuccess); }).join();  // another thread's is its own
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaFree(x) == cudaSuccess);
}

TEST_CASE("last error: 'not ready' from cudaEventQuery and cudaStreamQuery stays as the last error until cleared") {
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t done;
  REQUIRE(cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess);
  sleep_kernel<<<1, 1, 0, stream>>>(200);
  REQUIRE(cudaEventRecord(done, stream) == cudaSuccess);

  REQUIRE(cudaEventQuery(done) == cudaErrorNotReady);
  CHECK(cudaPeekAtLastError() == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaStreamQuery(stream) == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaErrorNotReady);

  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(cudaEventQuery(done) == cudaSuccess);
  CHECK(cudaStreamQuery(stream) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaEventDestroy(done) == cudaSuccess);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("sticky error: a kernel fault surfaces at the next synchronising call, whichever it is") {
  int host = 0;
  int* x = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&x), sizeof(int)) == cudaSuccess);
  cudaEvent_t after;
  REQUIRE(cudaEventCreateWithFlags(&after, cudaEventDisableTiming) == cudaSuccess);
  const std::function<cudaError_t()> synchronising_calls[] = {
      [] { return cudaStreamSynchronize(nullptr); },
      [] { return cudaDeviceSynchronize(); },
      [&] { return cudaEventSynchronize(after); },
      [&] { return cudaMemcpy(&host, x, sizeof(int), cudaMemcpyDeviceToHost); },
  };
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    late_fault_kernel<<<1, 2>>>(200);
    // The launch is fine and the kernel has not faulted yet: calls made now succeed.
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(cudaEventRecord(after, nullptr) == cudaSuccess);
    CHECK(cudaMemsetAsync(x, 0, sizeof(int), nullptr) == cudaSuccess);
    // The synchronising call waits for the kernel, and returns its fault.
    CHECK(synchronising_calls[i]() == cudaErrorLaunchFailure);
    mt_emu::reset_context();
  }
  CHECK(cudaEventDestroy(after) == cudaSuccess);
  CHECK(cudaFree(x) == cudaSuccess);
}

TEST_CASE("sticky error: after a kernel fault every call returns it, on every thread, and nothing clears it") {
  int* x = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&x), sizeof(int)) == cudaSuccess);
  cudaEvent_t event;
  REQUIRE(cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess);
  late_fault_kernel<<<1, 2>>>(0);
  REQUIRE(cudaDeviceSynchronize() == cudaErrorLaunchFailure);

  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);  // not cleared
  CHECK(cudaPeekAtLastError() == cudaErrorLaunchFailure);
  void* more = nullptr;
  CHECK(cudaMalloc(&more, 16) == cudaErrorLaunchFailure);
  CHECK(cudaEventQuery(event) == cudaErrorLaunchFailure);
  CHECK(cudaStreamQuery(nullptr) == cudaErrorLaunchFailure);
  CHECK(cudaEventRecord(event, nullptr) == cudaErrorLaunchFailure);
  write_kernel<<<1, 1>>>(x);  // a correct launch is refused too
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  std::thread([] { CHECK(cudaGetLastError() == cudaErrorLaunchFailure); }).join();  // the context's, not the thread's
  CHECK(std::string(cudaGetErrorString(cudaErrorLaunchFailure)).find("late_fault_kernel") != std::string::npos);

  mt_emu::reset_context();  // the emulator's tests only: a GPU process cannot recover
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaEventDestroy(event) == cudaSuccess);
  CHECK(cudaFree(x) == cudaSuccess);
}

// Issue 35: NcclWork::gpu_done polled its done event with cudaEventQuery and left the "not ready"
// in place, so the next correct launch's check threw it. mt::cuda::query_event clears it.
TEST_CASE("polling an event: a 'not ready' left behind makes the next launch check throw; query_event leaves none") {
  int* x = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&x), sizeof(int)) == cudaSuccess);
  cudaEvent_t done;
  REQUIRE(cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess);

  sleep_kernel<<<1, 1>>>(200);
  REQUIRE(cudaEventRecord(done, nullptr) == cudaSuccess);
  REQUIRE(cudaEventQuery(done) == cudaErrorNotReady);  // the old poll
  write_kernel<<<1, 1>>>(x);                            // a correct launch
  CHECK(launch_check_error().find("device not ready") != std::string::npos);

  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  sleep_kernel<<<1, 1>>>(200);
  REQUIRE(cudaEventRecord(done, nullptr) == cudaSuccess);
  REQUIRE(mt::cuda::query_event(done) == cudaErrorNotReady);  // the poll as every caller now makes it
  write_kernel<<<1, 1>>>(x);
  CHECK(launch_check_error() == "");

  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(cudaEventDestroy(done) == cudaSuccess);
  CHECK(cudaFree(x) == cudaSuccess);
}

TEST_CASE("allocator: a sticky CUDA error is reported as itself, not as out of memory") {
  const mt::Device gpu(mt::DeviceType::CUDA, 0);
  (void)mt::empty({16}, {.device = gpu});  // the device's stream and allocator exist before the fault
  late_fault_kernel<<<1, 2>>>(0);
  REQUIRE(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
  std::string message;
  try {
    // 256 MiB: more than any segment cached by the cases before, so the allocator calls cudaMalloc.
    (void)mt::empty({int64_t{64} << 20}, {.device = gpu});
  } catch (const std::exception& e) {
    message = e.what();
  }
  mt_emu::reset_context();
  INFO(message);
  CHECK(message.find("unspecified launch failure") != std::string::npos);
  CHECK(message.find("cudaMalloc") != std::string::npos);
  CHECK(message.find("out of memory") == std::string::npos);
}
