// Heartbeats (Note [Heartbeat] in distributed/fault/heartbeat.h): a worker stopped with SIGSTOP is named
// by the monitor, with the phase it was last in, soon after the heartbeat timeout; a worker that is
// slow but alive (its main thread busy for several timeouts) is never taken for a stopped one; a
// worker that exits is not stale either.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>

#include "distributed/fault/heartbeat.h"
#include "distributed/store/tcp_store.h"
#include "multiprocess.h"

using namespace mt;
using namespace mt::dist;
using namespace std::chrono_literals;

namespace {

// Polls `monitor` until it reports a stale worker or `limit` has passed.
std::optional<HeartbeatMonitor::Stale> watch(HeartbeatMonitor& monitor, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto stale = monitor.poll()) return stale;
    std::this_thread::sleep_for(20ms);
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("Heartbeat: a stopped worker is named with its last phase, and slow and finished ones are not") {
  HeartbeatMonitor monitor(600ms);
  std::vector<int> fds;
  for (int rank = 0; rank < 3; ++rank) fds.push_back(monitor.add(rank));
  test::Ranks ranks(3, [&](int rank) {
    // A fork()ed child holds every pipe; a launcher's exec() would keep only its own (close-on-exec).
    for (int r = 0; r < 3; ++r)
      if (r != rank) ::close(fds[r]);
    Heartbeat beat(fds[rank], 50ms);
    set_step(17);
    if (rank == 0) {  // slow but alive: busy for over four heartbeat timeouts
      set_phase(Phase::Evaluation);
      std::this_thread::sleep_for(2500ms);
      return;  // and then finished: its pipe closes
    }
    if (rank == 1) {
      set_phase(Phase::Backward, 3);
      std::this_thread::sleep_for(300ms);  // a few beats, then stopped
      ::kill(::getpid(), SIGSTOP);
    }
    std::this_thread::sleep_for(10s);  // rank 2: alive until the test ends it
  });
  monitor.close_worker_ends();
  const auto t0 = std::chrono::steady_clock::now();
  const auto stale = watch(monitor, 10s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(stale.has_value());
  CHECK(stale->rank == 1);
  CHECK(stale->last_phase == "backward, bucket 3, step 17");
  CHECK(stale->silent_seconds >= 0.6);
  CHECK(took < 0.3 + 0.6 + 2.0);  // its last beat, the timeout, and scheduling on a loaded machine
  // Rank 0 is slow and rank 2 busy, but both beat: watching on, nobody else goes stale, and rank 0's
  // exit is not a silence either. Rank 1 stays stale; the monitor names it first every time.
  const auto t1 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t1 < 3s) {
    const auto again = monitor.poll();
    REQUIRE(again.has_value());
    CHECK(again->rank == 1);
    std::this_thread::sleep_for(100ms);
  }
}

TEST_CASE("Heartbeat: from_env beats on MT_HEARTBEAT_FD, and refuses a value that is not an open fd") {
  ::unsetenv("MT_HEARTBEAT_FD");
  CHECK(Heartbeat::from_env() == nullptr);
  ::setenv("MT_HEARTBEAT_FD", "9999", 1);
  CHECK_THROWS_WITH_AS(Heartbeat::from_env(), doctest::Contains("MT_HEARTBEAT_FD='9999'"), Error);
  ::unsetenv("MT_HEARTBEAT_FD");
}

// Note [Watched from start to exit]: a rank stopped in finalize has done its work; the monitor waits
// while another still works (rank 0 writing the model), and names it, as finalizing, once every rank
// is in finalize or gone. Its phase is the one it stopped in (Note [Current phase]: beat_now).
TEST_CASE("Heartbeat: a rank stopped in finalize is reported once every rank has done its work") {
  HeartbeatMonitor monitor(400ms);
  std::vector<int> fds;
  for (int rank = 0; rank < 3; ++rank) fds.push_back(monitor.add(rank));
  test::Ranks ranks(3, [&](int rank) {
    for (int r = 0; r < 3; ++r)
      if (r != rank) ::close(fds[r]);
    Heartbeat beat(fds[rank], 50ms);
    set_step(9);
    if (rank == 0) {  // still working, for over three timeouts, then stuck in finalize (beating)
      set_phase(Phase::Checkpoint);
      std::this_thread::sleep_for(1500ms);
    }
    set_phase(Phase::Finalize);
    beat.beat_now();
    if (rank == 1) ::kill(::getpid(), SIGSTOP);  // at once: no beat of the thread's after this
    if (rank == 0) std::this_thread::sleep_for(10s);
  });  // rank 2 exits: its pipe closes
  monitor.close_worker_ends();
  const auto t0 = std::chrono::steady_clock::now();
  const auto stale = watch(monitor, 10s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(stale.has_value());
  CHECK(stale->rank == 1);
  CHECK(stale->finalizing);
  CHECK(stale->last_phase == "finalize, step 9");
  CHECK(took >= 1.4);        // not before rank 0 left its checkpoint
  CHECK(took < 1.5 + 2.0);   // and soon after
}

// MPI ranks beat in a store their launcher hosts (Heartbeat's store form, HeartbeatMonitor::watch_store):
// one stopped in init is named with its phase and pid, counted from the start; one whose heartbeat
// ended ("done") and that is gone is not stale.
TEST_CASE("Heartbeat: ranks beating in a store, one stopped in init") {
  auto server = std::make_shared<TCPStore>(TCPStoreOptions{.host = "127.0.0.1", .port = 0, .is_server = true,
                                                           .job_token = "t", .loopback_only = true});
  HeartbeatMonitor monitor(500ms);
  const int port = server->port();
  test::Ranks ranks(2, [port](int rank) {
    auto store = std::make_shared<TCPStore>(TCPStoreOptions{.host = "127.0.0.1", .port = port, .job_token = "t"});
    Heartbeat beat(store, rank, 50ms);
    set_phase(Phase::Init);
    beat.beat_now();
    if (rank == 1) ::kill(::getpid(), SIGSTOP);
    std::this_thread::sleep_for(200ms);  // rank 0: a few beats, then "done"
  });
  monitor.watch_store(server, 0, 2);
  const auto stale = watch(monitor, 10s);
  REQUIRE(stale.has_value());
  CHECK(stale->rank == 1);
  CHECK_FALSE(stale->finalizing);
  CHECK(stale->last_phase == "init, step 0");
  CHECK(stale->pid > 0);
  CHECK(::kill(static_cast<pid_t>(stale->pid), 0) == 0);  // a live process: the stopped rank
  CHECK(server->get_string("heartbeat/0") == "done");
}

// A worker stopped before its first beat is named too, after the timeout and the start-up grace of
// 3 s (Note [Watched from start to exit]); under `mini_train launch` (silent_from_start false) a
// program that never beats is never taken for a stopped one.
TEST_CASE("Heartbeat: a worker that never beats is stale after the start-up grace, unless beats are optional") {
  HeartbeatMonitor strict(300ms), lenient(300ms, /*silent_from_start=*/false);
  const int fd_strict = strict.add(0), fd_lenient = lenient.add(0);
  test::Ranks ranks(1, [&](int) { std::this_thread::sleep_for(10s); });  // holds both pipes, never beats
  strict.close_worker_ends();
  lenient.close_worker_ends();
  (void)fd_strict, (void)fd_lenient;
  const auto t0 = std::chrono::steady_clock::now();
  const auto stale = watch(strict, 10s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(stale.has_value());
  CHECK(stale->last_phase == "starting (no heartbeat yet)");
  CHECK(took >= 3.3);
  CHECK(took < 3.3 + 2.0);
  CHECK_FALSE(lenient.poll().has_value());
}
