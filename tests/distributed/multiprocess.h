// Runs a test body in N real processes, as ranks 0..N-1 of a job, and reports how each one ended.
//
//   mt::test::run_ranks(4, [&](int rank) { ... MT_CHECK(...) ... });
//
// The processes are fork()ed children of the test, so the body sees everything the test set up
// before (a port number, a temporary directory). A child reports failure by throwing: MT_CHECK
// works, doctest's CHECK does not (its result would stay in the child's copy of doctest). The
// exception's message comes back through a pipe and is shown by the parent's CHECK.
//
// No child outlives the test: all children share one process group, which is SIGKILLed when
// wait() times out and when the Ranks object is destroyed (also when a REQUIRE throws); each child
// also asks the kernel to SIGKILL it should the test process die (PR_SET_PDEATHSIG).
// Children leave with _exit(): no atexit handlers, no static destructors, no doctest report.
// Under mpirun (MT_TEST_BACKEND=mpi) there is no fork: see Note [Tests under mpirun].
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "distributed/process_group/init_process_group.h"
#include "distributed/process_group/gloo/process_group_gloo.h"
#include "distributed/process_group/mpi/process_group_mpi.h"
#include "distributed/store/rendezvous.h"

namespace mt::test {

struct RankResult {
  int rank = 0;
  bool exited = false;     // exited normally (else: killed by a signal, or by the timeout)
  int exit_code = -1;
  int signal = 0;
  bool timed_out = false;
  std::string message{};   // what the child threw, if it threw

  bool ok() const { return exited && exit_code == 0; }
  std::string describe() const {
    std::string s = "rank " + std::to_string(rank) + ": ";
    if (timed_out) s += "still running at the timeout (killed)";
    else if (!exited) s += "killed by signal " + std::to_string(signal);
    else s += "exit code " + std::to_string(exit_code);
    return message.empty() ? s : s + ": " + message;
  }
};

class Ranks {
 public:
  Ranks(int n, const std::function<void(int rank)>& body) {
    std::fflush(stdout);  // or the children would print the parent's buffered output again
    std::fflush(stderr);
    const pid_t parent = ::getpid();
    for (int rank = 0; rank < n; ++rank) {
      int fds[2];
      REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
      const pid_t pid = ::fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        ::close(fds[0]);
        ::setpgid(0, pgid_);  // pgid_ is 0 for rank 0: a new group, led by rank 0
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(111);  // the test died before prctl took effect
        std::string message;
        try {
          body(rank);
        } catch (const std::exception& e) {
          message = e.what();
        } catch (...) {
          message = "unknown exception";
        }
        if (!message.empty()) {
          [[maybe_unused]] const ssize_t written = ::write(fds[1], message.data(), std::min<size_t>(message.size(), 16384));
        }
        ::_exit(message.empty() ? 0 : 1);
      }
      ::close(fds[1]);
      if (rank == 0) pgid_ = pid;
      ::setpgid(pid, pgid_);  // in the parent too: no moment where a child is outside the group
      children_.push_back(Child{pid, fds[0], RankResult{.rank = rank}, false});
    }
  }

  ~Ranks() {
    kill_all();
    for (auto& c : children_) ::close(c.pipe);
  }
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  // Waits until every child has exited; at `timeout`, kills those still running.
  std::vector<RankResult> wait(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      bool running = false;
      for (auto& c : children_) {
        if (c.reaped) continue;
        int status = 0;
        if (::waitpid(c.pid, &status, WNOHANG) == c.pid) record(c, status);
        running |= !c.reaped;
      }
      if (!running) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        for (auto& c : children_) c.result.timed_out = !c.reaped;
        kill_all();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::vector<RankResult> results;
    for (auto& c : children_) {
      char buf[4096];
      ssize_t n;
      while ((n = ::read(c.pipe, buf, sizeof(buf))) > 0) c.result.message.append(buf, static_cast<size_t>(n));
      results.push_back(c.result);
    }
    return results;
  }

 private:
  struct Child {
    pid_t pid;
    int pipe;  // read end; the child writes its error message
    RankResult result;
    bool reaped;
  };

  static void record(Child& c, int status) {
    c.reaped = true;
    c.result.exited = WIFEXITED(status);
    c.result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    c.result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }

  void kill_all() {
    bool any = false;
    for (auto& c : children_) any |= !c.reaped;
    if (!any) return;  // all reaped: the group is gone, and its id may belong to someone else by now
    ::kill(-pgid_, SIGKILL);
    for (auto& c : children_) {
      if (c.reaped) continue;
      int status = 0;
      ::waitpid(c.pid, &status, 0);
      record(c, status);
    }
  }

  pid_t pgid_ = 0;
  std::vector<Child> children_;
};

// Note [Tests under mpirun]: the multi-process tests also run on ProcessGroupMPI. Then the test
// binary is itself one rank of a job started by `mpirun -np N` with MT_TEST_BACKEND=mpi
// (tests/CMakeLists.txt): the processes exist already, so run_ranks runs the body right here, as
// this process's rank, when n is the job's size, and skips (saying so) the worlds of other sizes.
// The test's join() helpers make an MPI group instead of a Gloo one in that mode.
inline bool mpi_mode() {
  const char* backend = std::getenv("MT_TEST_BACKEND");
  return backend && std::string(backend) == "mpi";
}

inline void run_as_mpi_rank(int n, const std::function<void(int rank)>& body) {
  const auto job = dist::rendezvous_from_mpi_launcher();
  REQUIRE_MESSAGE(job.has_value(), "MT_TEST_BACKEND=mpi, but this process was not started by mpirun");
  if (job->world_size != n) {
    MESSAGE("skipped under mpirun -np ", job->world_size, ": this part needs ", n, " ranks");
    return;
  }
  try {
    body(job->rank);
  } catch (const std::exception& e) {
    FAIL_CHECK("rank ", job->rank, ": ", std::string(e.what()));
  }
}

// The process group of one rank in a test: Gloo at 127.0.0.1:port between fork()ed ranks, or MPI
// when the binary runs under mpirun (Note [Tests under mpirun]); a 10 s timeout.
inline std::shared_ptr<dist::ProcessGroup> join_group(int rank, int world, int port) {
  using namespace std::chrono_literals;
  if (mpi_mode())
    return dist::init_process_group({.backend = "mpi", .rendezvous = {.rank = rank, .world_size = world},
                                     .timeout = 10s});
  return dist::init_process_group({.backend = "gloo",
                                   .rendezvous = {.rank = rank, .world_size = world, .local_rank = rank,
                                                  .local_world_size = world, .master_addr = "127.0.0.1",
                                                  .master_port = port},
                                   .timeout = 10s,
                                   .job_token = "test"});
}

// Whether join_group can work in this build: tests skip (visibly) when it cannot.
inline bool group_backend_available() {
  return mpi_mode() ? dist::ProcessGroupMPI::is_available() : dist::ProcessGroupGloo::is_available();
}

// Runs `body` as n ranks and checks that every one of them succeeded.
inline void run_ranks(int n, const std::function<void(int rank)>& body,
                      std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  if (mpi_mode()) return run_as_mpi_rank(n, body);  // Note [Tests under mpirun]
  Ranks ranks(n, body);
  for (const RankResult& r : ranks.wait(timeout)) CHECK_MESSAGE(r.ok(), r.describe());
}

}  // namespace mt::test
