// Heartbeats (see heartbeat.h, Note [Heartbeat]): the phase as three atomics, the worker's beating
// thread, the launcher's non-blocking reads.
#include "distributed/fault/heartbeat.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>

#include "distributed/errors.h"
#include "distributed/store/rendezvous.h"
#include "distributed/store/tcp_store.h"

namespace mt::dist {

namespace {

std::atomic<uint32_t> g_phase{static_cast<uint32_t>(Phase::Starting)};
std::atomic<int64_t> g_bucket{-1};
std::atomic<int64_t> g_step{0};

// One beat on the pipe: small enough (<= PIPE_BUF) that a write is all or nothing.
struct Beat {
  uint32_t magic = kMagic;
  uint32_t phase = 0;
  int64_t bucket = -1;
  int64_t step = 0;
  static constexpr uint32_t kMagic = 0x4d544842;  // "MTHB"
};

// A failure report (Note [The first failure is the one reported]): one atomic write too (<= PIPE_BUF).
struct FailureRecord {
  uint32_t magic = kMagic;
  uint32_t consequence = 0;
  int64_t at_ns = 0;  // steady_clock, the launcher's clock too
  uint32_t length = 0;
  char line[492] = {};
  static constexpr uint32_t kMagic = 0x4d544846;  // "MTHF"
};
static_assert(sizeof(FailureRecord) <= 512);

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Starting: return "starting";
    case Phase::Init: return "init";
    case Phase::Data: return "data";
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Optimizer: return "optimizer";
    case Phase::Checkpoint: return "checkpoint";
    case Phase::Evaluation: return "evaluation";
    case Phase::Finalize: return "finalize";
  }
  return "unknown";
}

std::string beat_key(int rank) { return "heartbeat/" + std::to_string(rank); }
constexpr const char* kDone = "done";  // a store heartbeat's last value: ended, not stopped

// What a worker that has not beaten yet gets on top of the timeout: starting a process (mpirun's
// ranks, a sanitizer's run-time, a loaded machine) is not silence (Note [Watched from start to exit]).
constexpr auto kFirstBeatGrace = std::chrono::seconds(3);

// How often the beating thread looks at the phase (Note [Current phase]).
constexpr auto kLook = std::chrono::milliseconds(50);

}  // namespace

void set_phase(Phase phase, int64_t bucket) {
  g_phase.store(static_cast<uint32_t>(phase), std::memory_order_relaxed);
  g_bucket.store(bucket, std::memory_order_relaxed);
}

void set_step(int64_t step) { g_step.store(step, std::memory_order_relaxed); }

PhaseNow current_phase() {
  return {static_cast<Phase>(g_phase.load(std::memory_order_relaxed)), g_bucket.load(std::memory_order_relaxed),
          g_step.load(std::memory_order_relaxed)};
}

std::string describe_phase(Phase phase, int64_t bucket, int64_t step) {
  std::string s = phase_name(phase);
  if (phase == Phase::Backward && bucket >= 0) s += ", bucket " + std::to_string(bucket);
  return s + ", step " + std::to_string(step);
}

// ---- worker ----------------------------------------------------------------------------------------

struct Heartbeat::State {
  int fd = -1;                   // the pipe to the launcher, or
  std::shared_ptr<Store> store;  // the launcher's store, and this rank's key in it
  std::string key;
  std::chrono::milliseconds every{};
  std::mutex mutex;
  std::condition_variable cv;
  bool stopping = false;
  std::atomic<bool> reported{false};
  std::thread thread;
  uint64_t seq = 0;

  void send(const Beat& beat) {
    if (fd >= 0) {
      // A launcher that is gone (EPIPE) or a full pipe (EAGAIN): nothing to do but beat again later.
      [[maybe_unused]] const ssize_t written = ::write(fd, &beat, sizeof beat);
      return;
    }
    try {
      store->set(key, std::to_string(++seq) + ' ' + std::to_string(beat.phase) + ' ' + std::to_string(beat.bucket) +
                          ' ' + std::to_string(beat.step) + ' ' + std::to_string(::getpid()));
    } catch (const Error&) {
      // The launcher's store is gone: so is the launcher, and mpirun with it; nothing to tell.
    }
  }

