// The launcher's child processes (launcher.h): fork+exec, reap, stop, and the loop that supervises
// them; run_workers() is one run of this node's --nproc workers, the unit a restart repeats. The
// restart loops themselves are launcher.cpp's (one machine) and node_restarts.cpp's (several).
//
// Signals: the launcher blocks SIGINT/SIGTERM/SIGCHLD (LauncherSignals) and takes them with
// sigtimedwait, so "a child exited" and "the user pressed Ctrl-C" never race an async handler.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "apps/mini_train/options.h"
#include "distributed/fault/heartbeat.h"

namespace mt::app {

struct Worker {
  pid_t pid = -1;
  bool running = false;
  int status = 0;                                  // its wait status, once it has exited
  std::chrono::steady_clock::time_point exited{};  // when the launcher reaped it
};

// RAII: blocks SIGINT/SIGTERM/SIGCHLD, which the launcher takes with sigtimedwait (no async handler,
// no race between "a child exited" and "the user pressed Ctrl-C"); children get the old mask back.
struct LauncherSignals {
  sigset_t watched, old_mask;
  LauncherSignals();
  ~LauncherSignals();
};

// 32 hex digits from /dev/urandom: a job token, or any nonce nobody can guess.
std::string random_token();
// This binary's path, for children that exec it from another process (mpirun cannot use /proc/self).
std::string self_path();

// Forks a child that execs argv (after `setup` adjusts its environment); the child dies with the
// launcher, even if the launcher died before the child got this far.
pid_t spawn(const std::vector<std::string>& argv, const sigset_t& child_mask, pid_t launcher,
            const std::function<void()>& setup);
// SIGTERM to every worker still running, SIGKILL to those left after a grace period; reaps all.
void stop_all(std::vector<Worker>& workers);

// Why the watchdog stops the job: a line, and whether the job's work was done (a rank stopped in
// finalize after every rank finished: Note [Watched from start to exit]): then it is a warning and
// the launcher exits 0.
struct WatchdogStop {
  std::string line;
  bool work_done = false;
};

// The watchdog's verdict on a stopped worker (HeartbeatMonitor::poll), with its one line.
WatchdogStop stopped_worker(const dist::HeartbeatMonitor::Stale& stale, int64_t heartbeat_timeout);

// SIGKILL to `root` and every process below it (mpirun and its ranks, stopped ones included).
void kill_process_tree(pid_t root);

struct Supervision {
  // (index, wait status) of the child that failed first -> the one line printed; no status: it has
  // not exited yet (Note [The first failure is the one reported] in distributed/fault/heartbeat.h).
  std::function<std::string(int index, std::optional<int> status)> describe_failure;
  // What child `index` reported of its failure through its heartbeat pipe, if it did (same Note).
  std::function<std::optional<dist::HeartbeatMonitor::Failure>(int index)> failure_report{};
  // Asked at every wake-up: a reason to stop them all (Note [Heartbeat]), or none.
  std::function<std::optional<WatchdogStop>()> watchdog{};
  // Called with a failing child's line before the others are stopped; returns the line to print.
  // The multi-node launcher posts it to the other nodes at once, and adds the cause another node
  // posted first (Note [Restarts across nodes] in node_restarts.h).
  std::function<std::string(const std::string& line)> on_failure{};
  // Called on SIGINT/SIGTERM before the children are stopped (the multi-node launcher ends the job).
  std::function<void(int sig)> on_interrupt{};
  // Named in the line on SIGINT/SIGTERM: what a resume would start from (interrupt.h).
  std::string checkpoint_dir{};
  bool trainer = true;  // false: the children are a program of the user's (`mini_train launch`), the line names nothing saved
};

// Waits for the children; a failure, a watchdog stop, or SIGINT/SIGTERM stops them all. After a
// failure it first waits up to 2 s for the child that failed first, and names that one
// (Note [The first failure is the one reported]).
// Returns the launcher's exit code: 0 (also after a warning that the job's work was done), 1 after a
// failure (its line printed), 128 + signal.
int supervise(std::vector<Worker>& workers, const sigset_t& watched, const Supervision& how);

// What one run of the workers adds when it is one attempt of a multi-node job (node_restarts.h).
struct AttemptHooks {
  std::string store_prefix{};  // MT_STORE_PREFIX: node 0's launcher hosts the store (distributed/process_group/init_process_group.cpp)
  std::function<std::string(const std::string& line)> on_failure{};  // a failure on this node (Supervision)
  std::function<std::optional<std::string>()> poll{};         // a failure elsewhere: a line, and stop
  std::function<void(int sig)> on_interrupt{};                 // this launcher was interrupted (Supervision)
  // `mini_train launch`: the workers are a program of the user's, watched from its first heartbeat
  // on, if it beats (Note [Launching any program] in launch_command.cpp).
  bool any_program = false;
};

// One run of this node's workers: spawn them, supervise them (Note [Heartbeat] included). Returns
// the launcher's exit code: 0, 1 after a failure (its line printed), 128 + signal when interrupted.
int run_workers(const Options& opts, const std::vector<std::string>& worker_argv, int nproc,
                const AttemptHooks& hooks = {});

// Note [Stale temporaries] (workers.cpp): removes the "*.tmp.<pid>" files in `dir` whose writer is
// no longer running on this machine.
void prune_stale_temporaries(const std::string& dir);
// argv with any --resume replaced by --resume auto (Note [Restarts] in launcher.cpp).
std::vector<std::string> resume_auto(const std::vector<std::string>& argv);
// Where --resume auto starts restarted workers, for the restart line: "from <newest checkpoint>",
// or "from the start (...)" saying why.
std::string resume_origin(const std::string& checkpoint_dir);

}  // namespace mt::app
