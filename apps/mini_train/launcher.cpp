// The --nproc launcher (see launcher.h): spawn, supervise, stop.
#include "apps/mini_train/launcher.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/mini_train/backend.h"
#include "apps/mini_train/gpus.h"
#include "apps/mini_train/outputs.h"
#include "distributed/heartbeat.h"
#include "distributed/socket.h"
#include "distributed/tcp_store.h"
#include "nn/checkpoint.h"
#include "tensor/check.h"

namespace mt::app {

namespace {

constexpr double kKillGraceSeconds = 3;

// 32 hex digits from /dev/urandom: the job token every rank and the store must agree on.
std::string random_token() {
  std::ifstream in("/dev/urandom", std::ios::binary);
  unsigned char bytes[16] = {};
  in.read(reinterpret_cast<char*>(bytes), sizeof bytes);
  MT_CHECK(in.good(), "--nproc: cannot read /dev/urandom for the job token");
  std::string hex;
  for (unsigned char b : bytes) {
    static const char* digits = "0123456789abcdef";
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  return hex;
}

// argv without "--nproc N" / "--nproc=N": what each worker runs. A worker learns its rank from the
// environment; --nnodes and --node-rank stay, for its config table.
std::vector<std::string> worker_args(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--nproc") {
      ++i;
      continue;
    }
    if (a.rfind("--nproc=", 0) == 0) continue;
    args.push_back(a);
  }
  return args;
}

struct Worker {
  pid_t pid = -1;
  bool running = false;
};

// What a wait status means, for the one line the launcher prints.
std::string describe(int rank, int status) {
  if (WIFSIGNALED(status))
    return "rank " + std::to_string(rank) + " was killed by signal " + std::to_string(WTERMSIG(status));
  return "rank " + std::to_string(rank) + " exited with code " + std::to_string(WEXITSTATUS(status));
}

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

// Reaps whatever has exited; returns the index of a worker that failed, or -1. Sets *status to its.
int reap(std::vector<Worker>& workers, int* failed_status) {
  int first_failure = -1;
  for (size_t r = 0; r < workers.size(); ++r) {
    if (!workers[r].running) continue;
    int status = 0;
    const pid_t p = waitpid(workers[r].pid, &status, WNOHANG);
    if (p != workers[r].pid) continue;
    workers[r].running = false;
    if (failed(status) && first_failure < 0) {
      first_failure = static_cast<int>(r);
      *failed_status = status;
    }
  }
  return first_failure;
}

bool any_running(const std::vector<Worker>& workers) {
  for (const Worker& w : workers)
    if (w.running) return true;
  return false;
}

// SIGTERM to every worker still running, SIGKILL to those left after the grace period; reaps all.
void stop_all(std::vector<Worker>& workers) {
  for (const Worker& w : workers)
    if (w.running) kill(w.pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kKillGraceSeconds);
  int ignored = 0;
  while (any_running(workers) && std::chrono::steady_clock::now() < deadline) {
    reap(workers, &ignored);
    usleep(20 * 1000);
  }
  for (const Worker& w : workers)
    if (w.running) kill(w.pid, SIGKILL);
  for (Worker& w : workers) {
    if (!w.running) continue;
    int status = 0;
    while (waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
    }
    w.running = false;
  }
}

// Forks a child that execs argv (after `setup` adjusts its environment); the child dies with the
// launcher, even if the launcher died before the child got this far.
pid_t spawn(const std::vector<std::string>& argv, const sigset_t& child_mask, pid_t launcher,
            const std::function<void()>& setup) {
  const pid_t pid = fork();
  if (pid != 0) return pid;  // the launcher (or -1)
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(1);
  sigprocmask(SIG_SETMASK, &child_mask, nullptr);
  setup();
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  execv(cargv[0], cargv.data());
  std::fprintf(stderr, "mini_train: cannot start %s: %s\n", cargv[0], std::strerror(errno));
  _exit(127);
}

// This binary's path, for children that exec it from another process (mpirun cannot use /proc/self).
std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  MT_CHECK(n > 0, "--nproc: cannot find this program's path (/proc/self/exe): ", std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

// Waits for the children; the first to fail, or SIGINT/SIGTERM, stops them all. `describe_failure`
// turns (index, wait status) into the one line printed. `watchdog` (when given) is asked at every
// wake-up whether a worker has stopped (Note [Heartbeat]): a line to print and stop them all, or none.
// Returns the launcher's exit code.
int supervise(std::vector<Worker>& workers, const sigset_t& watched,
              const std::function<std::string(int index, int status)>& describe_failure,
              const std::function<std::optional<std::string>()>& watchdog = {}) {
  while (any_running(workers)) {
    timespec wait_for{0, 200 * 1000 * 1000};  // wake on a signal or every 200 ms and reap
    const int sig = sigtimedwait(&watched, nullptr, &wait_for);
    if (sig == SIGINT || sig == SIGTERM) {
      stop_all(workers);
      std::fprintf(stderr, "mini_train: interrupted (signal %d), stopped the workers\n", sig);
      return 128 + sig;
    }
    int status = 0;
    const int index = reap(workers, &status);
    if (index >= 0) {
      stop_all(workers);
      std::fprintf(stderr, "mini_train: %s\n", describe_failure(index, status).c_str());
      return 1;
    }
    if (const std::optional<std::string> stopped = watchdog ? watchdog() : std::nullopt) {
      stop_all(workers);
      std::fprintf(stderr, "mini_train: %s\n", stopped->c_str());
      return 1;
    }
  }
  return 0;
}

// RAII: blocks SIGINT/SIGTERM/SIGCHLD, which the launcher takes with sigtimedwait (no async handler,
// no race between "a child exited" and "the user pressed Ctrl-C"); children get the old mask back.
struct LauncherSignals {
  sigset_t watched, old_mask;
  LauncherSignals() {
    sigemptyset(&watched);
    sigaddset(&watched, SIGINT);
    sigaddset(&watched, SIGTERM);
    sigaddset(&watched, SIGCHLD);
    sigprocmask(SIG_BLOCK, &watched, &old_mask);
  }
  ~LauncherSignals() { sigprocmask(SIG_SETMASK, &old_mask, nullptr); }
};

// --backend mpi: the job is `mpirun -np N <this binary> <args>`, one child, supervised like a worker.
// mpirun starts the ranks (they find rank and size in OMPI_COMM_WORLD_*, backend.cpp) and ends the
// job when one of them fails, printing which; we then print one line and exit 1.
int launch_mpirun(const Options& o, int nproc, const std::vector<std::string>& args) {
  const std::string mpirun = find_mpirun();
  MT_CHECK(!mpirun.empty(), "--backend mpi: no mpirun on the PATH (Debian: apt install openmpi-bin)");
  std::vector<std::string> argv{mpirun, "-np", std::to_string(nproc),
                                // One thread per rank, and the ranks may share cores: no pinning.
                                "--bind-to", "none"};
  // OpenMPI refuses more ranks than cores unless told that it is meant.
  if (nproc > static_cast<int>(std::thread::hardware_concurrency())) argv.push_back("--oversubscribe");
  argv.push_back(self_path());
  argv.insert(argv.end(), args.begin(), args.end());
  // Note [mpirun as root]: OpenMPI refuses to start as root (containers often are) unless both of
  // these are set. Starting a job the user asked for is not the place to refuse; we say so once.
  const bool root = geteuid() == 0;
  if (root && !o.quiet && !std::getenv("OMPI_ALLOW_RUN_AS_ROOT"))
    std::fprintf(stderr, "mini_train: note: running as root, so OMPI_ALLOW_RUN_AS_ROOT=1 and "
                 "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set for mpirun (OpenMPI's permission to run as root)\n");

  // Note [Store heartbeat] for MPI ranks, which meet without a store: this launcher hosts one for
  // their heartbeats alone (loopback, its own token), named to them in MT_HEARTBEAT_STORE.
  std::unique_ptr<dist::TCPStore> heartbeat_store;
  const std::string token = random_token();
  if (o.heartbeat_timeout > 0)
    heartbeat_store = std::make_unique<dist::TCPStore>(dist::TCPStoreOptions{
        .host = "127.0.0.1", .port = 0, .is_server = true, .job_token = token, .loopback_only = true});
  const std::string heartbeat_at = heartbeat_store ? "127.0.0.1:" + std::to_string(heartbeat_store->port()) : "";

  LauncherSignals signals;
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<Worker> job(1);
  const bool terminal = isatty(STDOUT_FILENO);
  const pid_t pid = spawn(argv, signals.old_mask, getpid(), [root, terminal, &heartbeat_at, &token] {
    if (!heartbeat_at.empty()) {
      setenv("MT_HEARTBEAT_STORE", heartbeat_at.c_str(), 1);
      setenv("MT_JOB_TOKEN", token.c_str(), 1);
    }
    setenv("OPENBLAS_NUM_THREADS", "1", 0);  // 0: keep the user's value; N ranks share the cores
    if (!terminal) setenv("MT_NO_PROGRESS", "1", 1);  // progress.h
    if (root) {
      setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
      setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
  });
  MT_CHECK(pid > 0, "--nproc: fork failed: ", std::strerror(errno));
  job[0] = {pid, true};
  return supervise(job, signals.watched, [](int, int status) {
    return "the MPI job failed: mpirun " + (WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                                                 : "exited with code " + std::to_string(WEXITSTATUS(status))) +
           " (the failing rank's own line is above)";
  });
}

// Note [Stale temporaries]: a save writes "<file>.tmp.<pid>" and renames it (nn/safetensors.cpp);
// a worker killed mid-save leaves that file behind for good. Before workers start (the first time
// and at every restart), the ones in --checkpoint-dir whose writer is no longer running on this
// machine are removed. A file of a live process (another job's save in progress) stays.
void prune_stale_temporaries(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos) continue;
    const std::string pid = name.substr(at + 5);
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (kill(static_cast<pid_t>(std::stol(pid)), 0) == 0 || errno != ESRCH) continue;  // its writer lives
    fs::remove(entry.path(), ec);
  }
}

// The arguments after the program name.
std::vector<std::string> worker_argv_tail(const std::vector<std::string>& argv) {
  return std::vector<std::string>(argv.begin() + 1, argv.end());
}

// argv with any --resume replaced by --resume auto (Note [Restarts]).
std::vector<std::string> resume_auto(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--resume") {
      ++i;
      continue;
    }
    if (argv[i].rfind("--resume=", 0) == 0) continue;
    out.push_back(argv[i]);
  }
  out.insert(out.end(), {"--resume", "auto"});
  return out;
}

