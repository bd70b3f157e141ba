// ProcessGroupNCCL: setup through the Store, each collective queued on the comm stream behind an
// event, Works that keep their tensors alive, and the watchdog (see process_group_nccl.h). Compiled
// only into a library with NCCL; process_group_nccl_stub.cpp stands in elsewhere (CMakeLists.txt).
#include "distributed/process_group/nccl/process_group_nccl.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "distributed/process_group/nccl/detail/nccl_check.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_event.h"

namespace mt::dist {

namespace detail {

void nccl_settle(ncclComm_t comm, ncclResult_t result, const char* call, const char* file, int line,
                 Clock::time_point deadline) {
  while (result == ncclInProgress) {
    if (Clock::now() > deadline) {
      ::mt::detail::fail_with<TimeoutError>(file, line, "NCCL call ", call, " was still in progress at its "
                                            "deadline: a peer is missing or the network is unreachable");
    }
    std::this_thread::yield();
    // When the state itself cannot be read, that failure is the error to report: `result` still
    // says ncclInProgress, which is no error at all.
    const ncclResult_t asked = ncclCommGetAsyncError(comm, &result);
    if (asked != ncclSuccess)
      ::mt::detail::fail(file, line, "NCCL error in ", call, ": its progress could not be read: "
                         "ncclCommGetAsyncError failed with ", ncclGetErrorString(asked), " (",
                         ncclGetLastError(comm), ")");
  }
  if (result != ncclSuccess)
    ::mt::detail::fail(file, line, "NCCL error in ", call, ": ", ncclGetErrorString(result), " (",
                       ncclGetLastError(comm), ")");
}

}  // namespace detail

namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Int64: return ncclInt64;
    case DType::Float16: return ncclFloat16;  // fp16 gradient compression (DDP comm hooks)
    case DType::BFloat16: return ncclBfloat16;  // bf16 gradient compression (NCCL >= 2.10)
    default: MT_FAIL("ProcessGroupNCCL: dtype ", dtype, " is not supported");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  MT_FAIL("ProcessGroupNCCL: unknown reduce op");
}

}  // namespace

namespace detail {

// Note [NCCL Work::wait]: PyTorch's NCCL work.wait() does not block the host: it makes the current
// stream wait on the collective's event and returns, so an error that happens later is only seen
// by a watchdog. Here wait() BLOCKS THE HOST until the collective's "done" event has fired (or the
// group has failed, or `timeout` has passed), and throws if the collective failed. Why:
//   - Work's contract is one contract for every backend (work.h): after wait() returns, the result
//     is there and it is correct. A wait that returns before the result exists could not promise
//     "correct", and DDP's finalize relies on wait() throwing to refuse a step with bad gradients.
//   - It costs little where it is used. DDP waits once per step, after backward has queued all its
//     kernels; the GPU then idles only while the host queues the optimizer's first kernel (a few µs).
//     The training loop's loss.item() syncs every step anyway.
// Ordering is still by events: after the host has seen the done event, everything it queues next on
// the compute stream runs after the collective, with no cudaStreamWaitEvent needed.
class NcclWork : public Work {
 public:
  NcclWork(std::string description, std::chrono::milliseconds timeout, int device)
      : Work(std::move(description), timeout), issued_(Clock::now()), device_(device) {
    cuda::DeviceGuard guard(device_);
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    MT_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  }
  ~NcclWork() override {
    cudaEventDestroy(ready_);  // unchecked: a destructor must not throw, and a failed destroy leaks 2 events
    cudaEventDestroy(done_);
  }

  // The GPU has finished the collective (its done event fired), or the group failed. Never blocks.
  bool is_completed() const override { return failed() || gpu_done(); }

