// What the pieces of the CUDA emulator share (emu_runtime.cpp, emu_kernel.cpp, emu_cublas.cpp): the
// stream queues, the per-thread last error and the sticky context error, device memory bookkeeping. Not seen by emulated code.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>

namespace mt_emu {

// Queues `task` on `stream` (nullptr: the current device's default stream); tasks of one stream run
// in order on that stream's worker thread.
void enqueue(cudaStream_t stream, std::function<void()> task);
// The device a stream belongs to (its current device at creation).
int stream_device(cudaStream_t stream);
// Waits until `stream` (nullptr: the current device's default stream), or every stream, is idle.
void wait_stream(cudaStream_t stream);
void wait_all_streams();
// The poisoned context's error (fail_context), cudaSuccess while there is none.
cudaError_t context_error();
int current_device_index();
const cudaDeviceProp& device_properties(int device);

// A kernel fault: from now on every runtime call returns `error` (as a GPU context is lost after an
// illegal address), and cudaGetErrorString says `detail`.
void fail_context(cudaError_t error, const std::string& detail);
// Sets the calling thread's last error (cudaGetLastError) without poisoning the context.
cudaError_t set_last_error(cudaError_t error, const std::string& detail);
// The same without a detail or a line on stderr: for cudaErrorNotReady, which a poll meets thousands
// of times (Note [Not ready is a last error], emu_streams.cpp).
cudaError_t record_last_error(cudaError_t error);
// Counts one accepted launch of `name` (a kernel without template arguments, or a cuBLAS call) for
// launch_count() (include/emu_kernel.h); true the first time.
bool count_launch(const std::string& name);

// True when [ptr, ptr + bytes) lies inside one device allocation.
bool is_device_range(const void* ptr, size_t bytes);

// Runs one grid (emu_kernel.cpp); returns "" or what went wrong.
std::string run_grid(Launch::AnyBody& body, const char* kernel, const char* file, int line, dim3 grid, dim3 block);

}  // namespace mt_emu