// One run of this node's workers: spawn them, supervise them (Note [Heartbeat] included). Returns
// the launcher's exit code: 0, 1 after a failure (its line printed), 128 + signal when interrupted.
int run_workers(const Options& o, const std::vector<std::string>& worker_argv, int nproc) {
  const int port = o.master_port > 0 ? o.master_port : dist::find_free_port();
  // Note [Ranks across nodes]: node k's workers are global ranks k·nproc ... k·nproc + nproc - 1;
  // LOCAL_RANK counts within the node (it picks the GPU). Every node must run the same --nproc.
  const int world = nproc * o.nnodes, first_rank = nproc * o.node_rank;
  // One machine: a fresh random token. Several: every node must present the same one, so it comes
  // from the environment (export the same MT_JOB_TOKEN on every node), or is empty, as with torchrun.
  const char* env_token = std::getenv("MT_JOB_TOKEN");
  const std::string token = o.nnodes == 1 ? random_token() : env_token ? env_token : "";
  if (o.nnodes > 1 && (!env_token || !*env_token) && !o.quiet && o.node_rank == 0)
    std::fprintf(stderr, "mini_train: warning: --nnodes %d without MT_JOB_TOKEN: the store on port %d accepts any "
                 "process that can reach it. Export the same MT_JOB_TOKEN (any secret string) on every node\n",
                 o.nnodes, port);

  LauncherSignals signals;
  std::vector<Worker> workers(static_cast<size_t>(nproc));
  // Note [Heartbeat]: one pipe per worker; a worker silent for --heartbeat-timeout has stopped.
  std::optional<dist::HeartbeatMonitor> heartbeats;
  if (o.heartbeat_timeout > 0) heartbeats.emplace(std::chrono::seconds(o.heartbeat_timeout));
  std::vector<int> heartbeat_fds;
  for (int rank = 0; rank < nproc && heartbeats; ++rank) heartbeat_fds.push_back(heartbeats->add(first_rank + rank));
  std::fflush(stdout);
  std::fflush(stderr);
  for (int rank = 0; rank < nproc; ++rank) {
    const pid_t pid = spawn(worker_argv, signals.old_mask, getpid(), [&] {
      if (heartbeats) {
        dist::HeartbeatMonitor::keep_across_exec(heartbeat_fds[rank]);
        setenv("MT_HEARTBEAT_FD", std::to_string(heartbeat_fds[rank]).c_str(), 1);
      }
      setenv("RANK", std::to_string(first_rank + rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("MT_JOB_TOKEN", token.c_str(), 1);
      setenv("OPENBLAS_NUM_THREADS", "1", 0);  // 0: keep the user's value
    });
    if (pid < 0) {
      const int err = errno;
      stop_all(workers);
      MT_FAIL("--nproc: fork failed: ", std::strerror(err));
    }
    workers[static_cast<size_t>(rank)] = {pid, true};
  }
  if (heartbeats) heartbeats->close_worker_ends();
  const auto watchdog = [&]() -> std::optional<std::string> {
    if (!heartbeats) return std::nullopt;
    const auto stale = heartbeats->poll();
    if (!stale) return std::nullopt;
    kill(workers[static_cast<size_t>(stale->rank - first_rank)].pid, SIGKILL);  // stopped: SIGTERM would wait
    char silent[32];
    std::snprintf(silent, sizeof silent, "%.0f", stale->silent_seconds);
    return "rank " + std::to_string(stale->rank) + " stopped: no heartbeat for " + silent +
           " s (--heartbeat-timeout " + std::to_string(o.heartbeat_timeout) +
           "; the process is stopped or frozen, e.g. by SIGSTOP). Its last phase: " + stale->last_phase +
           ". Stopped the workers";
  };
  return supervise(workers, signals.watched,
                   [first_rank](int index, int status) { return describe(first_rank + index, status); }, watchdog);
}

}  // namespace

int launch(int argc, char** argv, const Options& o) {
  validate(o);  // refuse bad options once, not once per rank
  const int nproc = worker_count(o);  // --nproc, or one worker per --gpus GPU (gpus.h): on this node
  MT_CHECK(nproc >= 2 || o.nnodes > 1, "--nproc must be at least 2 to launch workers, got ", nproc);
  MT_CHECK(nproc <= 256, "--nproc must be at most 256, got ", nproc);
  // The outputs' folders, checked here once before any worker starts (rank 0 checks again with the
  // model's size). Otherwise rank 0's error races its peers: its unwinding closes its connections,
  // a peer fails on them first, and the launcher stops rank 0 before its line is printed.
  if (o.node_rank == 0) check_outputs(o, {});
  const std::vector<std::string> args = worker_args(argc, argv);
  MT_CHECK(o.max_restarts == 0 || o.nnodes == 1, "--max-restarts restarts the workers of one machine; with "
           "--nnodes ", o.nnodes, " the nodes would restart apart: one count per job needs a store that outlives the workers and a shared "
           "--checkpoint-dir (not written yet; docs/ddp.md, Restarts, says why)");
  // This binary by its real path, not /proc/self/exe: ps and top then show "mini_train ..." with
  // the worker's arguments.
  std::vector<std::string> worker_argv{self_path()};
  worker_argv.insert(worker_argv.end(), args.begin(), args.end());
  // Note [Restarts]: --max-restarts K reruns every worker of this machine after a failure, at most K
  // times in the job, from the newest checkpoint of --checkpoint-dir (--resume auto), or from the start
  // without one. Checkpoints resume exactly (trainer.cpp), so the final weights are bit-for-bit those
  // of a run that never failed. An interrupt (Ctrl-C) is never restarted.
  for (int restart = 0;; ++restart) {
    prune_stale_temporaries(o.checkpoint_dir);  // Note [Stale temporaries]
    const int rc = o.gpus.empty() && launch_backend(o) == "mpi" ? launch_mpirun(o, nproc, worker_argv_tail(worker_argv))
                                                                 : run_workers(o, worker_argv, nproc);
    if (rc == 0 || rc > 128 || restart >= o.max_restarts) return rc;
    if (!o.checkpoint_dir.empty()) worker_argv = resume_auto(worker_argv);
    const std::string newest = latest_checkpoint(o.checkpoint_dir);  // what --resume auto will take
    const std::string from = o.checkpoint_dir.empty() ? "from the start (no --checkpoint-dir)"
                             : newest.empty()         ? "from the start (no checkpoint in " + o.checkpoint_dir + " yet)"
                                                      : "from " + newest;
    std::fprintf(stderr, "mini_train: restart %d of %d (--max-restarts) after the failure above: all workers "
                 "again, %s\n", restart + 1, o.max_restarts, from.c_str());
  }
}

}  // namespace mt::app
