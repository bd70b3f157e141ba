// Stores: what ranks in separate processes see of each other's keys (TCPStore hosted by rank 0 or by
// a launcher that starts late, FileStore), and what they are told when something goes wrong: a wrong
// job token, a key nobody sets, ranks that never arrive, oversized and hostile messages.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "distributed/store/file_store.h"
#include "distributed/store/detail/socket.h"
#include "distributed/store/detail/store_protocol.h"
#include "distributed/store/tcp_store.h"
#include "multiprocess.h"

using namespace mt;
using namespace mt::dist;
using namespace std::chrono_literals;

namespace {

// A directory under /tmp that removes itself.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("mt-dist-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// What every rank of the cross-process tests does with its store: publish a key, count itself in,
// wait for everyone's key, read them all, and check that add() handed out each count exactly once.
void exchange(Store& store, int rank, int world) {
  store.set("hello/" + std::to_string(rank), "from rank " + std::to_string(rank));
  const int64_t arrival = store.add("arrivals", 1);
  MT_CHECK(arrival >= 1 && arrival <= world, "add returned ", arrival);
  store.set("arrival/" + std::to_string(rank), std::to_string(arrival));
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back("hello/" + std::to_string(r));
  store.wait(keys);
  MT_CHECK(store.check(keys), "check after wait");
  MT_CHECK(!store.check({"nobody/sets/this"}), "check of a missing key");
  for (int r = 0; r < world; ++r)
    MT_CHECK(store.get_string("hello/" + std::to_string(r)) == "from rank " + std::to_string(r), "rank ", r);
  store.barrier("counted", rank, world);
  MT_CHECK(store.get_string("arrivals") == std::to_string(world), "arrivals = ", store.get_string("arrivals"));
  std::set<std::string> counts;
  for (int r = 0; r < world; ++r) counts.insert(store.get_string("arrival/" + std::to_string(r)));
  MT_CHECK(counts.size() == static_cast<size_t>(world), "two ranks got the same count from add()");
}

template <typename F>
double seconds_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("TCPStore hosted by rank 0: four processes set, get, add, wait and check") {
  const int port = find_free_port();
  test::run_ranks(4, [port](int rank) {
    TCPStore store({.host = "127.0.0.1", .port = port, .is_server = rank == 0, .job_token = "job-1",
                    .timeout = 10s});
    exchange(store, rank, 4);
  });
}

TEST_CASE("TCPStore hosted by a launcher that starts late: clients retry until it is up") {
  const int port = find_free_port();
  test::Ranks ranks(3, [port](int rank) {
    TCPStore store({.host = "localhost", .port = port, .job_token = "job-2", .timeout = 10s});
    exchange(store, rank, 3);
  });
  std::this_thread::sleep_for(300ms);  // the ranks are already knocking
  TCPStore launcher({.host = "127.0.0.1", .port = port, .is_server = true, .job_token = "job-2"});
  for (const auto& r : ranks.wait()) CHECK_MESSAGE(r.ok(), r.describe());
  CHECK(launcher.get_string("arrivals") == "3");  // the launcher sees what the ranks wrote
}

TEST_CASE("TCPStore turns away a client with the wrong job token, saying so") {
  TCPStore server({.host = "127.0.0.1", .port = 0, .is_server = true, .job_token = "right"});
  CHECK_THROWS_WITH_AS(TCPStore({.host = "127.0.0.1", .port = server.port(), .job_token = "wrong"}),
                       doctest::Contains("wrong job token"), Error);
  TCPStore friendly({.host = "127.0.0.1", .port = server.port(), .job_token = "right"});
  friendly.set("k", "v");
  CHECK(server.get_string("k") == "v");
}

TEST_CASE("Store timeouts name the key, the timeout and the ranks that never arrived") {
  TempDir dir;
  TCPStore tcp({.host = "127.0.0.1", .port = 0, .is_server = true, .job_token = "t"});
  FileStore file({.path = dir.file("store")});
  for (Store* store : {static_cast<Store*>(&tcp), static_cast<Store*>(&file)}) {
    CAPTURE(store->describe());
    double took = seconds_of([&] {
      CHECK_THROWS_WITH_AS(store->get("never/set", 200ms),
                           doctest::Contains("get('never/set') timed out after 200 ms"), TimeoutError);
    });
    CHECK(took >= 0.19);
    CHECK(took < 3.0);
    store->set("a", "1");
    CHECK_THROWS_WITH_AS(store->wait({"a", "b"}, 100ms),
                         doctest::Contains("1 of 2 keys were never set: 'b'"), TimeoutError);
    CHECK_THROWS_WITH_AS(store->barrier("init", 0, 4, 100ms),
                         doctest::Contains("ranks 1, 2, 3 of 4 never arrived"), TimeoutError);
    store->set_timeout(150ms);  // the default of get() and wait()
    CHECK_THROWS_WITH_AS(store->get("nope"), doctest::Contains("150 ms"), TimeoutError);
    store->set("text", "x");
    CHECK_THROWS_WITH_AS(store->add("text", 1), doctest::Contains("not an integer"), Error);
    CHECK(store->get_string("a") == "1");  // the store still answers after an error
  }
}

TEST_CASE("Long rendezvous waits say what they wait for, every interval, until the timeout") {
  // Note [Waiting out loud], with 100 ms for the 10 s of a real job.
  std::vector<std::string> lines;
  const WaitNotices notices{.every = 100ms, .who = "rank 1 of 3",
                            .print = [&](const std::string& line) { lines.push_back(line); }};
  SUBCASE("a client whose store never comes names the address") {
    const int port = find_free_port();  // nobody listens there
    const double took = seconds_of([&] {
      CHECK_THROWS_AS(TCPStore({.host = "127.0.0.1", .port = port, .timeout = 550ms, .notices = notices}),
                      TimeoutError);
    });
    CHECK(took < 3.0);
    REQUIRE(lines.size() >= 3);
    CHECK(lines.size() <= 5);
    CHECK(lines[0].find("rank 1 of 3: waited 0 s of 1 s for the store at 127.0.0.1:" + std::to_string(port)) == 0);
  }
  SUBCASE("a barrier names the ranks not yet arrived, and stops speaking when they come") {
    TCPStore store({.host = "127.0.0.1", .port = 0, .is_server = true, .job_token = "t"});
    store.set_wait_notices(notices);
    store.set("ready/2", "1");
    CHECK_THROWS_WITH_AS(store.barrier("ready", 1, 3, 350ms), doctest::Contains("rank 0 of 3 never arrived"),
                         TimeoutError);
    REQUIRE(lines.size() >= 2);
    CHECK(lines[0].find("rank 1 of 3: TCPStore 127.0.0.1:" + std::to_string(store.port()) +
                        ": barrier 'ready': waited 0 s of 0 s for rank 0 of 3 to arrive") == 0);
    lines.clear();
    std::thread late([&] {
      std::this_thread::sleep_for(250ms);
      TCPStore rank0({.host = "127.0.0.1", .port = store.port(), .job_token = "t"});
      rank0.set("go/0", "1");
    });
    store.set("go/2", "1");
    store.barrier("go", 1, 3, 5s);
    late.join();
    CHECK(lines.size() >= 1);  // 250 ms late: two notices at most, then quiet
    CHECK(lines.size() <= 3);
    CHECK(lines.back().find("for rank 0 of 3") != std::string::npos);
  }
  SUBCASE("a quick wait says nothing") {
    TempDir dir;
    FileStore store({.path = dir.file("quick")});
    store.set_wait_notices(notices);
    store.set("k", "v");
    CHECK(store.get_string("k") == "v");
    CHECK(lines.empty());
  }
}

TEST_CASE("TCPStore and strangers: idle ones are closed, never delay the end, give way at the caps") {
  // Note [Strangers] in distributed/store/detail/tcp_store_server.h.
  using dist::detail::connect_tcp;
  const auto closed_by_server = [](dist::detail::Socket& s, std::chrono::milliseconds within) {
    uint8_t byte = 0;
    return !dist::detail::recv_all(s.fd(), &byte, 1, Clock::now() + within, "stranger");
  };
  SUBCASE("a stranger that never says Hello is closed after hello_timeout") {
    TCPStore store({.host = "127.0.0.1", .port = 0, .is_server = true, .job_token = "t", .hello_timeout = 200ms});
    dist::detail::Socket stranger = connect_tcp("127.0.0.1", store.port(), Clock::now() + 2s, "stranger");
    CHECK(closed_by_server(stranger, 3s));
    store.set("k", "v");  // the job's own client is authenticated: it stays
    CHECK(store.get_string("k") == "v");
  }
  SUBCASE("a stranger's open connection does not delay the hosting store's end") {
    auto store = std::make_unique<TCPStore>(
        TCPStoreOptions{.host = "127.0.0.1", .port = 0, .is_server = true, .job_token = "t"});
    dist::detail::Socket stranger = connect_tcp("127.0.0.1", store->port(), Clock::now() + 2s, "stranger");
    std::this_thread::sleep_for(50ms);  // accepted by now
    CHECK(seconds_of([&] { store.reset(); }) < 1.0);  // the close timeout is 10 s
  }
  SUBCASE("at max_connections the oldest stranger gives way to a newcomer") {
    TCPStore store({.host = "127.0.0.1", .port = 0, .is_server = true, .job_token = "t", .max_connections = 4});
    std::vector<dist::detail::Socket> strangers;
    for (int i = 0; i < 6; ++i) {
      strangers.push_back(connect_tcp("127.0.0.1", store.port(), Clock::now() + 2s, "stranger"));
      std::this_thread::sleep_for(20ms);
    }
    TCPStore late({.host = "127.0.0.1", .port = store.port(), .job_token = "t", .timeout = 5s});
    late.set("k", "v");
    CHECK(store.get_string("k") == "v");
    CHECK(closed_by_server(strangers[0], 2s));
  }
  SUBCASE("at max_strangers the oldest strangers give way, and the job's client still gets in") {
    TCPStore store({.host = "127.0.0.1", .port = 0, .is_server = true, .job_token = "t", .max_strangers = 4});
    std::vector<dist::detail::Socket> strangers;
    for (int i = 0; i < 12; ++i) {
      strangers.push_back(connect_tcp("127.0.0.1", store.port(), Clock::now() + 2s, "stranger"));
      std::this_thread::sleep_for(10ms);
    }
    const double took = seconds_of([&] {
      TCPStore late({.host = "127.0.0.1", .port = store.port(), .job_token = "t", .timeout = 5s});
      late.set("k", "v");
    });
    CHECK(took < 2.0);  // well before hello_timeout (5 s) would have closed the strangers
    CHECK(store.get_string("k") == "v");
    CHECK(closed_by_server(strangers[0], 1s));  // the oldest went first
  }
  SUBCASE("strangers never take the descriptors the process keeps in reserve") {
    // A host at `ulimit -n 96` keeping 48 of them; 100 strangers come, then the job's client. The
    // host can still open 40 files of its own while the strangers wait.
    const int port = find_free_port();
    TempDir dir;
    const std::string ready = dir.file("host-ready");
    test::Ranks host(1, [port, ready](int) {
      const rlimit some{.rlim_cur = 96, .rlim_max = 96};
      MT_CHECK(::setrlimit(RLIMIT_NOFILE, &some) == 0, "setrlimit");
      TCPStore store({.host = "127.0.0.1", .port = port, .is_server = true, .job_token = "t", .timeout = 20s,
                      .fd_reserve = 48});
      std::ofstream(ready) << "in";
      store.get("flooded");  // the parent's 100 strangers are connected (queued or accepted)
      std::vector<int> own;
      for (int i = 0; i < 40; ++i) own.push_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      const bool all_opened = std::none_of(own.begin(), own.end(), [](int fd) { return fd < 0; });
      for (const int fd : own)
        if (fd >= 0) ::close(fd);
      MT_CHECK(all_opened, "the strangers took the host's reserved descriptors");
      store.set("host-opened-files", "");
    });
    const auto ready_by = Clock::now() + 20s;
    while (!std::filesystem::exists(ready) && Clock::now() < ready_by) std::this_thread::sleep_for(5ms);
    REQUIRE(std::filesystem::exists(ready));
    std::vector<dist::detail::Socket> strangers;
    for (int i = 0; i < 100; ++i)
      strangers.push_back(connect_tcp("127.0.0.1", port, Clock::now() + 10s, "stranger"));
    const double took = seconds_of([&] {
      TCPStore client({.host = "127.0.0.1", .port = port, .job_token = "t", .timeout = 10s});
      client.set("flooded", "");
      client.wait({"host-opened-files"});
    });
    CHECK(took < 4.0);  // before the strangers' hello_timeout (5 s) would have freed the descriptors
    for (const auto& r : host.wait(20s)) CHECK_MESSAGE(r.ok(), r.describe());
  }
  SUBCASE("a connection that has not yet said Hello gets its moment before a newcomer may shed it") {
    // Note [Hear a connection out before shedding it]: a job client connects, then writes its Hello.
    TCPStore store({.host = "127.0.0.1", .port = 0, .is_server = true, .job_token = "t", .speak_up = 2s,
                    .max_connections = 2});  // the host's own client and one more
    dist::detail::Socket slow = connect_tcp("127.0.0.1", store.port(), Clock::now() + 2s, "slow client");
    std::this_thread::sleep_for(20ms);  // accepted, silent
    dist::detail::Socket newcomer = connect_tcp("127.0.0.1", store.port(), Clock::now() + 2s, "stranger");
    CHECK(closed_by_server(newcomer, 1s));  // refused: the only candidate to shed is still young
    const dist::Bytes hello = dist::detail::FrameWriter()
                                  .u8(static_cast<uint8_t>(dist::detail::Op::Hello))
                                  .u32(dist::detail::kStoreMagic)
                                  .u32(dist::detail::kStoreProtocolVersion)
                                  .str("t")
                                  .frame();
    dist::detail::send_all(slow.fd(), hello.data(), hello.size(), Clock::now() + 2s, "slow client");
    uint8_t reply[5] = {};  // length (4 bytes) and status
    REQUIRE(dist::detail::recv_all(slow.fd(), reply, sizeof reply, Clock::now() + 2s, "slow client"));
    CHECK(reply[4] == static_cast<uint8_t>(dist::detail::Status::Ok));
  }
  SUBCASE("a server out of file descriptors lets strangers go and still admits the job's client") {
    // The strangers come once the host's own client is in: a process with no descriptor left cannot
    // run UndefinedBehaviorSanitizer's vptr check (it probes memory through a pipe, and reads the
    // failure as an invalid object), so under the sanitizers the host's first virtual calls must not
    // meet the flood.
    const int port = find_free_port();
    TempDir dir;
    const std::string ready = dir.file("host-ready");
    test::Ranks host(1, [port, ready](int) {
      const rlimit few{.rlim_cur = 48, .rlim_max = 48};  // `ulimit -n 48` for the hosting process
      MT_CHECK(::setrlimit(RLIMIT_NOFILE, &few) == 0, "setrlimit");
      TCPStore store({.host = "127.0.0.1", .port = port, .is_server = true, .job_token = "t", .timeout = 20s});
      std::ofstream(ready) << "in";
      store.get("done");  // until the parent's client got in
    });
    const auto ready_by = Clock::now() + 20s;
    while (!std::filesystem::exists(ready) && Clock::now() < ready_by) std::this_thread::sleep_for(5ms);
    REQUIRE(std::filesystem::exists(ready));
    std::vector<dist::detail::Socket> strangers;  // more than the host has descriptors
    for (int i = 0; i < 100; ++i)
      strangers.push_back(connect_tcp("127.0.0.1", port, Clock::now() + 10s, "stranger"));
    const double took = seconds_of([&] {
      TCPStore client({.host = "127.0.0.1", .port = port, .job_token = "t", .timeout = 10s});
      client.set("done", "");
    });
    CHECK(took < 4.0);  // before the strangers' hello_timeout (5 s) would have freed the descriptors
    for (const auto& r : host.wait(20s)) CHECK_MESSAGE(r.ok(), r.describe());
  }
  SUBCASE("a single-machine store listens on 127.0.0.1 only") {
    TCPStore store({.host = "127.0.0.1", .port = 0, .is_server = true, .job_token = "t", .loopback_only = true});
    std::string other;  // an IPv4 address of this machine that is not a loopback one, if it has one
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) == 0) {
      for (ifaddrs* a = list; a && other.empty(); a = a->ifa_next) {
        if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
        char host[NI_MAXHOST] = {};
        ::getnameinfo(a->ifa_addr, sizeof(sockaddr_in), host, sizeof host, nullptr, 0, NI_NUMERICHOST);
        if (std::string(host).rfind("127.", 0) != 0) other = host;
      }
      ::freeifaddrs(list);
    }
    if (other.empty()) {
      MESSAGE("skipped the outside address: this machine has no IPv4 address but loopback");
    } else {
      CHECK_THROWS_AS(connect_tcp(other, store.port(), Clock::now() + 300ms, "outsider"), TimeoutError);
    }
    TCPStore local({.host = "localhost", .port = store.port(), .job_token = "t"});
    local.set("k", "v");
    CHECK(store.get_string("k") == "v");
  }
}

