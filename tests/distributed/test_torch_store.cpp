// TorchTCPStore against the real thing: PyTorch's own TCPStore server (Debian's python3-torch, the
// interpreter in MT_TEST_PYTHON, default /usr/bin/python3), the server torchrun's agent hosts. Both
// sides set, get, add and wait for each other's keys (Note [PyTorch's TCPStore protocol]). Skipped
// (doctest counts it skipped) where that interpreter has no torch.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "distributed/store/tcp_store.h"
#include "distributed/store/torch_store.h"

using namespace mt;
using namespace mt::dist;
using namespace std::chrono_literals;

namespace {

std::string python() {
  const char* p = std::getenv("MT_TEST_PYTHON");
  return p ? p : "/usr/bin/python3";
}

// Whether `python()` can import torch, asked without importing it (find_spec takes milliseconds).
bool torch_available() {
  if (::access(python().c_str(), X_OK) != 0) return false;
  const std::string cmd = python() + " -c \"import importlib.util, sys; "
                                     "sys.exit(importlib.util.find_spec('torch') is None)\" 2>/dev/null";
  return std::system(cmd.c_str()) == 0;
}

const bool kNoTorch = !torch_available();

// PyTorch's side: host a TCPStore, greet, wait for our reply, check our counter, then wait for us
// to finish before the server goes away. Exit 0 when everything was as expected.
const char* kServer = R"(
import datetime, sys
import torch.distributed as dist
s = dist.TCPStore('127.0.0.1', int(sys.argv[1]), None, True, datetime.timedelta(seconds=30),
                  wait_for_workers=False)
s.set('torch/greeting', 'hello from torch')
s.wait(['mt/reply'])
assert s.get('mt/reply') == b'hello from minitrain', s.get('mt/reply')
assert s.add('counter', 0) == 5
s.set('torch/checked', '1')
s.wait(['mt/finished'])
)";

}  // namespace

TEST_CASE("TorchTCPStore: set, get, add and wait with PyTorch's own TCPStore server" * doctest::skip(kNoTorch)) {
  const int port = find_free_port();
  const pid_t server = ::fork();
  REQUIRE(server >= 0);
  struct Reaper {  // never leave the interpreter behind, also when a REQUIRE or an error ends the test
    pid_t pid;
    bool reaped = false;
    ~Reaper() {
      if (reaped) return;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reaper{server};
  if (server == 0) {
    const std::string port_text = std::to_string(port);
    ::execl(python().c_str(), python().c_str(), "-c", kServer, port_text.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  {
    // PyTorch takes a few seconds to import: the client retries connecting until then.
    TorchTCPStore store({.host = "127.0.0.1", .port = port, .timeout = 60s});
    CHECK(store.get_string("torch/greeting") == "hello from torch");
    CHECK(store.add("counter", 2) == 2);
    CHECK(store.add("counter", 3) == 5);
    store.set("mt/reply", "hello from minitrain");  // after the adds: PyTorch's side then reads the counter
    store.wait({"torch/checked"}, 30s);
    CHECK(store.check({"torch/greeting", "mt/reply"}));
    CHECK_FALSE(store.check({"nobody/sets/this"}));
    CHECK_THROWS_WITH_AS(store.wait({"torch/greeting", "never"}, 100ms),
                         doctest::Contains("1 of 2 keys were never set: 'never'"), TimeoutError);
    CHECK(store.get_string("torch/greeting") == "hello from torch");  // still in step after the timeout
    store.set("mt/finished", "");
  }
  int status = 0;
  ::waitpid(server, &status, 0);
  reaper.reaped = true;
  CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), "PyTorch's side failed (its traceback is above)");
}
