// ProcessGroupMPI, run as the ranks of an mpirun job (tests/CMakeLists.txt starts this binary with
// `mpirun -np N`; Note [Tests under mpirun] in tests/distributed/multiprocess.h): rank and size from
// the launcher, the same closed-form collectives as every backend, collectives in flight while the
// caller goes on, and a peer that never comes ending in a TimeoutError instead of a hang. A rank that
// dies mid-collective is tested from outside the job (rank_exit.sh), since the job is meant to end.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <unistd.h>

#include "collectives.h"
#include "flat_collectives.h"
#include "distributed/process_group/init_process_group.h"
#include "distributed/process_group/mpi/process_group_mpi.h"
#include "distributed/store/rendezvous.h"
#include "multiprocess.h"

using namespace mt;
using namespace mt::dist;
using namespace std::chrono_literals;

namespace {

RendezvousInfo job() {
  const auto info = rendezvous_from_mpi_launcher();
  MT_CHECK(info.has_value(), "this test binary must be started by mpirun (see tests/CMakeLists.txt)");
  return *info;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("ProcessGroupMPI: rank and size come from the launcher, and the collectives give closed-form results") {
  const RendezvousInfo who = job();
  test::run_as_mpi_rank(who.world_size, [&](int rank) {
    auto pg = init_process_group({.backend = "mpi", .rendezvous = who, .timeout = 10s});
    MT_CHECK(pg->rank() == rank && pg->size() == who.world_size && pg->backend() == "mpi", "group identity: rank ",
             pg->rank(), " of ", pg->size());
    MT_CHECK(ProcessGroupMPI::thread_level() == "MPI_THREAD_SERIALIZED", "thread level ",
             ProcessGroupMPI::thread_level());
    test::check_collectives(*pg);
    test::check_same_bits(*pg);  // Note [Same bits on every rank]
    test::check_flat_collectives(*pg, {.rank_order_max_bytes = 0});  // MPI's reduce-scatter sums in its own order
    // float16 has no MPI type: it is reduced by our own MPI_Op, through float32.
    const int n = who.world_size;
    Tensor half = full({5}, rank + 1.0).to(DType::Float16);
    pg->allreduce(half, ReduceOp::Avg)->wait();
    for (float x : half.to_vector<float>()) MT_CHECK(x == (n + 1) / 2.0f, "float16 allreduce Avg gave ", x);
    // A second group beside the first, then the first again: each has its own communicator, and MPI
    // stays initialised across groups (Note [MPI is initialised once per process]).
    {
      ProcessGroupMPI second({.timeout = 10s});
      test::check_collectives(second);
    }
    test::check_collectives(*pg);
  });
}

TEST_CASE("init_process_group under mpirun: the default backend (auto) is MPI, with or without a rendezvous") {
  const RendezvousInfo who = job();
  test::run_as_mpi_rank(who.world_size, [&](int rank) {
    // Before "auto", the default was gloo, and rank 1 of 2 failed: it had no master_port.
    auto pg = init_process_group({.rendezvous = who, .timeout = 10s});
    MT_CHECK(pg->backend() == "mpi" && pg->rank() == rank, "auto chose ", pg->backend(), " for rank ", rank);
    test::check_collectives(*pg);
  });
}

TEST_CASE("ProcessGroupMPI: collectives return at once and complete in the order issued, and a short wait only "
          "stops waiting") {
  test::run_as_mpi_rank(2, [](int rank) {
    ProcessGroupMPI pg({.timeout = 10s});
    if (rank == 1) std::this_thread::sleep_for(300ms);  // rank 0 issues everything long before rank 1
    std::vector<Tensor> tensors;
    std::vector<std::shared_ptr<Work>> works;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 6; ++i) {
      const int64_t numel = i % 3 == 0 ? 11 : i % 3 == 1 ? 1000 : 203530;
      tensors.push_back(full({numel}, (rank + 1.0) * (i + 1)));
      works.push_back(pg.allreduce(tensors.back()));
    }
    if (rank == 0) {
      MT_CHECK(seconds_since(t0) < 0.1, "issuing 6 allreduces took ", seconds_since(t0), " s");
      for (const auto& w : works) MT_CHECK(!w->is_completed(), w->description(), " completed without rank 1");
      try {
        works[0]->wait(50ms);
        MT_FAIL("the first allreduce completed without rank 1");
      } catch (const TimeoutError& e) {
        MT_CHECK(std::string(e.what()).find("within 50 ms of waiting") != std::string::npos, e.what());
      }
    }
    for (int i = 0; i < 6; ++i) {
      works[i]->wait();  // the short wait above did not abandon the collective
      const float expected = 3.0f * (i + 1);  // (1 + 2)·(i+1)
      for (float x : tensors[i].to_vector<float>()) MT_CHECK(x == expected, "allreduce ", i, " gave ", x);
    }
  });
}

TEST_CASE("ProcessGroupMPI: a peer that never joins the collective makes the others time out, saying so, and "
          "later collectives fail at once") {
  test::run_as_mpi_rank(2, [](int rank) {
    ProcessGroupMPI pg({.timeout = 1500ms});
    Tensor t = full({11}, 1.0);
    if (rank == 1) {  // alive, but busy elsewhere past rank 0's timeout; then it issues the allreduce late
      std::this_thread::sleep_for(2500ms);
      pg.allreduce(t)->wait();
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        pg.allreduce(t)->wait();
        MT_FAIL("allreduce completed without rank 1");
      } catch (const TimeoutError& e) {
        const double took = seconds_since(t0);
        MT_CHECK(took >= 1.4 && took < 1.5 + 1.0, "timed out after ", took, " s");
        const std::string message = e.what();
        MT_CHECK(message.find("allreduce #1 (11 float32, Sum) on rank 0 of 2") != std::string::npos &&
                     message.find("1500 ms") != std::string::npos,
                 "the error names neither the collective nor the timeout: ", message);
      }
      // Note [A failed collective poisons the queue]: the next collective fails at once, naming the first.
      const auto t1 = std::chrono::steady_clock::now();
      try {
        pg.barrier()->wait();
        MT_FAIL("the barrier after a timed-out allreduce succeeded");
      } catch (const Error& e) {
        MT_CHECK(std::string(e.what()).find("an earlier collective failed: allreduce #1") != std::string::npos,
                 e.what());
        MT_CHECK(seconds_since(t1) < 0.1, "the poisoned barrier took ", seconds_since(t1), " s");
      }
    }
    // The ranks meet again in a new group; meanwhile the abandoned allreduce completes with rank 1's
    // late one, so nothing is left in flight at exit and MPI finalizes normally.
    ProcessGroupMPI again({.timeout = 10s});
    test::check_collectives(again);
  });
}

// Run only by rank_exit.sh (MT_TEST_RANK_EXIT=1): rank 1 leaves in the middle of an allreduce, and
// the job must end, non-zero, with a message saying which rank did what.
TEST_CASE("ProcessGroupMPI: a rank that exits mid-collective ends the job" *
          doctest::skip(std::getenv("MT_TEST_RANK_EXIT") == nullptr)) {
  test::run_as_mpi_rank(2, [](int rank) {
    std::fprintf(stderr, "rank-exit test: rank %d pid %d\n", rank, static_cast<int>(::getpid()));
    ProcessGroupMPI pg({.timeout = 20s});
    Tensor t = full({203530}, 1.0);
    auto work = pg.allreduce(t);
    if (rank == 1) std::_Exit(3);  // gone, with the collective in flight
    work->wait();  // mpirun ends this rank; failing that, the timeout does
  });
}
