// connect_gloo (see detail/gloo_connect.h): Gloo's rendezvous on a thread of its own, waited for with a
// deadline.
#include "distributed/process_group/gloo/detail/gloo_connect.h"

#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "distributed/process_group/init_process_group.h"

namespace mt::dist::detail {

namespace {

// Gloo's rendezvous (connectFullMesh) publishes each rank's listening addresses under the keys "0",
// "1", ... of a gloo::rendezvous::Store. This adapter forwards to our Store, so that exchange gets our
// transport, job token, limits, timeouts, wait notices and error messages.
class GlooStoreAdapter : public ::gloo::rendezvous::Store {
 public:
  explicit GlooStoreAdapter(std::shared_ptr<dist::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const Bytes value = store_->get(key);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<dist::Store> store_;
};

// The address Gloo will publish when it resolves this machine's host name itself, if that address is
// a loopback one (Debian's /etc/hosts maps the host name to 127.0.1.1); "" otherwise.
std::string loopback_host_address(const ProcessGroupGlooOptions& opts) {
  if (!opts.interface.empty() || !opts.hostname.empty()) return "";  // chosen by the caller
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(name, nullptr, &hints, &list) != 0) return "";
  char host[NI_MAXHOST] = {};
  const bool ok = ::getnameinfo(list->ai_addr, list->ai_addrlen, host, sizeof host, nullptr, 0, NI_NUMERICHOST) == 0;
  ::freeaddrinfo(list);
  return ok && is_loopback(host) ? std::string(name) + " = " + host : "";
}

// What to add to an error of a rank whose peers may be on other machines but whose own address is
// one they cannot reach.
std::string interface_hint(const ProcessGroupGlooOptions& opts) {
  const std::string loopback = loopback_host_address(opts);
  if (loopback.empty()) return "";
  return ". This rank's Gloo address is its host name, which resolves to a loopback address (" + loopback +
         "): ranks on other machines cannot reach it. Set GLOO_SOCKET_IFNAME to the network interface "
         "that connects the machines (e.g. eth0; `ip -brief address` lists them)";
}

std::shared_ptr<::gloo::transport::Device> create_device(const ProcessGroupGlooOptions& opts) {
  ::gloo::transport::tcp::attr attr;
  if (!opts.interface.empty())
    attr.iface = opts.interface;
  else
    attr.hostname = opts.hostname;  // empty: Gloo resolves gethostname()
  try {
    return ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    MT_FAIL("Gloo cannot listen on ", opts.interface.empty() ? "host '" + opts.hostname + "'" : "interface '" +
            opts.interface + "'", " (", e.what(), "); set ProcessGroupGlooOptions::hostname or interface "
            "(GLOO_SOCKET_IFNAME)");
  }
}

// The connection itself; runs on connect_gloo's thread.
std::shared_ptr<::gloo::rendezvous::Context> connect_full_mesh(const std::shared_ptr<Store>& store, int rank,
                                                               int size, const ProcessGroupGlooOptions& opts) {
  auto device = create_device(opts);
  auto context = std::make_shared<::gloo::rendezvous::Context>(rank, size);
  context->setTimeout(opts.timeout);
  GlooStoreAdapter adapter(std::make_shared<PrefixStore>("gloo", store));
  context->connectFullMesh(adapter, device);
  // Note [Synchronous pairs]: by default a Gloo TCP pair hands every received message from the
  // device's event-loop thread to the thread waiting in the collective. Measured here (2 ranks, 11
  // floats): about 90-290 us per all-reduce, most of it those thread wake-ups, where one loopback
  // round trip takes about 30 us. In synchronous mode the collective's own thread reads its socket
  // directly (a blocking read bounded by the context's timeout; no busy polling, which would steal
  // the core the peer rank computes on): about 31 us. Synchronous pairs only serve buffers bound to
  // a pair, so every collective of ProcessGroupGloo is one of Gloo's bound-buffer algorithms
  // (AllgatherRing, AllreduceHalvingDoubling, BroadcastOneToAll, BarrierAllToAll), built for the
  // call and dropped after it: building one takes the context's next slot, the same on every rank
  // because every rank builds the same algorithms in the same order (Note [Collective order]), so no
  // cache needs to agree across ranks.
  for (int peer = 0; peer < size; ++peer)
    if (peer != rank) context->getPair(peer)->setSync(/*sync=*/true, /*busyPoll=*/false);
  // Note [Leaving the rendezvous together]: a rank that has connected to all its peers may go on and,
  // in a short program, exit, while a peer is still completing its side of their connection: that
  // peer's rendezvous would then fail. A barrier over the new connections returns on each rank only
  // once every rank has connected, so nobody leaves the rendezvous before all have arrived. It runs
  // on the synchronous pairs: each rank first sends to every peer, then reads one message from each,
  // and nothing reads a socket unless asked to. So a peer that passed the barrier and exited at once
  // cannot fail this rank's barrier: this rank's message to it was sent before that peer could pass,
  // and its message to this rank waits in the socket whatever follows it. (On Gloo's default pairs
  // the event-loop thread saw the peer's connection close while this rank still waited for a third
  // rank, and failed the barrier: 1 run in 12 of the "exits mid-collective" test under load.)
  ::gloo::BarrierAllToAll(context).run();
  return context;
}

// What the connecting thread hands back.
struct Outcome {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::shared_ptr<::gloo::rendezvous::Context> context;
  std::exception_ptr error;
};

}  // namespace

// Note [Connecting without hostages]: Gloo waits for a pair to connect up to 5 times the context's
// timeout (tcp::Pair::waitUntil), on the thread that connects, and nothing can interrupt it. A peer
// that dies after publishing its address but before connecting would hold this rank that long, and
// a thread that joined the connecting one would be held with it (timeout 300 s: 25 minutes). So the
// connection is made on a thread of its own that owns everything it touches (the store, the options,
// the outcome: shared or copied, never borrowed from the caller), and the caller waits for it with
// the group's timeout. If it is not done by then, the caller throws and leaves the thread behind,
// detached: it fails on its own, later, and frees what it holds. The thread blocks SIGPIPE first,
// so that Gloo's event-loop thread, which it creates and which inherits its signal mask, has it
// blocked too (Note [SIGPIPE] in collective_queue.cpp).
std::shared_ptr<::gloo::rendezvous::Context> connect_gloo(const std::shared_ptr<Store>& store, int rank, int size,
                                                          const ProcessGroupGlooOptions& opts) {
  auto outcome = std::make_shared<Outcome>();
  std::thread([outcome, store, rank, size, opts] {
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
    std::shared_ptr<::gloo::rendezvous::Context> context;
    std::exception_ptr error;
    try {
      context = connect_full_mesh(store, rank, size, opts);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(outcome->mutex);
    outcome->context = std::move(context);
    outcome->error = error;
    outcome->done = true;
    outcome->done_cv.notify_all();
  }).detach();

  const std::string me = "rank " + std::to_string(rank) + " of " + std::to_string(size);
  std::unique_lock<std::mutex> lock(outcome->mutex);
  if (!outcome->done_cv.wait_for(lock, opts.timeout, [&] { return outcome->done; }))
    MT_FAIL_TIMEOUT("ProcessGroupGloo ", me, ": Gloo could not connect to every peer within ", format_ms(opts.timeout),
                    ": a peer died or hung after publishing its address, or its address cannot be reached from "
                    "here", interface_hint(opts));
  if (!outcome->error) return outcome->context;
  try {
    std::rethrow_exception(outcome->error);
  } catch (const Error& e) {
    if (dynamic_cast<const TimeoutError*>(&e)) throw;
    MT_FAIL("ProcessGroupGloo ", me, ": connecting to the peers failed: ", e.what(), interface_hint(opts));
  } catch (const std::exception& e) {
    MT_FAIL_PEER_LOST("ProcessGroupGloo ", me, ": Gloo could not connect to every peer (", e.what(),
            "): a peer closed its connection or exited while connecting", interface_hint(opts));
  }
}

}  // namespace mt::dist::detail
