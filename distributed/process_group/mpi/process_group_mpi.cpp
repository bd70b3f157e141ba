// ProcessGroupMPI: the thread that moves large collectives (ProgressThread), a Work that completes by
// MPI_Test (MpiWork), and each collective as one non-blocking MPI call (see process_group_mpi.h);
// MPI's process-wide side is detail/mpi_runtime.h. Compiled only with MPI: process_group_mpi_stub.cpp
// stands in without it, and register_mpi.cpp makes init_process_group("mpi") find either.
#include "distributed/process_group/mpi/process_group_mpi.h"

#include <mpi.h>

#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "distributed/process_group/mpi/detail/mpi_runtime.h"

namespace mt::dist {

using detail::divide;
using detail::mpi_error_string;
using detail::mpi_count;
using detail::mpi_op;
using detail::mpi_type;
using detail::Runtime;
using detail::thread_level_name;

namespace {

std::exception_ptr error_of(const std::function<void()>& fail) {
  try {
    fail();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

}  // namespace

class MpiWork;
class ProgressThread;

// What the group and its Works share: the communicator, the requests in flight, and the first
// failure (Note [A failed collective poisons the queue] in detail/collective_queue.h).
struct ProcessGroupMPI::State {
  MPI_Comm comm = MPI_COMM_NULL;
  std::deque<std::shared_ptr<MpiWork>> in_flight;  // issue order; kept until their request is done
  std::string first_failure;
  std::unique_ptr<ProgressThread> progress_thread;  // Note [Progress thread]; null when switched off
  // Tests every request in flight, finishing those that completed. Holds Runtime::mutex.
  void progress_locked();
};

// Note [Progress thread]: how an MPI collective moves, and which thread completes it. (The one full
// account; process_group.h, process_group_mpi.h, work.h, ddp.cpp, docs/mpi.md, docs/ddp.md and
// examples/ddp_from_scratch.cpp say it briefly and point here.)
//   Issue: on the caller's thread, as MPI's non-blocking call (issue() below); no queue, no
//     hand-off. Between two ranks on this machine an 11-float all-reduce costs about 1.3 µs issue
//     to completion (0.5 µs to issue), where waking another thread and being woken back costs tens
//     of µs. Gloo's collectives block, which is why ProcessGroupGloo needs a CollectiveQueue thread.
//   Progress: OpenMPI moves a non-blocking collective only inside MPI calls, and a large one needs
//     many of them: between two processes its shared-memory transport copies a message in
//     fragments, each handed over by a later call. Two kinds of thread make those calls:
//     - this thread (ProcessGroupMPIOptions::progress_thread, on by default). A collective of
//       kWakeFrom (64 KiB) or more, counting all the tensors it holds, wakes it. Awake, it sleeps
//       kPollEvery (20 µs) before each round, the first one too (so a collective that the caller's
//       own wait() completes sooner never meets it), and each round tests every request in flight,
//       small ones included, holding Runtime::mutex like any other caller (MPI_THREAD_SERIALIZED).
//       It goes back to sleep on its condition variable when nothing is in flight or the group is
//       poisoned.
//     - the caller, whenever it enters the group: the next collective's issue (which first tests
//       those in flight), progress() (DDP's ready hooks call it, Note [Progress] in
//       process_group.h), is_completed(), and wait(), which polls MPI_Test (Note [Timeouts
//       without cancellation]). The hooks alone are not enough for a large bucket: backward runs a
//       whole layer's matrix products between two hooks, far too few calls to move a megabyte.
//   Below kWakeFrom: a collective issued while the thread sleeps does not wake it. Such a
//     collective travels in a few fragments, and a wake-up costs the issuing thread one notify
//     (a system call) that the seed model's 11-float step would pay every step for nothing. It
//     moves only when the caller enters the group, or when a larger collective in flight already
//     has the thread polling.
//   Completion: the first thread whose MPI_Test finds the request done completes it on the spot,
//     under Runtime::mutex (MpiWork::poll_locked): it runs the collective's on_success (Avg's
//     division by the world size, allgather's copy into the outputs, reduce_scatter's move into
//     this rank's shard and Avg's division) and then Work::finish, which stamps the finish time.
//     So with the thread on, a large collective can be completed on the progress thread while the
//     caller computes, and the caller's wait() then finds it finished.
//   Off (progress_thread = false): requests move only at the caller's entries listed above; a
//     large bucket then moves mostly in finalize's wait (bench/README.md has the two side by side).
class ProgressThread {
 public:
  static constexpr auto kPollEvery = std::chrono::microseconds(20);
  static constexpr size_t kWakeFrom = 64 * 1024;  // bytes: smaller collectives are not worth a wake-up

  explicit ProgressThread(ProcessGroupMPI::State& state) : state_(state), thread_([this] { loop(); }) {}
  ~ProgressThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  ProgressThread(const ProgressThread&) = delete;
  ProgressThread& operator=(const ProgressThread&) = delete;

  // A request was issued: poll until nothing is in flight. Called with Runtime::mutex held; the
  // thread never takes mutex_ while holding Runtime::mutex, so the two cannot deadlock.
  void wake() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++wakes_;
      if (!sleeping_) return;  // polling: it will see the new request
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    uint64_t seen = 0;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        sleeping_ = true;  // a wake() from now on notifies; one before was counted in wakes_
        cv_.wait(lock, [&] { return stopping_ || wakes_ != seen; });
        sleeping_ = false;
        if (stopping_) return;
        seen = wakes_;
      }
      bool in_flight = true;
      while (in_flight && !stopping_) {
        std::this_thread::sleep_for(kPollEvery);
        std::lock_guard<std::mutex> mpi(Runtime::get().mutex);
        state_.progress_locked();
        // A poisoned group has nothing left to move: its abandoned requests may never complete.
        in_flight = !state_.in_flight.empty() && state_.first_failure.empty();
      }
    }
  }

