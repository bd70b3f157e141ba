// The CUDA emulator's streams and events (include/cuda_runtime.h):
//   - a stream is an ordered queue with one worker thread; kernels, copies and event records run
//     there, later than the call that queued them, so a missing synchronisation shows up as a
//     wrong result here as on a GPU. Each device has a default stream (nullptr), made on first use,
//     ordered like any other stream (the legacy default stream's implicit synchronisation with
//     other streams is not emulated: the backend never relies on it);
//   - events are generations: a record bumps the count to wait for, its task marks it reached;
//     cudaStreamWaitEvent waits for the record made before the call, cudaEventSynchronize too.
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "emu_internal.h"

struct CUstream_st {
  int device = 0;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> queue;
  bool busy = false, stop = false;
  std::thread worker;

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      std::function<void()> task = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      task();
      lock.lock();
      busy = false;
      changed.notify_all();
    }
  }
  void push(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mutex);
    queue.push_back(std::move(task));
    changed.notify_all();
  }
  void drain() {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return queue.empty() && !busy; });
  }
  bool idle() {
    std::lock_guard<std::mutex> lock(mutex);
    return queue.empty() && !busy;
  }
};

struct CUevent_st {
  int device = 0;
  std::mutex mutex;
  std::condition_variable reached_cv;
  uint64_t recorded = 0, reached = 0;  // generations: records made, records the stream has passed

  void reach(uint64_t generation) {
    std::lock_guard<std::mutex> lock(mutex);
    if (generation > reached) reached = generation;
    reached_cv.notify_all();
  }
  void wait_for(uint64_t generation) {
    std::unique_lock<std::mutex> lock(mutex);
    reached_cv.wait(lock, [&] { return reached >= generation; });
  }
};

namespace mt_emu {
namespace {

struct Streams {
  std::mutex mutex;
  std::vector<cudaStream_t> live;              // for cudaFree's device-wide wait
  std::map<int, cudaStream_t> default_stream;  // per device
};
Streams& streams() {
  static auto* s = new Streams;  // never destroyed: workers may still run during exit
  return *s;
}

cudaStream_t make_stream(int device) {
  auto* s = new CUstream_st;
  s->device = device;
  s->worker = std::thread([s] { s->run(); });
  std::lock_guard<std::mutex> lock(streams().mutex);
  streams().live.push_back(s);
  return s;
}

cudaStream_t resolve(cudaStream_t stream) {
  if (stream != nullptr) return stream;
  const int device = current_device_index();
  {
    std::lock_guard<std::mutex> lock(streams().mutex);
    const auto it = streams().default_stream.find(device);
    if (it != streams().default_stream.end()) return it->second;
  }
  cudaStream_t s = make_stream(device);
  std::lock_guard<std::mutex> lock(streams().mutex);
  return streams().default_stream.emplace(device, s).first->second;  // another thread may have won
}

cudaError_t fail(cudaError_t error, const std::string& detail) { return set_last_error(error, detail); }

}  // namespace

void enqueue(cudaStream_t stream, std::function<void()> task) { resolve(stream)->push(std::move(task)); }
int stream_device(cudaStream_t stream) { return resolve(stream)->device; }
void wait_stream(cudaStream_t stream) { resolve(stream)->drain(); }
void wait_all_streams() {
  std::vector<cudaStream_t> all;
  {
    std::lock_guard<std::mutex> lock(streams().mutex);
    all = streams().live;
  }
  for (cudaStream_t s : all) s->drain();
}

}  // namespace mt_emu

using namespace mt_emu;

#define MT_EMU_STICKY()                                            \
  do {                                                             \
    if (const cudaError_t s_ = context_error(); s_ != cudaSuccess) \
      return s_;                                                   \
  } while (0)

cudaError_t cudaDeviceSynchronize() {
  wait_all_streams();
  MT_EMU_STICKY();
  return cudaSuccess;
}
// ---- streams and events -------------------------------------------------------------------------------
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  MT_EMU_STICKY();
  *stream = make_stream(current_device_index());
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(nullptr)");
  stream->drain();  // the work queued before destruction still runs, as on a GPU
  {
    std::lock_guard<std::mutex> lock(streams().mutex);
    std::erase(streams().live, stream);
  }
  {
    std::lock_guard<std::mutex> lock(stream->mutex);
    stream->stop = true;
    stream->changed.notify_all();
  }
  stream->worker.join();
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  resolve(stream)->drain();
  MT_EMU_STICKY();
  return cudaSuccess;
}
// Note [Not ready is a last error]: cudaStreamQuery and cudaEventQuery answer cudaErrorNotReady
// while work is pending. The CUDA Runtime API reference describes that value as a result rather
// than a failure (cudaError enum, cudaErrorNotReady), yet does not exempt it from cudaGetLastError,
// which returns the last error of any runtime call made by the thread; and issue 35 reports
// it kept in practice: ProcessGroupNCCL's poll of its done event turned into a "device not ready"
// thrown by the next launch check. So the emulator keeps it as the thread's last error too, and a
// poller must clear it: mt::cuda::query_event (tensor/cuda/cuda_event.h) does.
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  MT_EMU_STICKY();
  return resolve(stream)->idle() ? cudaSuccess : record_last_error(cudaErrorNotReady);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  MT_EMU_STICKY();
  *event = new CUevent_st;
  (*event)->device = current_device_index();
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  // Not freed: a stream may still hold a record or a wait on it, which CUDA allows after destroy.
  // An event is a few dozen bytes; the tests make a few thousand at most.
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  MT_EMU_STICKY();
  cudaStream_t s = resolve(stream);
  if (s->device != event->device)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: the event belongs to device " +
                std::to_string(event->device) + ", the stream to device " + std::to_string(s->device));
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    generation = ++event->recorded;
  }
  s->push([event, generation] { event->reach(generation); });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  MT_EMU_STICKY();
  std::lock_guard<std::mutex> lock(event->mutex);
  // Note [Not ready is a last error]
  return event->reached >= event->recorded ? cudaSuccess : record_last_error(cudaErrorNotReady);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    target = event->recorded;
  }
  event->wait_for(target);
  MT_EMU_STICKY();
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  MT_EMU_STICKY();
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    target = event->recorded;  // the record made before this call, not later ones
  }
  resolve(stream)->push([event, target] { event->wait_for(target); });
  return cudaSuccess;
}
