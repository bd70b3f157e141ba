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
#include <fstream>
#include <string>
#include <vector>

#include "distributed/socket.h"
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

// argv without "--nproc N" / "--nproc=N": what each worker runs.
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

}  // namespace

int launch(int argc, char** argv, const Options& o) {
  validate(o);  // refuse bad options once, not once per rank
  MT_CHECK(o.nproc >= 2, "--nproc must be at least 2 to launch workers, got ", o.nproc);
  MT_CHECK(o.nproc <= 256, "--nproc must be at most 256, got ", o.nproc);
  const int port = o.master_port > 0 ? o.master_port : dist::find_free_port();
  const std::string token = random_token();
  const std::vector<std::string> args = worker_args(argc, argv);

  // Block SIGINT/SIGTERM/SIGCHLD and take them with sigtimedwait: no async handler, no race between
  // "a child exited" and "the user pressed Ctrl-C". Children get the old mask back before exec.
  sigset_t watched, old_mask;
  sigemptyset(&watched);
  sigaddset(&watched, SIGINT);
  sigaddset(&watched, SIGTERM);
  sigaddset(&watched, SIGCHLD);
  sigprocmask(SIG_BLOCK, &watched, &old_mask);
  const pid_t launcher = getpid();

  std::vector<Worker> workers(static_cast<size_t>(o.nproc));
  std::fflush(stdout);
  std::fflush(stderr);
  for (int rank = 0; rank < o.nproc; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      const int err = errno;
      stop_all(workers);
      sigprocmask(SIG_SETMASK, &old_mask, nullptr);
      MT_FAIL("--nproc: fork failed: ", std::strerror(err));
    }
    if (pid == 0) {
      // The child: die with the launcher, even if it died before we got here.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(1);
      sigprocmask(SIG_SETMASK, &old_mask, nullptr);
      const std::string world = std::to_string(o.nproc), r = std::to_string(rank);
      setenv("RANK", r.c_str(), 1);
      setenv("LOCAL_RANK", r.c_str(), 1);
      setenv("WORLD_SIZE", world.c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", world.c_str(), 1);
      setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("MT_JOB_TOKEN", token.c_str(), 1);
      setenv("OPENBLAS_NUM_THREADS", "1", 0);  // 0: keep the user's value
      std::vector<char*> cargv;
      cargv.push_back(argv[0]);
      for (const std::string& a : args) cargv.push_back(const_cast<char*>(a.c_str()));
      cargv.push_back(nullptr);
      execv("/proc/self/exe", cargv.data());
      std::fprintf(stderr, "mini_train: rank %d: cannot start /proc/self/exe: %s\n", rank, std::strerror(errno));
      _exit(127);
    }
    workers[static_cast<size_t>(rank)] = {pid, true};
  }

  // Supervise: wake on a signal or every 200 ms and reap.
  int exit_code = 0;
  while (any_running(workers)) {
    timespec wait_for{0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&watched, nullptr, &wait_for);
    if (sig == SIGINT || sig == SIGTERM) {
      stop_all(workers);
      std::fprintf(stderr, "mini_train: interrupted (signal %d), stopped %d workers\n", sig, o.nproc);
      exit_code = 128 + sig;
      break;
    }
    int status = 0;
    const int rank = reap(workers, &status);
    if (rank >= 0) {
      stop_all(workers);
      std::fprintf(stderr, "mini_train: %s\n", describe(rank, status).c_str());
      exit_code = 1;
      break;
    }
  }
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  return exit_code;
}

}  // namespace mt::app
