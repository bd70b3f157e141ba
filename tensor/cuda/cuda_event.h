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

// Note [Polling an event]: asks whether `event` has been reached, without waiting. Returns
// cudaSuccess (reached), cudaErrorNotReady (still pending), or the error that stopped it (a sticky
// fault of an earlier kernel). The runtime keeps "not ready" as the calling thread's last error
// (Note [Not ready is a last error], tests/cuda_emu/emu_streams.cpp), and every launch check reads
// the last error (MT_CUDA_CHECK_LAUNCH), so a poll that left it there would make the next correct
// launch throw "device not ready". This clears it; every poll of an event goes through here.
cudaError_t query_event(cudaEvent_t event);

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
  // True when the recorded work has finished (or nothing was recorded); throws on a CUDA error.
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