  // A beat when the phase changed, or `every` after the last one, or now (Note [Current phase]). The
  // phase is read under send_mutex, so a beat from the caller's thread (beat_now) is never followed
  // by an older one from the beating thread.
  std::mutex send_mutex;
  Beat sent{.phase = ~0u};
  Clock::time_point sent_at{};
  void beat(bool now) {
    std::lock_guard<std::mutex> lock(send_mutex);
    const PhaseNow p = current_phase();
    const Beat beat{.phase = static_cast<uint32_t>(p.phase), .bucket = p.bucket, .step = p.step};
    if (!now && beat.phase == sent.phase && beat.bucket == sent.bucket && beat.step == sent.step &&
        Clock::now() - sent_at < every)
      return;
    send(beat);
    sent = beat, sent_at = Clock::now();
  }

  void run() {
    // A launcher that is gone would make the write raise SIGPIPE, which kills the process: blocked on
    // this thread, it becomes an EPIPE error instead (Note [SIGPIPE] in collective_queue.cpp).
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      lock.unlock();
      beat(false);
      lock.lock();
      cv.wait_for(lock, std::min<std::chrono::milliseconds>(kLook, every), [this] { return stopping; });
    }
  }
};

Heartbeat::Heartbeat(int fd, std::chrono::milliseconds every) : state_(std::make_unique<State>()) {
  MT_CHECK(fd >= 0, "Heartbeat: no file descriptor to beat on");
  MT_CHECK(every.count() > 0, "Heartbeat: the interval must be positive, got ", format_ms(every));
  state_->fd = fd;
  state_->every = every;
  // Never block the beating thread on a launcher that reads late: a beat that does not fit is dropped.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

Heartbeat::Heartbeat(std::shared_ptr<Store> store, int rank, std::chrono::milliseconds every)
    : state_(std::make_unique<State>()) {
  MT_CHECK(store != nullptr, "Heartbeat: no store to beat in");
  MT_CHECK(every.count() > 0, "Heartbeat: the interval must be positive, got ", format_ms(every));
  state_->store = std::move(store);
  state_->key = beat_key(rank);
  state_->every = every;
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stopping = true;
  }
  state_->cv.notify_all();
  state_->thread.join();
  if (state_->fd >= 0) ::close(state_->fd);
  if (!state_->store) return;
  try {
    state_->store->set(state_->key, kDone);  // ended, not stopped (Note [Watched from start to exit])
  } catch (const Error&) {
    // The launcher is gone: nobody is left to watch this rank.
  }
}

