// The launcher's child processes: spawn, reap, stop, supervise (see workers.h).
#include "apps/mini_train/workers.h"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "apps/mini_train/interrupt.h"
#include "distributed/fault/heartbeat.h"
#include "distributed/store/tcp_store.h"
#include "nn/checkpoint.h"
#include "tensor/check.h"

namespace mt::app {

namespace {

constexpr double kKillGraceSeconds = 3;
// How long the launcher waits, after a worker failed, for the one that failed first to say why
// and exit (Note [The first failure is the one reported] in distributed/fault/heartbeat.h).
constexpr auto kFailureGrace = std::chrono::seconds(2);

// What a wait status means, for the one line the launcher prints.
std::string describe(int rank, int status) {
  if (WIFSIGNALED(status))
    return "rank " + std::to_string(rank) + " was killed by signal " + std::to_string(WTERMSIG(status));
  return "rank " + std::to_string(rank) + " exited with code " + std::to_string(WEXITSTATUS(status));
}

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

// Reaps whatever has exited, keeping each one's status and time of exit.
void reap(std::vector<Worker>& workers) {
  for (Worker& w : workers) {
    if (!w.running) continue;
    int status = 0;
    if (waitpid(w.pid, &status, WNOHANG) != w.pid) continue;
    w.running = false;
    w.status = status;
    w.exited = std::chrono::steady_clock::now();
  }
}

bool any_running(const std::vector<Worker>& workers) {
  for (const Worker& w : workers)
    if (w.running) return true;
  return false;
}

}  // namespace

LauncherSignals::LauncherSignals() {
  sigemptyset(&watched);
  sigaddset(&watched, SIGINT);
  sigaddset(&watched, SIGTERM);
  sigaddset(&watched, SIGCHLD);
  sigprocmask(SIG_BLOCK, &watched, &old_mask);
}

LauncherSignals::~LauncherSignals() { sigprocmask(SIG_SETMASK, &old_mask, nullptr); }

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

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  MT_CHECK(n > 0, "--nproc: cannot find this program's path (/proc/self/exe): ", std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

void stop_all(std::vector<Worker>& workers) {
  for (const Worker& w : workers)
    if (w.running) kill(w.pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(kKillGraceSeconds);
  while (any_running(workers) && std::chrono::steady_clock::now() < deadline) {
    reap(workers);
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

namespace {

// A worker's failure as far as the launcher knows it: what it reported, or how it exited.
struct Failing {
  int index = -1;
  bool consequence = false;  // it failed because a peer did
  std::chrono::steady_clock::time_point at{};
};

// Note [The first failure is the one reported] (distributed/fault/heartbeat.h): a worker's own
// failure before a peer's consequence, then the earlier. A worker that exited non-zero without a
// report (killed, or failed before it could report) counts as its own failure, at its exit.
std::optional<Failing> first_failure(const std::vector<Worker>& workers, const Supervision& how) {
  std::optional<Failing> first;
  for (size_t i = 0; i < workers.size(); ++i) {
    const int index = static_cast<int>(i);
    Failing f{.index = index};
    if (const auto report = how.failure_report ? how.failure_report(index) : std::nullopt)
      f = {.index = index, .consequence = report->consequence, .at = report->at};
    else if (!workers[i].running && failed(workers[i].status))
      f = {.index = index, .consequence = false, .at = workers[i].exited};
    else
      continue;
    if (!first || std::pair(f.consequence, f.at) < std::pair(first->consequence, first->at)) first = f;
  }
  return first;
}

// After a failure: waits up to kFailureGrace for the rank that failed first to have exited (its own
// line printed), or for every worker to have; returns that rank's line.
std::string await_first_failure(std::vector<Worker>& workers, const Supervision& how) {
  const auto deadline = std::chrono::steady_clock::now() + kFailureGrace;
  while (true) {
    reap(workers);
    const std::optional<Failing> first = first_failure(workers, how);
    const bool settled = first && !first->consequence && !workers[static_cast<size_t>(first->index)].running;
    if (first && (settled || !any_running(workers) || std::chrono::steady_clock::now() >= deadline)) {
      const Worker& w = workers[static_cast<size_t>(first->index)];
      std::string line = w.running ? how.describe_failure(first->index, std::nullopt)
                                   : how.describe_failure(first->index, w.status);
      // Its own reason; a consequence's ("a peer closed its connection") is on the rank's own line
      // already and names no cause (another node's launcher may add it: Supervision::on_failure).
      if (const auto report = how.failure_report ? how.failure_report(first->index) : std::nullopt;
          report && !report->consequence)
        line += ": " + report->line;
      return line;
    }
    usleep(20 * 1000);
  }
}

bool any_failure(const std::vector<Worker>& workers, const Supervision& how) {
  for (size_t i = 0; i < workers.size(); ++i)
    if ((!workers[i].running && failed(workers[i].status)) ||
        (how.failure_report && how.failure_report(static_cast<int>(i))))
      return true;
  return false;
}

}  // namespace

int supervise(std::vector<Worker>& workers, const sigset_t& watched, const Supervision& how) {
  while (any_running(workers)) {
    timespec wait_for{0, 200 * 1000 * 1000};  // wake on a signal or every 200 ms and reap
    const int sig = sigtimedwait(&watched, nullptr, &wait_for);
    if (sig == SIGINT || sig == SIGTERM) {
      if (how.on_interrupt) how.on_interrupt(sig);
      stop_all(workers);
      std::fprintf(stderr, "mini_train: interrupted (%s), stopped the workers%s%s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                   how.trainer ? ": " : "", how.trainer ? what_is_saved(how.checkpoint_dir).c_str() : "");
      return 128 + sig;
    }
    reap(workers);
    if (any_failure(workers, how)) {
      std::string line = await_first_failure(workers, how);
      if (how.on_failure) line = how.on_failure(line);
      stop_all(workers);
      std::fprintf(stderr, "mini_train: %s\n", line.c_str());
      return 1;
    }
    if (const std::optional<WatchdogStop> stop = how.watchdog ? how.watchdog() : std::nullopt) {
      stop_all(workers);
      std::fprintf(stderr, "mini_train: %s%s\n", stop->work_done ? "warning: " : "", stop->line.c_str());
      return stop->work_done ? 0 : 1;
    }
  }
  return 0;
}

namespace {

// What a worker finds in its environment: the env:// rendezvous torchrun also sets, this job's
// token and store prefix, and its heartbeat pipe (Note [Heartbeat]).
struct WorkerEnv {
  int rank = 0, local_rank = 0, world = 1, local_world = 1;
  std::string master_addr;
  int port = 0;
  std::string token, store_prefix;
  int heartbeat_fd = -1;
};

// In the child, between fork and exec.
void set_worker_env(const WorkerEnv& e) {
  dist::HeartbeatMonitor::keep_across_exec(e.heartbeat_fd);
  setenv("MT_HEARTBEAT_FD", std::to_string(e.heartbeat_fd).c_str(), 1);
  setenv("RANK", std::to_string(e.rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(e.local_rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(e.world).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(e.local_world).c_str(), 1);
  setenv("MASTER_ADDR", e.master_addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(e.port).c_str(), 1);
  setenv("MT_JOB_TOKEN", e.token.c_str(), 1);
  if (!e.store_prefix.empty()) setenv("MT_STORE_PREFIX", e.store_prefix.c_str(), 1);
  setenv("OPENBLAS_NUM_THREADS", "1", 0);  // 0: keep the user's value
}

}  // namespace

WatchdogStop stopped_worker(const dist::HeartbeatMonitor::Stale& stale, int64_t timeout) {
  char silent[32];
  std::snprintf(silent, sizeof silent, "%.0f", stale.silent_seconds);
  const std::string rank = "rank " + std::to_string(stale.rank);
  const std::string why = "no heartbeat for " + std::string(silent) + " s (--heartbeat-timeout " + std::to_string(timeout) +
                          "; the process is stopped or frozen, e.g. by SIGSTOP)";
  if (stale.finalizing && stale.beating) {  // Note [Watched from start to exit]
    std::string ranks = stale.lingering.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < stale.lingering.size(); ++i) ranks += (i ? ", " : "") + std::to_string(stale.lingering[i]);
    return {.line = ranks + (stale.lingering.size() == 1 ? " has" : " have") + " not exited " + silent +
                    " s after every rank finished its work (--heartbeat-timeout " + std::to_string(timeout) +
                    "; stuck in finalize, e.g. in MPI_Finalize, or waiting there for one that is). The job is done " +
                    "(rank 0 wrote its outputs); stopped the workers that had not exited",
            .work_done = true};
  }
  if (stale.finalizing)
    return {.line = rank + " stopped in finalize, after its work: " + why + ". Every rank had finished its work " +
                    "(rank 0 wrote its outputs), so the job is done; stopped the workers that had not exited",
            .work_done = true};
  return {.line = rank + " stopped: " + why + ". Its last phase: " + stale.last_phase + ". Stopped the workers"};
}

void kill_process_tree(pid_t root) {
  namespace fs = std::filesystem;
  // Every process's parent, from /proc/<pid>/stat: "pid (comm) state ppid ...", comm may hold spaces.
  std::vector<std::pair<pid_t, pid_t>> parent_of;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');
    if (close == std::string::npos || close + 4 >= line.size()) continue;
    const pid_t ppid = static_cast<pid_t>(std::atol(line.c_str() + close + 4));  // past ") S "
    parent_of.emplace_back(static_cast<pid_t>(std::stol(name)), ppid);
  }
  std::vector<pid_t> tree{root};
  for (size_t i = 0; i < tree.size(); ++i)
    for (const auto& [pid, ppid] : parent_of)
      if (ppid == tree[i]) tree.push_back(pid);
  for (pid_t pid : tree) kill(pid, SIGKILL);
}

int run_workers(const Options& o, const std::vector<std::string>& worker_argv, int nproc, const AttemptHooks& hooks) {
  const int port = o.master_port > 0 ? o.master_port : dist::find_free_port();
  // Note [Ranks across nodes]: node k's workers are global ranks k·nproc ... k·nproc + nproc - 1;
  // LOCAL_RANK counts within the node (it picks the GPU). Every node must run the same --nproc.
  const int world = nproc * o.nnodes, first_rank = nproc * o.node_rank;
  // One machine: a fresh random token. Several: every node must present the same one, so it comes
  // from the environment (export the same MT_JOB_TOKEN on every node), or is empty, as with torchrun.
  const char* env_token = std::getenv("MT_JOB_TOKEN");
  const std::string token = o.nnodes == 1 ? random_token() : env_token ? env_token : "";

  LauncherSignals signals;
  std::vector<Worker> workers(static_cast<size_t>(nproc));
  // One pipe per worker; a worker silent for --heartbeat-timeout has stopped (Note [Heartbeat]), and
  // a failing one says why (Note [The first failure is the one reported]), even with the timeout 0.
  dist::HeartbeatMonitor heartbeats(std::chrono::seconds(o.heartbeat_timeout), !hooks.any_program);
  std::vector<int> heartbeat_fds;
  for (int rank = 0; rank < nproc; ++rank) heartbeat_fds.push_back(heartbeats.add(first_rank + rank));
  std::fflush(stdout);
  std::fflush(stderr);
  for (int rank = 0; rank < nproc; ++rank) {
    const WorkerEnv env{.rank = first_rank + rank, .local_rank = rank, .world = world, .local_world = nproc,
                        .master_addr = o.master_addr, .port = port, .token = token,
                        .store_prefix = hooks.store_prefix, .heartbeat_fd = heartbeat_fds[rank]};
    const pid_t pid = spawn(worker_argv, signals.old_mask, getpid(), [&] { set_worker_env(env); });
    if (pid < 0) {
      const int err = errno;
      stop_all(workers);
      MT_FAIL("--nproc: fork failed: ", std::strerror(err));
    }
    workers[static_cast<size_t>(rank)] = {.pid = pid, .running = true};
  }
  heartbeats.close_worker_ends();
  const auto stopped = [&]() -> std::optional<WatchdogStop> {
    for (int rank = 0; rank < nproc; ++rank)
      if (!workers[static_cast<size_t>(rank)].running) heartbeats.exited(first_rank + rank);
    const auto stale = heartbeats.poll();
    if (!stale) return std::nullopt;
    kill(workers[static_cast<size_t>(stale->rank - first_rank)].pid, SIGKILL);  // stopped: SIGTERM would wait
    return stopped_worker(*stale, o.heartbeat_timeout);
  };
  const auto watchdog = [&]() -> std::optional<WatchdogStop> {
    if (std::optional<WatchdogStop> stop = stopped()) {
      if (!stop->work_done && hooks.on_failure) stop->line = hooks.on_failure(stop->line);
      return stop;
    }
    if (const auto line = hooks.poll ? hooks.poll() : std::nullopt) return WatchdogStop{.line = *line};
    return std::nullopt;
  };
  return supervise(workers, signals.watched,
                   {.describe_failure = [first_rank](int index, std::optional<int> status) {
                      return status ? describe(first_rank + index, *status) : "rank " + std::to_string(first_rank + index) + " failed";
                    },
                    .failure_report = [&](int index) { return heartbeats.failure(first_rank + index); },
                    .watchdog = watchdog,
                    .on_failure = hooks.on_failure,
                    .on_interrupt = hooks.on_interrupt,
                    .checkpoint_dir = o.checkpoint_dir,
                    .trainer = !hooks.any_program});
}

// Note [Stale temporaries]: a save writes "<file>.tmp.<pid>" and renames it (Note [Output files]);
// a worker killed mid-save leaves that file behind for good. Before workers start (the first time
// and at every restart), the ones in --checkpoint-dir whose writer is no longer running on this
// machine are removed. A file of a live process (another job's save in progress) stays. On several
// machines only node 0 prunes: the folder is shared (Note [Restarts across nodes]), rank 0 (node
// 0) is its only writer, and another machine cannot tell whether node 0's pids live.
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

std::string resume_origin(const std::string& dir) {
  const std::string newest = latest_checkpoint(dir);  // what --resume auto will take
  return dir.empty()      ? "from the start (no --checkpoint-dir)"
         : newest.empty() ? "from the start (no checkpoint in " + dir + " yet)"
                          : "from " + newest;
}

}  // namespace mt::app