  ProcessGroupMPI::State& state_;
  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t wakes_ = 0;     // wake() calls so far
  bool sleeping_ = false;  // waits on cv_
  std::atomic<bool> stopping_{false};  // read without mutex_ by the polling loop
  std::thread thread_;
};

// Note [Timeouts without cancellation]: MPI cannot cancel a collective once issued, and its blocking
// calls wait forever. So a Work never blocks inside MPI: wait() calls MPI_Test until the request
// completes, or until the collective's deadline (issue time + the group's timeout). At the deadline
// the collective is abandoned: its Work fails with a TimeoutError naming it, the group is poisoned
// (every later collective fails at once, naming this one), and the request stays in flight, still
// holding its tensors (MPI may yet write into them, should the late peer arrive). A wait() with a
// shorter timeout of its own only stops waiting; the collective runs on.
//
// Polling costs a core while it spins; OpenMPI's own MPI_Wait spins the same way. After a short spin
// the loop yields (other ranks on an oversubscribed machine need the core), and after a long wait it
// sleeps, since by then a peer is late, not slow.
class MpiWork : public Work {
 public:
  MpiWork(std::string description, std::shared_ptr<ProcessGroupMPI::State> state, std::vector<Tensor> tensors,
          std::function<void()> on_success, Clock::time_point deadline, std::chrono::milliseconds timeout)
      : Work(std::move(description), timeout), state_(std::move(state)), tensors_(std::move(tensors)),
        on_success_(std::move(on_success)), deadline_(deadline) {}

  MPI_Request request = MPI_REQUEST_NULL;
  bool request_done = false;

  bool is_completed() const override {
    if (Work::is_completed()) return true;
    std::lock_guard<std::mutex> lock(Runtime::get().mutex);
    const_cast<MpiWork*>(this)->poll_locked();  // progress: MPI advances only when called
    return Work::is_completed();
  }