  void wait(std::chrono::milliseconds timeout) override {  // Note [NCCL Work::wait]
    const Clock::time_point deadline = Clock::now() + timeout;
    for (int spins = 0;; ++spins) {
      // Failure first: the watchdog marks a work failed BEFORE it aborts the communicator, and an
      // abort is what makes the done event of a hung collective fire.
      if (failed()) throw Error(error());
      if (gpu_done()) {
        if (failed()) throw Error(error());
        release();
        return;
      }
      if (Clock::now() > deadline)
        MT_FAIL_TIMEOUT(description(), " did not complete within ", format_ms(timeout), "; a peer may have died "
                        "or not issued the same collective (Note [Collective order])");
      // Spin briefly (a collective often ends within microseconds of the wait), then sleep in short
      // steps: no CPU core burnt for a long all-reduce.
      if (spins < 1000) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // The GPU has passed the done event. A CUDA error other than "not ready" (a sticky error from a
  // crashed kernel) counts as a failure. Called by wait(), the group's reaping and DDP's progress
  // between hooks, so it must leave no "not ready" behind as the thread's last error, or the next
  // kernel launch's check throws it (Note [Polling an event], tensor/cuda/cuda_event.h).
  bool gpu_done() const {
    const cudaError_t status = cuda::query_event(done_);
    if (status == cudaSuccess) return true;
    if (status != cudaErrorNotReady) {
      const_cast<NcclWork*>(this)->fail(description() + " failed on the GPU: " + cudaGetErrorString(status));
      return true;
    }
    return false;
  }
  bool failed() const { return failed_.load(); }
  std::string error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }
  // Marks the work failed (the watchdog, or a CUDA error); the first message wins.
  void fail(const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_.load()) return;
    error_ = message;
    failed_.store(true);
  }
  // Note [Tensors stay alive]: the caching allocator ties a freed block to the stream that used it
  // (the compute stream) and hands it out again for the next op on that stream. A tensor freed while
  // NCCL still reads or writes it on the comm stream would be reused under NCCL's feet. So the Work
  // holds a reference to every tensor of its collective (inputs, outputs, temporaries) until the host
  // has SEEN the done event (wait(), or the group's reaping before each new collective); only then
  // does the storage go back to the allocator. Tensors are only ever released on the thread that
  // issues collectives, never on the watchdog's, so the allocator is never entered from a second thread.
  void keep(const Tensor& t) { tensors_.push_back(t); }
  void release() { tensors_.clear(); }

  cudaEvent_t ready_ = nullptr;  // recorded on the compute stream: the inputs are ready
  cudaEvent_t done_ = nullptr;   // recorded on the comm stream: the collective has finished
  const Clock::time_point issued_;

 private:
  int device_;
  std::vector<Tensor> tensors_;
  mutable std::mutex mutex_;
  std::atomic<bool> failed_{false};
  std::string error_;
};

struct NcclComm {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t comm_stream = nullptr;
  std::chrono::milliseconds timeout{};
  std::chrono::milliseconds watchdog_interval{};
  std::string me;  // "rank 1 of 2"

  std::mutex comm_mutex;  // issuing a collective vs. the watchdog's error query and abort
  bool aborted = false;   // under comm_mutex

  std::mutex works_mutex;
  std::vector<std::shared_ptr<NcclWork>> in_flight;  // issued, done event not yet seen by the issuer
  std::string failure;   // the first failure; set once (Note [A failed collective poisons the queue])

  std::mutex stop_mutex;
  std::condition_variable stop_cv;
  bool stopping = false;
  std::thread watchdog;

  std::string failed_with() {
    std::lock_guard<std::mutex> lock(works_mutex);
    return failure;
  }

