// Gloo's collective errors name the rank they lost and where the failure began (Note [Naming the
// lost peer] in distributed/process_group/gloo/lost_peer.cpp): three ranks, one killed with SIGKILL
// while the others are in a collective with it; every survivor's error must name the killed rank,
// either as the peer it lost or as where the failure began, and never blame a survivor. The store is
// hosted by the test itself, as a launcher hosts it, so that rank 0 can be the one killed.
#include <doctest/doctest.h>

#include <signal.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "distributed/process_group/gloo/process_group_gloo.h"
#include "distributed/store/tcp_store.h"
#include "multiprocess.h"
#include "tensor/tensor.h"

using namespace mt;
using namespace mt::dist;
using namespace std::chrono_literals;

namespace {

const bool kNoGloo = !ProcessGroupGloo::is_available();

// One collective of each kind ProcessGroupGloo runs differently: the small all-reduce (allgather,
// then a sum in rank order), the large one (halving-doubling in pieces), an allgather (a ring), a
// barrier; and two broadcasts from the rank after the killed one, of which the third rank only
// hears through the root's failure: its error must say where the failure began.
void collective(ProcessGroup& pg, int kind, int rank, int killed) {
  Tensor small = full({100}, 1.0 + rank), large = full({300000}, 1.0 + rank);
  switch (kind) {
    case 0: pg.allreduce_own_guard(small)->wait(); break;
    case 1: pg.allreduce_own_guard(large)->wait(); break;
    case 2: {
      std::vector<Tensor> all;
      pg.allgather(all, large)->wait();
      break;
    }
    case 3: pg.barrier()->wait(); break;
    default:  // the root may have sent to the third rank before it failed: then the second does
      pg.broadcast(large, (killed + 1) % 3)->wait();
      pg.broadcast(large, (killed + 1) % 3)->wait();
      break;
  }
}

}  // namespace

TEST_CASE("ProcessGroupGloo: every survivor's error names the killed rank, whichever it is and whatever the collective" *
          doctest::skip(kNoGloo)) {
  TCPStore host({.host = "127.0.0.1", .port = 0, .is_server = true, .job_token = "test", .timeout = 10s});
  for (int trial = 0; trial < 15; ++trial) {
    const int killed = trial % 3, kind = trial / 3;
    CAPTURE(killed);
    CAPTURE(kind);
    const std::string prefix = "trial" + std::to_string(trial);
    test::Ranks ranks(3, [&](int rank) {
      auto store = std::make_shared<TCPStore>(
          TCPStoreOptions{.host = "127.0.0.1", .port = host.port(), .job_token = "test", .timeout = 10s});
      ProcessGroupGloo pg(std::make_shared<PrefixStore>(prefix, store), rank, 3, {.timeout = 5s});
      for (int i = 0; i < 3; ++i) collective(pg, kind, rank, killed);  // healthy rounds first
      if (rank == killed) {
        // Dies once the others are in the next collective, waiting for it.
        for (int r = 0; r < 3; ++r)
          if (r != killed) store->get(prefix + "/in " + std::to_string(r), 10s);
        std::this_thread::sleep_for(30ms);
        ::raise(SIGKILL);
      }
      store->set(prefix + "/in " + std::to_string(rank), "");
      try {
        collective(pg, kind, rank, killed);
      } catch (const Error& e) {
        const std::string message = e.what(), k = std::to_string(killed);
        const std::regex names_it("rank " + k + " \\(127\\.0\\.0\\.1:[0-9]+\\) closed its connection: |"
                                  "the failure began at rank " + k);
        MT_CHECK(std::regex_search(message, names_it), "rank ", rank, "'s error does not name rank ", killed, ": ",
                 message);
        const bool hears_through_root = kind == 4 && rank == (killed + 2) % 3;
        MT_CHECK(!hears_through_root || message.find("the failure began at rank " + k) != std::string::npos,
                 "rank ", rank, " lost the broadcast's root, not rank ", killed, ", and does not say where it began: ",
                 message);
        return;
      }
      MT_FAIL("rank ", rank, "'s collective succeeded without rank ", killed);
    });
    const auto results = ranks.wait(30s);
    for (int r = 0; r < 3; ++r)
      if (r != killed) CHECK_MESSAGE(results[static_cast<size_t>(r)].ok(), results[static_cast<size_t>(r)].describe());
  }
}