  using Work::wait;  // wait() = wait(the group's timeout)
  void wait(std::chrono::milliseconds timeout) override {
    const Clock::time_point start = Clock::now(), give_up = start + timeout;
    while (true) {
      Clock::time_point now;
      {
        std::lock_guard<std::mutex> lock(Runtime::get().mutex);
        poll_locked();
        now = Clock::now();
        if (!Work::is_completed() && now >= deadline_) abandon_locked();
      }
      if (Work::is_completed()) break;
      if (now >= give_up)
        MT_FAIL_TIMEOUT(description(), " did not complete within ", format_ms(timeout), " of waiting; it stays "
                        "in flight until its own timeout of ", format_ms(Work::timeout()));
      const auto waited = now - start;
      if (waited < std::chrono::microseconds(20)) continue;  // spin: most collectives end here
      if (waited < std::chrono::milliseconds(50)) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    Work::wait(std::chrono::milliseconds(0));  // rethrows the collective's error, if any
  }

  // Tests the request once; on completion runs on_success and finishes the Work. Holds Runtime::mutex.
  void poll_locked() {
    if (request_done) return;
    int flag = 0;
    const int rc = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      request_done = true;
      fail_locked(error_of([&] { MT_FAIL(description(), " failed: MPI: ", mpi_error_string(rc)); }));
      return;
    }
    if (!flag) return;
    request_done = true;
    if (!Work::is_completed()) {  // else: abandoned earlier; the late result is dropped
      std::exception_ptr error;
      if (on_success_) error = error_of(on_success_);
      if (error) fail_locked(error);
      else finish();
    }
    tensors_.clear();  // MPI is done with them
    on_success_ = nullptr;
  }

  // Finishes the Work with `error`; the group's first failure poisons it. Holds Runtime::mutex.
  void fail_locked(std::exception_ptr error) {
    if (state_->first_failure.empty()) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        state_->first_failure = e.what();
      }
    }
    finish(error);
  }

 private:
  void abandon_locked() {
    fail_locked(error_of([&] {
      MT_FAIL_TIMEOUT(description(), " timed out after ", format_ms(Work::timeout()), ": a peer is dead or hung, "
                      "or did not issue the same collective (Note [Collective order])");
    }));
  }

  std::shared_ptr<ProcessGroupMPI::State> state_;
  std::vector<Tensor> tensors_;  // alive while MPI may read or write them
  std::function<void()> on_success_;  // Avg's division, allgather's copy-out
  Clock::time_point deadline_;
};

void ProcessGroupMPI::State::progress_locked() {
  for (auto& w : in_flight) w->poll_locked();
  while (!in_flight.empty() && in_flight.front()->request_done) in_flight.pop_front();
}

namespace {

// Issues one collective on the caller's thread (Note [Progress thread]): `start` makes the MPI call
// that fills the request; a collective of kWakeFrom bytes or more wakes the progress thread. Fails
// at once when the group is poisoned.
std::shared_ptr<Work> issue(const std::shared_ptr<ProcessGroupMPI::State>& state, const std::string& description,
                            std::chrono::milliseconds timeout, std::vector<Tensor> tensors,
                            std::function<void()> on_success, const std::function<int(MPI_Request*)>& start) {
  size_t bytes = 0;
  for (const Tensor& t : tensors) bytes += static_cast<size_t>(t.numel()) * element_size(t.dtype());
  auto work = std::make_shared<MpiWork>(description, state, std::move(tensors), std::move(on_success),
                                        Clock::now() + timeout, timeout);
  std::lock_guard<std::mutex> lock(Runtime::get().mutex);
  if (!state->first_failure.empty()) {
    work->finish(error_of([&] {
      MT_FAIL(description, " was not run: an earlier collective failed: ", state->first_failure);
    }));
    return work;
  }
  state->progress_locked();  // earlier requests advance while this one is issued (DDP's next bucket)
  const int rc = start(&work->request);
  if (rc != MPI_SUCCESS) {
    work->request_done = true;
    work->fail_locked(error_of([&] { MT_FAIL(description, " could not be issued: MPI: ", mpi_error_string(rc)); }));
    return work;
  }
  state->in_flight.push_back(work);
  if (state->progress_thread && bytes >= ProgressThread::kWakeFrom) state->progress_thread->wake();
  return work;
}

}  // namespace

bool ProcessGroupMPI::is_available() { return true; }