TEST_CASE("Oversized keys and values are refused before they are sent, and hostile frames by the server") {
  TCPStore store({.host = "127.0.0.1", .port = 0, .is_server = true, .job_token = "t"});
  CHECK_THROWS_WITH_AS(store.set(std::string(kMaxKeyBytes + 1, 'k'), "v"), doctest::Contains("keys are limited"),
                       Error);
  CHECK_THROWS_WITH_AS(store.set("big", Bytes(kMaxValueBytes + 1)), doctest::Contains("values are limited"), Error);
  CHECK_THROWS_WITH_AS(store.get(""), doctest::Contains("empty key"), Error);

  // A stranger announces a 4 GiB message before saying hello: answered with an error, then hung up on.
  const auto deadline = Clock::now() + 5s;
  dist::detail::Socket raw = dist::detail::connect_tcp("127.0.0.1", store.port(), deadline, "test");
  const uint8_t huge[4] = {0xf0, 0xff, 0xff, 0xff};
  dist::detail::send_all(raw.fd(), huge, sizeof(huge), deadline, "test");
  uint8_t header[4];
  REQUIRE(dist::detail::recv_all(raw.fd(), header, 4, deadline, "test"));
  Bytes body(dist::detail::read_u32_le(header));
  REQUIRE(dist::detail::recv_all(raw.fd(), body.data(), body.size(), deadline, "test"));
  dist::detail::FrameReader reply(body.data(), body.size());
  CHECK(reply.u8() == static_cast<uint8_t>(dist::detail::Status::Error));
  CHECK(reply.str(1 << 20).find("exceeds the store's limit") != std::string::npos);
  uint8_t byte;
  CHECK_FALSE(dist::detail::recv_all(raw.fd(), &byte, 1, deadline, "test"));  // closed

  store.set("still", "serving");
  CHECK(store.get_string("still") == "serving");
}

