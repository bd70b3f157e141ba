// JobAttempts (distributed/fault/job_attempts.h): the launchers of a multi-node job, here one process per
// "node" around a TCPStore that the test hosts as node 0's launcher would, agree on meetings, on one
// cause per failed attempt, on the end of the job, and name a node that never comes or stops beating.
// Also the workers' side: ranks that meet under an attempt's prefix at a store a launcher hosts.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>

#include "distributed/process_group/init_process_group.h"
#include "distributed/fault/job_attempts.h"
#include "distributed/process_group/gloo/process_group_gloo.h"
#include "distributed/store/tcp_store.h"
#include "multiprocess.h"
#include "tensor/tensor.h"

using namespace mt;
using namespace mt::dist;
using namespace std::chrono_literals;

namespace {

// Node `node`'s launcher: its own connection to the store at `port`, and its JobAttempts.
JobAttempts node_of(int port, int node, int nnodes, JobAttemptsOptions opts = {}) {
  opts.nnodes = nnodes, opts.node_rank = node;
  return JobAttempts(std::make_shared<TCPStore>(TCPStoreOptions{.host = "127.0.0.1", .port = port, .timeout = 10s}),
                     opts);
}

// MT_CHECK that `body` throws JobEnded whose message contains `part`.
template <typename Body>
void expect_ended(Body&& body, const std::string& part) {
  try {
    body();
  } catch (const JobEnded& e) {
    MT_CHECK(std::string(e.what()).find(part) != std::string::npos, "JobEnded says '", e.what(), "', not '", part, "'");
    return;
  }
  MT_FAIL("expected JobEnded saying '", part, "'");
}

void check_results(const std::vector<test::RankResult>& results) {
  for (const auto& r : results) CHECK_MESSAGE(r.ok(), r.describe());
}

}  // namespace

TEST_CASE("JobAttempts: a meeting returns every node's value, and names a node that never comes, on every node") {
  TCPStore host({.host = "127.0.0.1", .port = 0, .is_server = true});
  const int port = host.port();
  test::Ranks nodes(3, [port](int node) {
    JobAttempts job = node_of(port, node, 3, {.timeout = 1s});
    const std::vector<std::string> values = job.meet("start", "value of " + std::to_string(node));
    MT_CHECK(values.size() == 3 && values[0] == "value of 0" && values[2] == "value of 2", "meet returned ",
             values.size(), " values: ", values[0], ", ...");
    if (node == 2) return;  // node 2 never comes to attempt 0
    const auto start = Clock::now();
    expect_ended([&] { job.meet("attempt/0", ""); }, "node 2 of 3 did not come to attempt/0 within --timeout 1 s");
    MT_CHECK(Clock::now() - start < 3s, "the missing node was named only after ",
             std::chrono::duration<double>(Clock::now() - start).count(), " s");
  });
  check_results(nodes.wait());
}

TEST_CASE("JobAttempts: the first failure posted is the attempt's cause on every node, and end() stops every attempt") {
  TCPStore host({.host = "127.0.0.1", .port = 0, .is_server = true});
  const int port = host.port();
  test::Ranks nodes(2, [port](int node) {
    JobAttempts job = node_of(port, node, 2, {.timeout = 5s});
    MT_CHECK(!job.poll(0).has_value(), "a stop before anyone failed");
    job.meet("polled", "");
    if (node == 1) job.fail(0, "node 1: rank 3 was killed by signal 9");
    job.meet("posted", "");
    if (node == 0) job.fail(0, "node 0: rank 0 exited with code 1");  // too late: a consequence, not the cause
    const std::optional<JobStop> stop = job.poll(0);
    MT_CHECK(stop && stop->cause == "node 1: rank 3 was killed by signal 9" && !stop->final, "attempt 0's stop: ",
             stop ? stop->cause : "none");
    MT_CHECK(job.stop_of(0).cause == stop->cause, "stop_of disagrees with poll");
    MT_CHECK(!job.poll(1).has_value(), "attempt 1 has its own keys: nothing failed there");
    job.meet("checked", "");
    if (node == 0) {
      job.end("node 0 was interrupted (signal 2)");
      const std::optional<JobStop> ended = job.poll(1);
      MT_CHECK(ended && ended->final && ended->cause == "node 0 was interrupted (signal 2)", "after end: ",
               ended ? ended->cause : "none");
    } else {
      expect_ended([&] { job.meet("attempt/1", ""); }, "node 0 was interrupted (signal 2)");
    }
  });
  check_results(nodes.wait());
}