void ProcessGroupMPI::abort_job(int exit_code) {  // Note [A failing rank aborts the job]
  int initialized = 0, finalized = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || !initialized) return;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
}

void ProcessGroupMPI::finalize() {
  int initialized = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || !initialized) return;
  Runtime::get().finalize();
}

ProcessGroupMPI::World ProcessGroupMPI::world() {
  Runtime& runtime = Runtime::get();
  std::lock_guard<std::mutex> lock(runtime.mutex);
  World w;
  MT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &w.rank));
  MT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &w.size));
  return w;
}

std::string ProcessGroupMPI::thread_level() {
  int initialized = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || !initialized) return "";
  return thread_level_name(Runtime::get().provided);
}

ProcessGroupMPI::ProcessGroupMPI(ProcessGroupMPIOptions opts) : ProcessGroupMPI(world(), opts) {}

ProcessGroupMPI::ProcessGroupMPI(World world, ProcessGroupMPIOptions opts)
    : ProcessGroup(world.rank, world.size, opts.timeout), state_(std::make_shared<State>()) {
  if (opts.progress_thread) state_->progress_thread = std::make_unique<ProgressThread>(*state_);
  // The group's own communicator: its messages cannot pair with another group's, or the program's.
  // MPI_Comm_idup, not MPI_Comm_dup: it is collective, and a rank that never comes must end in a
  // timeout, not a hang.
  const std::string what = "creating ProcessGroupMPI (MPI_Comm_idup of MPI_COMM_WORLD) on rank " +
                           std::to_string(rank()) + " of " + std::to_string(size());
  auto work = issue(state_, what, timeout(), {}, nullptr, [this](MPI_Request* request) {
    return MPI_Comm_idup(MPI_COMM_WORLD, &state_->comm, request);
  });
  work->wait();
  std::lock_guard<std::mutex> lock(Runtime::get().mutex);
  // Errors come back as return codes (MT_MPI_CHECK turns them into exceptions), instead of MPI's
  // default of aborting the whole job from inside the library.
  MT_MPI_CHECK(MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN));
}

ProcessGroupMPI::~ProcessGroupMPI() {
  state_->progress_thread.reset();  // before the State can be shared by Works alone
  int finalized = 0;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && finalized) return;  // finalize() came first: nothing to free
  // Requests still in flight get until their own deadline; abandoned ones one more look. One that
  // never completes keeps the communicator, and MPI itself, from being freed (Note [Timeouts without
  // cancellation]).
  std::deque<std::shared_ptr<MpiWork>> in_flight;
  {
    std::lock_guard<std::mutex> lock(Runtime::get().mutex);
    state_->progress_locked();
    in_flight = state_->in_flight;
  }
  for (auto& w : in_flight) {
    try {
      w->wait();
    } catch (const std::exception&) {  // its owner has seen (or ignored) the error already
    }
  }
  std::lock_guard<std::mutex> lock(Runtime::get().mutex);
  state_->progress_locked();
  if (!state_->in_flight.empty()) {
    Runtime::get().unfinished = true;
    return;
  }
  if (state_->comm != MPI_COMM_NULL) MPI_Comm_free(&state_->comm);
}

std::shared_ptr<Work> ProcessGroupMPI::run_allreduce(Tensor& tensor, ReduceOp op, const std::string& description) {
  const int count = mpi_count(tensor, "allreduce");
  std::function<void()> after;
  if (op == ReduceOp::Avg) after = [tensor, n = size()] { divide(tensor, n); };  // Sum, then divide
  return issue(state_, description, timeout(), {tensor}, std::move(after), [&](MPI_Request* request) {
    return MPI_Iallreduce(MPI_IN_PLACE, tensor.raw_data(), count, mpi_type(tensor.dtype()),
                          mpi_op(tensor.dtype(), op), state_->comm, request);
  });
}

