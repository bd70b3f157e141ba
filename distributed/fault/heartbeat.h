// Heartbeats: how a launcher tells a stopped or frozen worker from a slow one, and names it.
//
// Note [Heartbeat]: a rank stopped by SIGSTOP, swapped out for good, or frozen in the kernel holds
// its peers in their next collective until the collective timeout (300 s), and then the message
// names the peer that timed out, not the stopped one. So each worker runs a Heartbeat thread that
// writes a small record to a pipe from its launcher every second: this process's phase (set_phase:
// init, data, forward, backward bucket k, optimizer, checkpoint, evaluation, finalize) and step. The
// launcher's HeartbeatMonitor reads every worker's pipe; a worker silent for longer than the heartbeat
// timeout (mini_train --heartbeat-timeout, 30 s) has stopped, and the launcher ends the job with one
// line naming that rank and the phase it was last in. The ranks of an mpirun that the launcher
// started are not its children, and OpenMPI closes every inherited descriptor when it starts them,
// so they beat to a store the launcher hosts instead (Heartbeat::from_env, MT_HEARTBEAT_STORE), and
// the monitor reads that (watch_store). The heartbeat comes from its own thread, not from
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
// Note [Watched from start to exit]: a rank can stop in any phase, and under MPI two phases outside
// training hang the whole job, silently, without a heartbeat: MPI_Init, which waits for every rank,
// and MPI_Finalize, which does too. So a worker's heartbeat starts first thing, before MPI_Init
// (phase init), and ends last, after MPI_Finalize (phase finalize; ProcessGroupMPI::finalize), and
// the launcher counts a worker's silence from the moment it started it: one stopped before its
// first beat is named too ("starting (no heartbeat yet)"), after the timeout and 3 s more, as
// starting a process (mpirun's ranks, under a sanitizer, on a loaded machine) takes a while. A worker whose heartbeat has ended (its
// pipe closed, or "done" in the store) but that has not exited within the timeout is stopped in
// finalize. A rank stopped in finalize has finished its work: the launcher lets the other ranks
// finish theirs (rank 0 writes the model), and once every rank is in finalize or gone, the job's
// results are written, so it stops what is left and exits 0 with a warning, instead of waiting on
// a finalize that will never end or failing a job that did its work. The same when every rank has
// done its work and one still beats but has not exited a timeout later (stuck in MPI_Finalize).
//
// Note [Current phase]: the beating thread looks at the phase every 50 ms and beats at once when it
// changed (at least once a second when it did not), so the phase a stopped rank is named with is
// the one it stopped in, give or take 50 ms, not a beat up to a second old. The phases that bound a
// process's life, init and finalize, are beaten by the caller itself (beat_now) as it enters them:
// a rank stopped a microsecond later is named in them.
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

class Store;

// init: meeting the other ranks (rendezvous, MPI_Init); finalize: the work is done, the process is
// closing its group and exiting (MPI_Finalize) (Note [Watched from start to exit]).
enum class Phase : uint32_t { Starting, Init, Data, Forward, Backward, Optimizer, Checkpoint, Evaluation, Finalize };

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

// The worker's side: a thread writing this process's phase to `fd` (or to "heartbeat/<rank>" in
// `store`) every `every`, and at once when the phase changes (Note [Current phase]), until destroyed.
class Heartbeat {
 public:
  Heartbeat(int fd, std::chrono::milliseconds every = std::chrono::seconds(1));
  // To a store: "<seq> <phase> <bucket> <step> <pid>", and "done" when destroyed.
  Heartbeat(std::shared_ptr<Store> store, int rank, std::chrono::milliseconds every = std::chrono::seconds(1));
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // A beat now, from the calling thread, with the phase just set (Note [Current phase]).
  void beat_now();

  // Sends the launcher e.what() (its first 492 bytes) and whether it is a peer's consequence; only
  // the first report of a process counts (Note [The first failure is the one reported]). Through a
  // pipe only: an MPI rank's failure reaches its launcher through mpirun.
  void report_failure(const std::exception& e);

  // A heartbeat to the fd in MT_HEARTBEAT_FD, or to the store at MT_HEARTBEAT_STORE=host:port as the
  // rank its MPI launcher named (token MT_JOB_TOKEN), or null when neither is set (no launcher
  // watches this process). A program's first line, so that it is watched from the start (Note
  // [Watched from start to exit]).
  static std::unique_ptr<Heartbeat> from_env();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The launcher's side: one pipe per worker, read without blocking.
class HeartbeatMonitor {
 public:
  // timeout 0: no worker is ever stale; the pipes still carry failure reports. silent_from_start
  // false: a worker is watched from its first beat on (a program that may never beat: `mini_train
  // launch`'s); true: its silence counts from its start (Note [Watched from start to exit]).
  explicit HeartbeatMonitor(std::chrono::milliseconds timeout, bool silent_from_start = true);
  ~HeartbeatMonitor();
  HeartbeatMonitor(const HeartbeatMonitor&) = delete;
  HeartbeatMonitor& operator=(const HeartbeatMonitor&) = delete;

  // A pipe for the worker `rank`; returns the end it writes to. The fd is close-on-exec: the child
  // that should keep it across exec clears that flag (keep_across_exec) between fork and exec.
  int add(int rank);
  static void keep_across_exec(int fd);
  // Watches ranks first_rank .. first_rank + count - 1 through their beats in `store` (Heartbeat's
  // store form), counting their silence from now.
  void watch_store(std::shared_ptr<Store> store, int first_rank, int count);
  // The launcher reaped this worker: no longer watched.
  void exited(int rank);
  // Closes the workers' ends in this process (after every worker was forked), so that only they hold them.
  void close_worker_ends();

  struct Stale {
    int rank;
    double silent_seconds;
    std::string last_phase;  // describe_phase of its last beat, or "starting (no heartbeat yet)"
    int64_t pid = 0;         // from a store beat (0: unknown, or a pipe: the launcher knows it)
    bool finalizing = false;  // stopped in finalize, its work done (Note [Watched from start to exit])
    bool beating = false;     // finalizing: not stopped but stuck, every rank's work done a timeout ago
    std::vector<int> lingering{};  // beating: every rank still there (under MPI they wait for each other)
  };
  // Reads what arrived; the first worker silent for longer than the timeout, if any. One stopped in
  // finalize is returned only once every watched worker is in finalize or gone: the job's work is
  // done (Note [Watched from start to exit]); until then the others are left to finish theirs.
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
  void read_pipes();  // and the store's beats
  void read_store(Worker& w, std::chrono::steady_clock::time_point now);
  std::optional<Stale> stuck_finalizing(std::chrono::steady_clock::time_point now) const;
  std::chrono::milliseconds timeout_;
  bool silent_from_start_;
  std::vector<Worker> workers_;
  std::shared_ptr<Store> store_;  // watch_store's
};

}  // namespace mt::dist