TEST_CASE("JobAttempts: finish waits for every node, and returns a failure elsewhere or a node that never reports") {
  TCPStore host({.host = "127.0.0.1", .port = 0, .is_server = true});
  const int port = host.port();
  test::Ranks nodes(2, [port](int node) {
    JobAttempts job = node_of(port, node, 2, {.timeout = 1s});
    MT_CHECK(!job.finish(0).has_value(), "both nodes finished attempt 0, yet finish says stop");
    if (node == 1) {
      std::this_thread::sleep_for(200ms);  // node 0 is waiting in finish(1) by now
      job.fail(1, "node 1: rank 2 exited with code 3");
      return;  // and never reports attempt 2
    }
    const std::optional<JobStop> failed = job.finish(1);
    MT_CHECK(failed && failed->cause == "node 1: rank 2 exited with code 3", "finish(1): ",
             failed ? failed->cause : "none");
    const std::optional<JobStop> silent = job.finish(2);
    MT_CHECK(silent && silent->cause.find("node 1 of 2 did not report the end of their workers within --timeout 1 s") !=
                           std::string::npos, "finish(2): ", silent ? silent->cause : "none");
  });
  check_results(nodes.wait());
}

TEST_CASE("JobAttempts: node 0 names a launcher that stopped beating within the heartbeat timeout") {
  TCPStore host({.host = "127.0.0.1", .port = 0, .is_server = true});
  const int port = host.port();
  test::Ranks nodes(2, [port](int node) {
    JobAttempts job = node_of(port, node, 2, {.timeout = 10s, .heartbeat_timeout = 400ms, .beat_every = 50ms});
    job.meet("start", "");
    if (node == 1) {  // beats for half a second, then falls silent (its process ends; its keys stay)
      for (const auto until = Clock::now() + 500ms; Clock::now() < until; std::this_thread::sleep_for(20ms)) job.poll(0);
      return;
    }
    const auto start = Clock::now();
    std::optional<JobStop> stop;
    while (!stop && Clock::now() - start < 5s) {
      stop = job.poll(0);
      std::this_thread::sleep_for(20ms);
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    MT_CHECK(stop && stop->cause.find("node 1's launcher stopped: no heartbeat in the store") != std::string::npos,
             "poll: ", stop ? stop->cause : "no stop after 5 s");
    MT_CHECK(seconds > 0.6 && seconds < 2.5, "named after ", seconds, " s (beating 0.5 s, then a 0.4 s timeout)");
    // The next meeting ends the job at once instead of waiting 10 s for a node that cannot come.
    expect_ended([&] { job.meet("attempt/1", ""); }, "node 1's launcher stopped");
    MT_CHECK(Clock::now() - start < 4s, "the meeting waited for the silent node");
  });
  check_results(nodes.wait());
}

TEST_CASE("Ranks of successive attempts meet at a launcher's store, each attempt under its own prefix" *
          doctest::skip(!ProcessGroupGloo::is_available())) {
  TCPStore launcher({.host = "127.0.0.1", .port = 0, .is_server = true, .job_token = "test"});
  const int port = launcher.port();
  for (int attempt = 0; attempt < 2; ++attempt) {
    // Rank 0 does not host (the port is the launcher's; hosting there would fail), and attempt 1 does
    // not find attempt 0's addresses: its keys live under attempt/1.
    test::run_ranks(2, [port, attempt](int rank) {
      const auto pg = init_process_group({.backend = "gloo",
                                          .rendezvous = {.rank = rank, .world_size = 2, .local_rank = rank,
                                                         .local_world_size = 2, .master_addr = "127.0.0.1",
                                                         .master_port = port,
                                                         .store_prefix = JobAttempts::workers_prefix(attempt)},
                                          .timeout = 10s,
                                          .job_token = "test"});
      Tensor t = full({3}, rank + 1.0);
      pg->allreduce(t)->wait();
      for (float x : t.to_vector<float>()) MT_CHECK(x == 3.0f, "attempt ", attempt, ": allreduce gave ", x);
    });
  }
}