std::shared_ptr<Work> ProcessGroupMPI::run_broadcast(Tensor& tensor, int root, const std::string& description) {
  const int count = mpi_count(tensor, "broadcast");
  return issue(state_, description, timeout(), {tensor}, nullptr, [&](MPI_Request* request) {
    return MPI_Ibcast(tensor.raw_data(), count, mpi_type(tensor.dtype()), root, state_->comm, request);
  });
}

std::shared_ptr<Work> ProcessGroupMPI::run_allgather(std::vector<Tensor>& outputs, const Tensor& input,
                                                     const std::string& description) {
  const int count = mpi_count(input, "allgather");
  // MPI gathers into one buffer, rank by rank; the outputs are filled from it on completion.
  Tensor flat = empty({size() * input.numel()}, {.dtype = input.dtype()});
  const size_t bytes = static_cast<size_t>(input.numel()) * element_size(input.dtype());
  auto copy_out = [outputs, flat, bytes] {
    const auto* from = static_cast<const char*>(flat.raw_data());
    for (size_t r = 0; r < outputs.size(); ++r) std::memcpy(outputs[r].raw_data(), from + r * bytes, bytes);
  };
  std::vector<Tensor> tensors = outputs;
  tensors.push_back(input);
  tensors.push_back(flat);
  return issue(state_, description, timeout(), std::move(tensors), std::move(copy_out), [&](MPI_Request* request) {
    const MPI_Datatype type = mpi_type(input.dtype());
    return MPI_Iallgather(input.raw_data(), count, type, flat.raw_data(), count, type, state_->comm, request);
  });
}

// MPI's own reduce-scatter (the sum's order is the library's, fixed for a given world size). In
// place, MPI_IN_PLACE takes the input from the whole buffer and leaves the result in its FIRST shard;
// it is moved to this rank's shard on completion.
std::shared_ptr<Work> ProcessGroupMPI::run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op,
                                                          const std::string& description) {
  const int count = mpi_count(output, "reduce_scatter");
  mpi_count(input, "reduce_scatter");
  const bool in_place = is_own_shard(output, input, rank());
  const size_t bytes = static_cast<size_t>(output.numel()) * element_size(output.dtype());
  std::function<void()> after = [output, input, in_place, bytes, op, n = size()] {
    if (in_place && output.raw_data() != input.raw_data()) std::memmove(output.raw_data(), input.raw_data(), bytes);
    if (op == ReduceOp::Avg) divide(output, n);
  };
  return issue(state_, description, timeout(), {output, input}, std::move(after), [&](MPI_Request* request) {
    const MPI_Datatype type = mpi_type(input.dtype());
    const MPI_Op mop = mpi_op(input.dtype(), ReduceOp::Sum);
    if (in_place)
      return MPI_Ireduce_scatter_block(MPI_IN_PLACE, input.raw_data(), count, type, mop, state_->comm, request);
    return MPI_Ireduce_scatter_block(input.raw_data(), output.raw_data(), count, type, mop, state_->comm, request);
  });
}

// In place (the input is this rank's shard of the output) is MPI_IN_PLACE's own meaning here.
std::shared_ptr<Work> ProcessGroupMPI::run_allgather_into(Tensor& output, const Tensor& input,
                                                          const std::string& description) {
  const int count = mpi_count(input, "allgather_into");
  mpi_count(output, "allgather_into");
  const bool in_place = is_own_shard(input, output, rank());
  return issue(state_, description, timeout(), {output, input}, nullptr, [&](MPI_Request* request) {
    const MPI_Datatype type = mpi_type(input.dtype());
    return MPI_Iallgather(in_place ? MPI_IN_PLACE : input.raw_data(), count, type, output.raw_data(), count, type,
                          state_->comm, request);
  });
}

std::shared_ptr<Work> ProcessGroupMPI::run_barrier(const std::string& description) {
  return issue(state_, description, timeout(), {}, nullptr,
               [&](MPI_Request* request) { return MPI_Ibarrier(state_->comm, request); });
}

void ProcessGroupMPI::progress() {
  std::lock_guard<std::mutex> lock(Runtime::get().mutex);
  if (!state_->in_flight.empty()) state_->progress_locked();
}

}  // namespace mt::dist