void Heartbeat::beat_now() {
  // A pipe's write could raise SIGPIPE on this (the caller's) thread: blocked, it fails instead.
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  state_->beat(true);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void Heartbeat::report_failure(const std::exception& e) {
  if (state_->fd < 0 || state_->reported.exchange(true)) return;
  FailureRecord record;
  record.consequence = dynamic_cast<const PeerLostError*>(&e) || dynamic_cast<const TimeoutError*>(&e);
  record.at_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  const std::string_view line = e.what();
  record.length = static_cast<uint32_t>(std::min(line.size(), sizeof record.line));
  std::memcpy(record.line, line.data(), record.length);
  // A launcher that is gone: SIGPIPE would kill this process mid-report; blocked, the write fails.
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  [[maybe_unused]] const ssize_t written = ::write(state_->fd, &record, sizeof record);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

std::unique_ptr<Heartbeat> Heartbeat::from_env() {
  const char* fd = std::getenv("MT_HEARTBEAT_FD");
  if (const char* at = std::getenv("MT_HEARTBEAT_STORE"); (!fd || !*fd) && at && *at) {
    const std::string where = at;
    const size_t colon = where.rfind(':');
    MT_CHECK(colon != std::string::npos && colon + 1 < where.size(), "MT_HEARTBEAT_STORE='", where,
             "' is not HOST:PORT (it is set by mini_train's launcher)");
    const std::optional<RendezvousInfo> mpi = rendezvous_from_mpi_launcher();
    MT_CHECK(mpi.has_value(), "MT_HEARTBEAT_STORE is set, but no MPI launcher named this process's rank "
             "(it is set by mini_train's launcher for the ranks of its mpirun)");
    return std::make_unique<Heartbeat>(
        std::make_shared<TCPStore>(TCPStoreOptions{.host = where.substr(0, colon),
                                                   .port = std::atoi(where.c_str() + colon + 1),
                                                   .timeout = std::chrono::seconds(10)}),
        mpi->rank);
  }
  if (!fd || !*fd) return nullptr;
  char* end = nullptr;
  const long n = std::strtol(fd, &end, 10);
  MT_CHECK(*end == '\0' && n >= 0 && n < 1 << 20 && ::fcntl(static_cast<int>(n), F_GETFD) >= 0,
           "MT_HEARTBEAT_FD='", fd, "' is not an open file descriptor (it is set by mini_train's launcher)");
  return std::make_unique<Heartbeat>(static_cast<int>(n));
}

// ---- launcher --------------------------------------------------------------------------------------

struct HeartbeatMonitor::Worker {
  int rank;
  int read_fd = -1, write_fd = -1;  // its pipe; -1: it beats in store_ (watch_store)
  Clock::time_point last_beat;
  bool beat_once = false;
  bool closed = false;     // its heartbeat ended: pipe closed, or "done" in the store
  bool gone = false;       // the launcher reaped it (exited)
  Clock::time_point closed_at{};
  Beat last{};
  int64_t pid = 0;
  std::string value{};     // its last value in the store
  bool done_working = false;            // seen in finalize, or its heartbeat ended
  Clock::time_point done_working_at{};  // since when
  std::optional<HeartbeatMonitor::Failure> failure{};
  std::vector<char> partial;  // a beat read in pieces (never split in practice: writes are atomic)
};

HeartbeatMonitor::HeartbeatMonitor(std::chrono::milliseconds timeout, bool silent_from_start)
    : timeout_(timeout), silent_from_start_(silent_from_start) {
  MT_CHECK(timeout.count() >= 0, "HeartbeatMonitor: the timeout must not be negative, got ", format_ms(timeout));
}

HeartbeatMonitor::~HeartbeatMonitor() {
  for (Worker& w : workers_) {
    if (w.read_fd >= 0) ::close(w.read_fd);
    if (w.write_fd >= 0) ::close(w.write_fd);
  }
}

int HeartbeatMonitor::add(int rank) {
  int fds[2];
  MT_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "heartbeat: pipe: ", std::strerror(errno));
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  workers_.push_back(
      Worker{.rank = rank, .read_fd = fds[0], .write_fd = fds[1], .last_beat = Clock::now(), .partial = {}});
  return fds[1];
}

void HeartbeatMonitor::keep_across_exec(int fd) { ::fcntl(fd, F_SETFD, 0); }

void HeartbeatMonitor::watch_store(std::shared_ptr<Store> store, int first_rank, int count) {
  MT_CHECK(store != nullptr, "HeartbeatMonitor::watch_store: no store");
  store_ = std::move(store);
  for (int rank = first_rank; rank < first_rank + count; ++rank)
    workers_.push_back(Worker{.rank = rank, .last_beat = Clock::now(), .partial = {}});
}

void HeartbeatMonitor::exited(int rank) {
  for (Worker& w : workers_)
    if (w.rank == rank) w.gone = true;
}

void HeartbeatMonitor::close_worker_ends() {
  for (Worker& w : workers_) {
    if (w.write_fd >= 0) ::close(w.write_fd);
    w.write_fd = -1;
    w.last_beat = Clock::now();  // the silence counts from the start of the workers
  }
}

namespace {

// A beat from "<seq> <phase> <bucket> <step> <pid>" (Heartbeat's store form); false: unreadable.
bool parse_store_beat(const std::string& value, Beat& beat, int64_t& pid) {
  std::istringstream in(value);
  uint64_t seq = 0;
  return static_cast<bool>(in >> seq >> beat.phase >> beat.bucket >> beat.step >> pid);
}

}  // namespace

void HeartbeatMonitor::read_store(Worker& w, Clock::time_point now) {
  const std::string key = beat_key(w.rank);
  std::string value;
  try {
    if (!store_->check({key})) return;
    value = store_->get_string(key);
  } catch (const Error&) {
    return;  // the store is this launcher's own: it answers, or this process is ending
  }
  if (value == w.value) return;
  w.value = value;
  if (value == kDone) {
    w.closed = true, w.closed_at = now;
    return;
  }
  if (parse_store_beat(value, w.last, w.pid)) w.beat_once = true, w.last_beat = now;
}

void HeartbeatMonitor::read_pipes() {
  const Clock::time_point now = Clock::now();
  for (Worker& w : workers_) {
    if (w.closed || w.gone) continue;
    if (w.read_fd < 0) {
      read_store(w, now);
      continue;
    }
    char buf[16 * sizeof(FailureRecord)];
    while (true) {
      const ssize_t n = ::read(w.read_fd, buf, sizeof buf);
      if (n == 0) w.closed = true, w.closed_at = now;  // its heartbeat ended: it is exiting
      if (n <= 0) break;
      w.partial.insert(w.partial.end(), buf, buf + n);
      while (w.partial.size() >= sizeof(uint32_t)) {
        uint32_t magic;
        std::memcpy(&magic, w.partial.data(), sizeof magic);
        if (magic == Beat::kMagic && w.partial.size() >= sizeof(Beat)) {
          std::memcpy(&w.last, w.partial.data(), sizeof(Beat));
          w.partial.erase(w.partial.begin(), w.partial.begin() + sizeof(Beat));
          w.beat_once = true;
          w.last_beat = now;
        } else if (magic == FailureRecord::kMagic && w.partial.size() >= sizeof(FailureRecord)) {
          FailureRecord record;
          std::memcpy(&record, w.partial.data(), sizeof record);
          w.partial.erase(w.partial.begin(), w.partial.begin() + sizeof record);
          if (!w.failure)
            w.failure = Failure{.line = std::string(record.line, std::min<size_t>(record.length, sizeof record.line)),
                                .consequence = record.consequence != 0,
                                .at = Clock::time_point(std::chrono::nanoseconds(record.at_ns))};
        } else if (magic != Beat::kMagic && magic != FailureRecord::kMagic) {
          w.partial.clear();  // not ours (writes are atomic, so never seen): drop it
        } else {
          break;  // the rest of a record is still to come
        }
      }
    }
  }
}

std::optional<HeartbeatMonitor::Stale> HeartbeatMonitor::poll() {
  read_pipes();
  const Clock::time_point now = Clock::now();
  if (timeout_.count() == 0) return std::nullopt;
  // A worker in finalize, or whose heartbeat has ended, has done its work; one stopped there ends the
  // job only once every other one has done its work too (Note [Watched from start to exit]).
  const auto finalizing = [](const Worker& w) {
    return w.closed || (w.beat_once && static_cast<Phase>(w.last.phase) == Phase::Finalize);
  };
  for (Worker& w : workers_)
    if (!w.done_working && finalizing(w)) w.done_working = true, w.done_working_at = now;
  std::optional<Stale> stopped_finalizing;
  bool all_done = true;
  for (const Worker& w : workers_) {
    if (w.gone || (!w.beat_once && !silent_from_start_ && !w.closed)) continue;
    all_done = all_done && finalizing(w);
    const Clock::duration silent = now - (w.closed ? w.closed_at : w.last_beat);
    if (silent <= (w.beat_once || w.closed ? timeout_ : timeout_ + kFirstBeatGrace)) continue;
    Stale stale{.rank = w.rank,
                .silent_seconds = std::chrono::duration<double>(silent).count(),
                .last_phase = w.beat_once ? describe_phase(static_cast<Phase>(w.last.phase), w.last.bucket, w.last.step)
                                          : "starting (no heartbeat yet)",
                .pid = w.pid,
                .finalizing = finalizing(w)};
    if (!stale.finalizing) return stale;
    if (!stopped_finalizing) stopped_finalizing = stale;
  }
  if (!all_done) return std::nullopt;
  if (stopped_finalizing) return stopped_finalizing;
  return stuck_finalizing(now);
}

// Every worker has done its work and beats, yet one has not exited a timeout later: stuck in its
// finalize (MPI_Finalize waiting for ever, an exit that hangs). The job's work is done all the same.
// Under MPI the ranks wait in MPI_Finalize for each other, so which one hangs cannot be told: all
// that are left are named.
std::optional<HeartbeatMonitor::Stale> HeartbeatMonitor::stuck_finalizing(Clock::time_point now) const {
  const Worker* stuck = nullptr;
  Clock::time_point last_done{};
  std::vector<int> lingering;
  for (const Worker& w : workers_) {
    if (w.gone || !w.done_working) continue;
    last_done = std::max(last_done, w.done_working_at);
    if (!stuck) stuck = &w;
    lingering.push_back(w.rank);
  }
  if (!stuck || now - last_done <= timeout_) return std::nullopt;
  return Stale{.rank = stuck->rank,
               .silent_seconds = std::chrono::duration<double>(now - last_done).count(),
               .last_phase = describe_phase(Phase::Finalize, -1, stuck->last.step),
               .pid = stuck->pid,
               .finalizing = true,
               .beating = true,
               .lingering = lingering};
}

std::optional<HeartbeatMonitor::Failure> HeartbeatMonitor::failure(int rank) {
  read_pipes();
  for (const Worker& w : workers_)
    if (w.rank == rank) return w.failure;
  return std::nullopt;
}

}  // namespace mt::dist