  // Note [NCCL watchdog]: NCCL collectives run on the GPU and cannot time out by themselves: a peer
  // that died leaves the others' kernels spinning forever, and every host wait behind them with them.
  // One thread per group looks, every watchdog_interval, at
  //   - ncclCommGetAsyncError: NCCL's own report of a failed connection or peer (ncclRemoteError...);
  //   - each collective in flight: its done event not fired `timeout` after it was issued.
  // On either it fails the group: every collective in flight is marked failed (with a message naming
  // it, "allreduce #7 (… float32, Sum) on rank 1 of 2 timed out after 30000 ms", or naming the first
  // failure), THEN the communicator is aborted (ncclCommAbort), which ends the hung kernels, so the
  // streams drain and every host wait returns with the error. Later collectives fail at once (Note
  // [A failed collective poisons the queue] in detail/collective_queue.h). The watchdog never calls exit(): the error
  // reaches the training loop through wait(), and mini_train turns it into one line and exit code 1.
  void watch() {
    cudaSetDevice(device);  // for cudaEventQuery; unchecked: the events say whether the device works
    std::unique_lock<std::mutex> stop_lock(stop_mutex);
    while (!stop_cv.wait_for(stop_lock, watchdog_interval, [&] { return stopping; })) {
      std::vector<std::shared_ptr<NcclWork>> works;
      {
        std::lock_guard<std::mutex> lock(works_mutex);
        if (!failure.empty()) continue;
        works = in_flight;
      }
      std::string why, culprit;
      {
        std::lock_guard<std::mutex> lock(comm_mutex);
        ncclResult_t async = ncclSuccess;
        if (!aborted && ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress)
          why = std::string("NCCL reported an asynchronous error on ") + me + ": " + ncclGetErrorString(async) +
                " (" + ncclGetLastError(comm) + "); did a peer exit?";
      }
      for (const auto& w : works) {
        if (!why.empty()) break;
        if (w->is_completed() || Clock::now() - w->issued_ <= timeout) continue;
        culprit = w->description();
        why = culprit + " timed out after " + format_ms(timeout) + ": a peer is dead or hung, or did not issue "
              "the same collective (Note [Collective order])";
      }
      if (!why.empty()) fail_group(why, works);
    }
  }

  void fail_group(const std::string& why, const std::vector<std::shared_ptr<NcclWork>>& works) {
    {
      std::lock_guard<std::mutex> lock(works_mutex);
      if (failure.empty()) failure = why;
    }
    for (const auto& w : works)
      if (!w->gpu_done()) w->fail(why.rfind(w->description(), 0) == 0 ? why + "; the NCCL communicator was aborted"
                                                                       : w->description() + " was aborted: " + why);
    std::lock_guard<std::mutex> lock(comm_mutex);
    if (!aborted) {
      ncclCommAbort(comm);  // unchecked: we are already failing, and abort is the last word
      aborted = true;
    }
  }

  // Drops the works whose done event the issuer has now seen, releasing their tensors on this (the
  // issuing) thread (Note [Tensors stay alive]).
  void reap() {
    std::lock_guard<std::mutex> lock(works_mutex);
    std::erase_if(in_flight, [](const std::shared_ptr<NcclWork>& w) {
      if (!w->gpu_done()) return false;
      w->release();
      return true;
    });
  }
};

}  // namespace detail

bool ProcessGroupNCCL::is_available() { return true; }

ProcessGroupNCCL::ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, ProcessGroupNCCLOptions opts)
    : ProcessGroup(rank, size, opts.timeout, Device(DeviceType::CUDA, opts.device)), store_(std::move(store)),
      nccl_(std::make_unique<detail::NcclComm>()) {
  MT_CHECK(store_ != nullptr, "ProcessGroupNCCL: no store to meet the other ranks through");
  detail::NcclComm& n = *nccl_;
  n.me = "rank " + std::to_string(rank) + " of " + std::to_string(size);
  const int devices = cuda::device_count();
  MT_CHECK(opts.device >= 0 && opts.device < devices, "ProcessGroupNCCL ", n.me, ": GPU ", opts.device,
           " does not exist; this process sees ", devices, " (check CUDA_VISIBLE_DEVICES and LOCAL_RANK)");
  n.device = opts.device;
  n.timeout = opts.timeout;
  n.watchdog_interval = opts.watchdog_interval;
  cuda::DeviceGuard guard(n.device);

  // Like Gloo's: a rank started with another WORLD_SIZE is refused before anyone waits for all.
  if (rank == 0) store_->set("world_size", std::to_string(size));
  const std::string rank0_size = store_->get_string("world_size");
  MT_CHECK(rank0_size == std::to_string(size), "ProcessGroupNCCL ", n.me, ": this rank was started with world "
           "size ", size, ", rank 0 with ", rank0_size);

  // The ncclUniqueId is the address of rank 0's NCCL bootstrap socket: rank 0 makes it, the store
  // carries it, every rank joins with it.
  ncclUniqueId id;
  if (rank == 0) {
    MT_NCCL_CHECK(ncclGetUniqueId(&id));
    store_->set("nccl_unique_id", Bytes(id.internal, id.internal + sizeof id.internal));
  }
  const Bytes shared = store_->get("nccl_unique_id", timeout());
  MT_CHECK(shared.size() == sizeof id.internal, "ProcessGroupNCCL ", n.me, ": the store holds a ",
           shared.size(), "-byte NCCL id; expected ", sizeof id.internal, " (another program's key?)");
  std::memcpy(id.internal, shared.data(), sizeof id.internal);
  // Names the ranks that never arrived, where NCCL's bootstrap could only time out.
  store_->barrier("nccl_arrived", rank, size, timeout());

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // Note [Non-blocking communicator]
  const Clock::time_point deadline = Clock::now() + timeout();
  try {
    MT_NCCL_CHECK_NONBLOCKING(ncclCommInitRankConfig(&n.comm, size, id, rank, &config), n.comm, deadline);
  } catch (const Error& e) {
    if (n.comm) ncclCommAbort(n.comm);
    MT_FAIL("ProcessGroupNCCL ", n.me, " on GPU ", n.device, ": creating the NCCL communicator failed: ", e.what());
  }
  // One stream per group for its collectives (Note [Comm stream]), created non-blocking so it never
  // synchronises implicitly with the legacy default stream.
  MT_CUDA_CHECK(cudaStreamCreateWithFlags(&n.comm_stream, cudaStreamNonBlocking));
  n.watchdog = std::thread([&n] { n.watch(); });
}

