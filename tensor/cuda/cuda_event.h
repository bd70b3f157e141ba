// Event: an RAII cudaEvent_t, the way one stream (or the host) waits for work queued on another
// without blocking anything else.
//
//   Event ready(device);
//   ready.record(current_stream(device));   // marks "everything queued so far" on the compute stream
//   ready.wait(comm_stream);                // comm stream waits for that point; the host does not
//
// Created without timing (cudaEventDisableTiming): cheaper to record and wait on, and timing is not
// what these events are for. Only compiled into CUDA builds.
#pragma once

#include <cuda_runtime.h>

namespace mt::cuda {

class Event {
 public:
  // An event on `device` (events belong to a device; record it only on that device's streams).
  explicit Event(int device);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(cudaStream_t stream);
  // Work queued on `stream` after this call starts only after the recorded point is reached.
  void wait(cudaStream_t stream) const;
  // True when the recorded work has finished (or nothing was recorded).
  bool query() const;
  // Blocks the host until the recorded work has finished.
  void synchronize() const;

  cudaEvent_t get() const { return event_; }
  int device() const { return device_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

}  // namespace mt::cuda
