// mini_train's test hooks (see test_hooks.h).
#include "apps/mini_train/test_hooks.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <chrono>

#include "distributed/process_group/mpi/process_group_mpi.h"
#include "tensor/check.h"

namespace mt::app {

void test_fail_hook(int rank, int64_t epoch) {
  const char* r = std::getenv("MT_TEST_FAIL_RANK");
  const char* e = std::getenv("MT_TEST_FAIL_EPOCH");
  if (r && e && std::atoi(r) == rank && std::atoll(e) == epoch) {
    std::fprintf(stderr, "mini_train: rank %d: MT_TEST_FAIL_RANK: failing at epoch %lld\n", rank,
                 static_cast<long long>(epoch));
    dist::ProcessGroupMPI::abort_job(3);  // as main() does for a real failure
    std::exit(3);
  }
  r = std::getenv("MT_TEST_ERROR_RANK");
  e = std::getenv("MT_TEST_ERROR_EPOCH");
  if (r && e && std::atoi(r) == rank && std::atoll(e) == epoch)
    MT_FAIL("MT_TEST_ERROR_RANK: rank ", rank, " fails at epoch ", epoch, ", as on a full disk");
}

void test_kill_hook(int rank, int64_t step, bool resumed) {
  static const char* const at = std::getenv("MT_TEST_KILL_STEP");  // read once: this runs every step
  if (!at || resumed || std::atoll(at) != step) return;
  const char* r = std::getenv("MT_TEST_KILL_RANK");
  if ((r ? std::atoi(r) : 0) != rank) return;
  std::fprintf(stderr, "mini_train: rank %d: MT_TEST_KILL_STEP: SIGKILL after step %lld\n", rank,
               static_cast<long long>(step));
  std::fflush(stderr);
  std::raise(SIGKILL);
}

void test_stop_hook(int rank, dist::Phase phase) {
  const char* r = std::getenv("MT_TEST_STOP_RANK");
  const char* p = std::getenv("MT_TEST_STOP_PHASE");
  if (!r || !p || std::atoi(r) != rank) return;
  const std::string name = phase == dist::Phase::Init ? "init" : phase == dist::Phase::Finalize ? "finalize" : "";
  if (name + "-hang" == p)  // alive and beating, but never leaving finalize
    while (true) std::this_thread::sleep_for(std::chrono::hours(1));
  if (name != p) return;
  std::raise(SIGSTOP);  // silently: a stopped process says nothing
}

}  // namespace mt::app
