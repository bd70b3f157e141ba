// Event (tensor/cuda/cuda_event.h).
#include "tensor/cuda/cuda_event.h"

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_device.h"

namespace mt::cuda {

Event::Event(int device) : device_(device) {
  DeviceGuard guard(device);
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}

Event::~Event() {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);  // no throwing from a destructor
}

void Event::record(cudaStream_t stream) {
  DeviceGuard guard(device_);
  MT_CUDA_CHECK(cudaEventRecord(event_, stream));
}

void Event::wait(cudaStream_t stream) const { MT_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0)); }

cudaError_t query_event(cudaEvent_t event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) (void)cudaGetLastError();  // an answer, not an error to keep around
  return status;
}

bool Event::query() const {
  const cudaError_t status = query_event(event_);
  if (status == cudaErrorNotReady) return false;
  MT_CUDA_CHECK(status);
  return true;
}

void Event::synchronize() const { MT_CUDA_CHECK(cudaEventSynchronize(event_)); }

}  // namespace mt::cuda