ProcessGroupNCCL::~ProcessGroupNCCL() {
  detail::NcclComm& n = *nccl_;
  // Give the collectives in flight their chance to finish (the watchdog still watches them).
  for (;;) {
    n.reap();
    std::lock_guard<std::mutex> lock(n.works_mutex);
    if (n.in_flight.empty() || !n.failure.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  {
    std::lock_guard<std::mutex> lock(n.stop_mutex);
    n.stopping = true;
  }
  n.stop_cv.notify_all();
  if (n.watchdog.joinable()) n.watchdog.join();
  cuda::DeviceGuard guard(n.device);
  if (n.comm && !n.aborted) {
    if (n.failure.empty()) ncclCommDestroy(n.comm);
    else ncclCommAbort(n.comm);
  }
  if (n.comm_stream) cudaStreamDestroy(n.comm_stream);
}

namespace {

// Issues one collective (Note [Comm stream]): the comm stream waits for the compute stream's work so
// far, `call` queues the NCCL operation on the comm stream, the done event marks its end.
template <typename Call>
std::shared_ptr<Work> issue(detail::NcclComm& n, const std::string& description,
                            const std::vector<Tensor>& tensors, Call&& call) {
  const std::string failed = n.failed_with();
  MT_CHECK(failed.empty(), description, " was not run: an earlier collective failed: ", failed);
  n.reap();
  cuda::DeviceGuard guard(n.device);
  auto work = std::make_shared<detail::NcclWork>(description, n.timeout, n.device);
  for (const Tensor& t : tensors) work->keep(t);  // Note [Tensors stay alive]
  // Note [Comm stream]: the collective must see what the compute stream has written into its tensors
  // (backward's gradients). An event recorded on the compute stream, and the comm stream waiting on
  // it, give that order on the GPU: the host does not block and goes on queueing backward's kernels
  // while the comm stream waits. A cudaStreamSynchronize here would stall the host until the GPU had
  // caught up, and no kernel could be queued behind the all-reduce meanwhile.
  MT_CUDA_CHECK(cudaEventRecord(work->ready_, cuda::current_stream(n.device)));
  MT_CUDA_CHECK(cudaStreamWaitEvent(n.comm_stream, work->ready_, 0));
  {
    std::lock_guard<std::mutex> lock(n.comm_mutex);
    // The watchdog may have failed the group since the check above: it records why before it aborts.
    MT_CHECK(!n.aborted, description, " was not run: an earlier collective failed: ", n.failed_with());
    call(n.comm, n.comm_stream, Clock::now() + n.timeout);
  }
  MT_CUDA_CHECK(cudaEventRecord(work->done_, n.comm_stream));
  std::lock_guard<std::mutex> lock(n.works_mutex);
  n.in_flight.push_back(work);
  return work;
}

}  // namespace

std::shared_ptr<Work> ProcessGroupNCCL::run_allreduce(Tensor& tensor, ReduceOp op, const std::string& what) {
  return issue(*nccl_, what, {tensor}, [&](ncclComm_t comm, cudaStream_t stream, Clock::time_point deadline) {
    if (tensor.numel() == 0) return;
    void* data = tensor.raw_data();  // in place
    MT_NCCL_CHECK_NONBLOCKING(ncclAllReduce(data, data, static_cast<size_t>(tensor.numel()),
                                            nccl_type(tensor.dtype()), nccl_op(op), comm, stream),
                              comm, deadline);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::run_broadcast(Tensor& tensor, int root, const std::string& what) {
  return issue(*nccl_, what, {tensor}, [&](ncclComm_t comm, cudaStream_t stream, Clock::time_point deadline) {
    if (tensor.numel() == 0) return;
    void* data = tensor.raw_data();  // the root sends from it, the others receive into it
    MT_NCCL_CHECK_NONBLOCKING(ncclBroadcast(data, data, static_cast<size_t>(tensor.numel()),
                                            nccl_type(tensor.dtype()), root, comm, stream),
                              comm, deadline);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::run_allgather(std::vector<Tensor>& outputs, const Tensor& input,
                                                      const std::string& what) {
  // NCCL gathers into one buffer, rank by rank; the outputs are filled from it on the comm stream,
  // so they too are ready when the done event fires.
  //   flat: (size() * n)   outputs[r] = flat[r*n : (r+1)*n]
  const Tensor flat = empty({size() * input.numel()}, {.dtype = input.dtype(), .device = device()});
  std::vector<Tensor> keep = outputs;
  keep.push_back(input);
  keep.push_back(flat);
  return issue(*nccl_, what, keep, [&](ncclComm_t comm, cudaStream_t stream, Clock::time_point deadline) {
    const auto n = static_cast<size_t>(input.numel());
    if (n == 0) return;
    MT_NCCL_CHECK_NONBLOCKING(ncclAllGather(input.raw_data(), flat.raw_data(), n, nccl_type(input.dtype()),
                                            comm, stream),
                              comm, deadline);
    const size_t bytes = n * element_size(input.dtype());
    for (int r = 0; r < size(); ++r)
      MT_CUDA_CHECK(cudaMemcpyAsync(outputs[r].raw_data(), static_cast<const char*>(flat.raw_data()) + r * bytes,
                                    bytes, cudaMemcpyDeviceToDevice, stream));
  });
}

// NCCL's own flat collectives; in place is their native form (recv = send + rank·n for
// ncclReduceScatter, send = recv + rank·n for ncclAllGather), and Avg is ncclAvg.
std::shared_ptr<Work> ProcessGroupNCCL::run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op,
                                                           const std::string& what) {
  return issue(*nccl_, what, {output, input}, [&](ncclComm_t comm, cudaStream_t stream, Clock::time_point deadline) {
    if (output.numel() == 0) return;
    MT_NCCL_CHECK_NONBLOCKING(ncclReduceScatter(input.raw_data(), output.raw_data(), static_cast<size_t>(output.numel()),
                                                nccl_type(input.dtype()), nccl_op(op), comm, stream),
                              comm, deadline);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::run_allgather_into(Tensor& output, const Tensor& input, const std::string& what) {
  return issue(*nccl_, what, {output, input}, [&](ncclComm_t comm, cudaStream_t stream, Clock::time_point deadline) {
    if (input.numel() == 0) return;
    MT_NCCL_CHECK_NONBLOCKING(ncclAllGather(input.raw_data(), output.raw_data(), static_cast<size_t>(input.numel()),
                                            nccl_type(input.dtype()), comm, stream),
                              comm, deadline);
  });
}

std::shared_ptr<Work> ProcessGroupNCCL::run_barrier(const std::string& what) {
  // NCCL has no barrier: a one-element all-reduce completes on every rank only once all have issued it.
  Tensor token = zeros({1}, {.device = device()});
  return issue(*nccl_, what, {token}, [&](ncclComm_t comm, cudaStream_t stream, Clock::time_point deadline) {
    void* data = token.raw_data();
    MT_NCCL_CHECK_NONBLOCKING(ncclAllReduce(data, data, 1, ncclFloat32, ncclSum, comm, stream), comm, deadline);
  });
}

}  // namespace mt::dist
