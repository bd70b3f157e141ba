// Heartbeats: how a launcher tells a stopped or frozen worker from a slow one, and names it.
//
// Note [Heartbeat]: a rank stopped by SIGSTOP, swapped out for good, or frozen in the kernel holds
// its peers in their next collective until the collective timeout (300 s), and then the message
// names the peer that timed out, not the stopped one. So each worker runs a Heartbeat thread that
// writes a small record to a pipe from its launcher every second: this process's phase (set_phase:
// data, forward, backward bucket k, optimizer, checkpoint, ...) and step. The launcher's
// HeartbeatMonitor reads every worker's pipe; a worker silent for longer than the heartbeat timeout
// (mini_train --heartbeat-timeout, 30 s) has stopped, and the launcher ends the job with one line
// naming that rank and the phase it was last in. The heartbeat comes from its own thread, not from
// the training loop, so a rank that is slow but alive (a long evaluation, a checkpoint write, a
// rank waiting for a slow peer) keeps beating and is never taken for a stopped one; what a beating
// rank that makes no progress does is for the collective timeout to catch.
//
//   worker:    auto beat = dist::Heartbeat::from_env();      // MT_HEARTBEAT_FD, set by the launcher
//              dist::set_phase(dist::Phase::Optimizer);     // cheap: a few relaxed atomic stores
//   launcher:  dist::HeartbeatMonitor monitor(30s);
//              const int fd = monitor.add(rank);            // before fork; the child keeps fd
//              ... monitor.close_worker_ends();             // after every fork
//              if (auto stale = monitor.poll()) ...         // now and then
//
// Note [The first failure is the one reported]: when one rank fails, its peers fail too, a moment
// later, on the connections it closed ("a peer closed its connection"), and the launcher used to
// name whichever exit it reaped first, often a peer's, and stop the others, often before the rank
// that failed first had printed why. So a failing worker tells its launcher, through this same
// pipe, before it unwinds: Heartbeat::report_failure writes its error line, the time, and whether
// the error is a consequence of another rank's (PeerLostError, TimeoutError in distributed/errors.h)
// or its own. Its connections are still open then, so no peer has seen anything yet. The launcher
// (supervise in apps/mini_train/workers.cpp) waits a short grace for the rank that failed first
// and names it: its own failures before consequences, earlier before later; a worker that died
// without a report (kill -9) is its own failure, timed by its exit.
//
// Not here: restarting a stopped rank; heartbeats of jobs that no mini_train launcher started
// (torchrun, srun, by hand): those go through the store (heartbeat_store.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mt::dist {

enum class Phase : uint32_t { Starting, Rendezvous, Data, Forward, Backward, Optimizer, Checkpoint, Evaluation };

// This process's phase, for its heartbeat. `bucket`: for Backward, the bucket last launched or waited
// for (-1: none yet).
void set_phase(Phase phase, int64_t bucket = -1);
void set_step(int64_t step);  // the training step this process is in
// "backward, bucket 2, step 17".
std::string describe_phase(Phase phase, int64_t bucket, int64_t step);
// What set_phase and set_step last stored (what a beat carries; heartbeat_store.h reads it too).
struct PhaseNow {
  Phase phase;
  int64_t bucket, step;
};
PhaseNow current_phase();

// The worker's side: a thread writing this process's phase to `fd` every `every` until destroyed.
class Heartbeat {
 public:
  Heartbeat(int fd, std::chrono::milliseconds every = std::chrono::seconds(1));
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Sends the launcher e.what() (its first 492 bytes) and whether it is a peer's consequence; only
  // the first report of a process counts (Note [The first failure is the one reported]).
  void report_failure(const std::exception& e);

  // A heartbeat to the fd in MT_HEARTBEAT_FD, or null when the variable is not set (no launcher
  // watches this process).
  static std::unique_ptr<Heartbeat> from_env();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The launcher's side: one pipe per worker, read without blocking.
class HeartbeatMonitor {
 public:
  // timeout 0: no worker is ever stale; the pipes still carry failure reports.
  explicit HeartbeatMonitor(std::chrono::milliseconds timeout);
  ~HeartbeatMonitor();
  HeartbeatMonitor(const HeartbeatMonitor&) = delete;
  HeartbeatMonitor& operator=(const HeartbeatMonitor&) = delete;

  // A pipe for the worker `rank`; returns the end it writes to. The fd is close-on-exec: the child
  // that should keep it across exec clears that flag (keep_across_exec) between fork and exec.
  int add(int rank);
  static void keep_across_exec(int fd);
  // Closes the workers' ends in this process (after every worker was forked), so that only they hold them.
  void close_worker_ends();

  struct Stale {
    int rank;
    double silent_seconds;
    std::string last_phase;  // describe_phase of its last beat, or "starting (no heartbeat yet)"
  };
  // Reads what arrived; the first worker silent for longer than the timeout, if any. A worker whose
  // pipe was closed (it exited) is not stale: the launcher sees its exit.
  std::optional<Stale> poll();

  // What worker `rank` reported of its failure (Note [The first failure is the one reported]).
  struct Failure {
    std::string line;          // its error, e.what()
    bool consequence = false;  // a peer's failure caused it
    std::chrono::steady_clock::time_point at;  // when it failed (one machine: one steady clock)
  };
  // Reads what arrived; the report of `rank`, if it sent one.
  std::optional<Failure> failure(int rank);

 private:
  struct Worker;
  void read_pipes();
  std::chrono::milliseconds timeout_;
  std::vector<Worker> workers_;
};

}  // namespace mt::dist