TEST_CASE("FileStore: four processes share one file") {
  TempDir dir;
  const std::string path = dir.file("job.store");
  test::run_ranks(4, [path](int rank) {
    FileStore store({.path = path, .timeout = 10s});
    exchange(store, rank, 4);
  });
}

TEST_CASE("FileStore survives a writer that died mid-record, and refuses a file that is not a store") {
  TempDir dir;
  const std::string path = dir.file("torn.store");
  {
    FileStore store({.path = path});
    store.set("whole", "record");
  }
  {  // half a record: a key length of 5 and a value length of 9, then only "who"
    std::ofstream torn(path, std::ios::binary | std::ios::app);
    torn.write("\x05\0\0\0\x09\0\0\0who", 11);
  }
  FileStore reader({.path = path});
  CHECK(reader.get_string("whole") == "record");
  CHECK_FALSE(reader.check({"whole", "who"}));
  reader.set("after", "the tear");  // truncates the torn bytes, then appends
  FileStore fresh({.path = path});
  CHECK(fresh.get_string("after") == "the tear");
  CHECK(fresh.get_string("whole") == "record");

  const std::string other = dir.file("notes.txt");
  std::ofstream(other) << "shopping list: eggs, flour\n";
  CHECK_THROWS_WITH_AS(FileStore({.path = other}), doctest::Contains("not a minitrain store"), Error);
}

TEST_CASE("PrefixStore keeps two users of one store apart") {
  TempDir dir;
  auto shared = std::make_shared<FileStore>(FileStoreOptions{.path = dir.file("shared.store")});
  PrefixStore a("group_a", shared), b("group_b", shared);
  a.set("rank/0", "A");
  b.set("rank/0", "B");
  CHECK(a.get_string("rank/0") == "A");
  CHECK(b.get_string("rank/0") == "B");
  CHECK(shared->get_string("group_a/rank/0") == "A");
  CHECK(a.add("count", 2) == 2);
  CHECK_FALSE(b.check({"count"}));
  // Missing keys are reported as the PrefixStore's user wrote them.
  CHECK_THROWS_WITH_AS(a.wait({"rank/0", "rank/1"}, 50ms), doctest::Contains("never set: 'rank/1'"), TimeoutError);
}
