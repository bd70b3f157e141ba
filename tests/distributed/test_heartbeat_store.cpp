// Note [Store heartbeat] (distributed/fault/heartbeat_store.h), with ranks as threads over one TCPStore
// and short intervals: a rank that never beats is named, with every rank told the same line; a rank
// that finished (its beat says "done") and ranks that keep beating are never reported.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/fault/heartbeat_store.h"
#include "distributed/store/tcp_store.h"

using namespace mt;
using namespace mt::dist;
using namespace std::chrono_literals;

namespace {

// What on_stopped received, per rank.
struct Reports {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> to(int rank) {
    return [this, rank](const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.push_back(std::to_string(rank) + ": " + line);
    };
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mutex);
    return lines.size();
  }
};

std::shared_ptr<Store> client(int port) {
  return std::make_shared<TCPStore>(TCPStoreOptions{.host = "127.0.0.1", .port = port, .job_token = "hb"});
}

StoreHeartbeatOptions quick(Reports& reports, int rank) {
  return {.timeout = 1s, .every = 50ms, .on_stopped = reports.to(rank)};
}

}  // namespace

TEST_CASE("StoreHeartbeat: a silent rank is named with its phase, and every beating rank hears it") {
  TCPStore server({.host = "127.0.0.1", .port = 0, .is_server = true, .job_token = "hb"});
  Reports reports;
  // Ranks 0 and 1 of 3 beat; rank 2 never does (as a process stopped before its first beat).
  StoreHeartbeat r0(client(server.port()), 0, 3, quick(reports, 0));
  StoreHeartbeat r1(client(server.port()), 1, 3, quick(reports, 1));
  for (int i = 0; i < 100 && reports.size() < 2; ++i) std::this_thread::sleep_for(20ms);
  REQUIRE(reports.size() == 2);
  for (const std::string& line : reports.lines) {
    CHECK(line.find("rank 2 stopped: no heartbeat in the store for") != std::string::npos);
    CHECK(line.find("Its last phase: starting (no heartbeat yet) (seen by rank 0)") != std::string::npos);
  }
}

TEST_CASE("StoreHeartbeat: ranks that beat, and a rank that finished, are not reported") {
  TCPStore server({.host = "127.0.0.1", .port = 0, .is_server = true, .job_token = "hb"});
  Reports reports;
  StoreHeartbeat r0(client(server.port()), 0, 3, quick(reports, 0));
  auto r1 = std::make_unique<StoreHeartbeat>(client(server.port()), 1, 3, quick(reports, 1));
  {
    StoreHeartbeat r2(client(server.port()), 2, 3, quick(reports, 2));
    std::this_thread::sleep_for(200ms);
  }  // rank 2 finished: its beat is "done"
  std::this_thread::sleep_for(2500ms);  // more than twice the timeout
  CHECK(reports.size() == 0);
  r1.reset();
}
