// ProcessGroupGloo: Gloo's rendezvous over our Store, and each collective as one task on the
// CollectiveQueue (see process_group_gloo.h). Without Gloo (MT_HAVE_GLOO unset) only the stubs at the
// end are compiled.
#include "distributed/process_group_gloo.h"

#if MT_HAVE_GLOO

#include <gloo/allgather_ring.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/barrier.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "tensor/half.h"

namespace mt::dist {

namespace {

// Gloo's rendezvous (connectFullMesh) publishes each rank's listening addresses under the keys "0",
// "1", ... of a gloo::rendezvous::Store. This adapter forwards to our Store, so that exchange gets our
// transport, job token, limits, timeouts and error messages.
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

// Calls f(T{}) with T the C++ type of `dtype` (check_tensor has admitted only these four).
template <typename F>
void with_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: return f(int64_t{});
    case DType::Float16: return f(::gloo::float16{});  // Gloo sums halves through float32
    default: MT_FAIL("ProcessGroupGloo: dtype ", dtype, " is not supported");
  }
}

// data[i] /= world, for Avg. Halves are divided in float32 and rounded once.
template <typename T>
void divide(T* data, int n, int world) {
  for (int i = 0; i < n; ++i) data[i] /= static_cast<T>(world);
}
void divide(::gloo::float16* data, int n, int world) {
  for (int i = 0; i < n; ++i) data[i].x = float_to_half(half_to_float(data[i].x) / static_cast<float>(world));
}

constexpr size_t kGatherMaxBytes = 128 * 1024;  // Note [Allreduce algorithm]

// Gloo's bound-buffer algorithms count elements in an int.
int element_count(const Tensor& t) {
  MT_CHECK(t.numel() <= std::numeric_limits<int>::max(), "ProcessGroupGloo: ", t.numel(),
           " elements is more than Gloo's collectives take at once (2^31 - 1); split the tensor");
  return static_cast<int>(t.numel());
}

}  // namespace

struct ProcessGroupGloo::Gloo {
  std::shared_ptr<::gloo::rendezvous::Context> context;
  std::vector<char> gathered;  // allreduce_in_rank_order's (size, n) slots, kept for the next call

  // Note [Allreduce algorithm]: every rank's n elements gathered into gathered, slot r from rank r,
  // then data = ((x_0 + x_1) + x_2) + ... on every rank alike.
  template <typename T>
  void allreduce_in_rank_order(T* data, int n, const ::gloo::ReductionFunction<T>* reduce) {
    const int size = context->size;
    gathered.resize(static_cast<size_t>(size) * static_cast<size_t>(n) * sizeof(T));
    T* slots = reinterpret_cast<T*>(gathered.data());
    ::gloo::AllgatherRing<T>(context, {data}, slots, n).run();
    std::copy(slots, slots + n, data);
    for (int r = 1; r < size; ++r) reduce->call(data, slots + static_cast<size_t>(r) * n, static_cast<size_t>(n));
  }
};

bool ProcessGroupGloo::is_available() { return true; }

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size,
                                   ProcessGroupGlooOptions opts)
    : ProcessGroup(rank, size, opts.timeout), store_(std::move(store)), gloo_(std::make_unique<Gloo>()),
      queue_(std::make_unique<CollectiveQueue>()) {
  MT_CHECK(store_ != nullptr, "ProcessGroupGloo: no store to meet the other ranks through");
  const std::string me = "rank " + std::to_string(rank) + " of " + std::to_string(size);

  // A rank started with another WORLD_SIZE would wait for ranks that never come, or leave one out:
  // compare with rank 0's before anything waits for all.
  if (rank == 0) store_->set("world_size", std::to_string(size));
  Bytes rank0_size;
  try {
    rank0_size = store_->get("world_size", timeout());
  } catch (const TimeoutError& e) {
    MT_FAIL_TIMEOUT("ProcessGroupGloo ", me, ": rank 0 never arrived within ", format_ms(timeout()), " (", e.what(),
                    ")");
  }
  MT_CHECK(std::string(rank0_size.begin(), rank0_size.end()) == std::to_string(size), "ProcessGroupGloo ", me,
           ": this rank was started with world size ", size, ", rank 0 with ",
           std::string(rank0_size.begin(), rank0_size.end()));
  // Names the ranks that never arrived, where Gloo's own rendezvous could only name a missing key.
  store_->barrier("arrived", rank, size, timeout());

  // Gloo's TCP device starts an event-loop thread, which must inherit the queue thread's blocked
  // SIGPIPE (Note [SIGPIPE] in work.cpp): so the connection is made there, as the queue's first task.
  auto work = std::make_shared<Work>("Gloo rendezvous of " + me, timeout());
  enqueue(work, [this, opts] { connect(opts); });
  // Connecting is bounded by Gloo's own timeouts (the address exchange, then the connections), one
  // group timeout each.
  work->wait(2 * timeout());
}

ProcessGroupGloo::~ProcessGroupGloo() = default;

void ProcessGroupGloo::connect(const ProcessGroupGlooOptions& opts) {
  ::gloo::transport::tcp::attr attr;
  if (!opts.interface.empty())
    attr.iface = opts.interface;
  else
    attr.hostname = opts.hostname;  // empty: Gloo resolves gethostname()
  std::shared_ptr<::gloo::transport::Device> device;
  try {
    device = ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    MT_FAIL("Gloo cannot listen on ", opts.interface.empty() ? "host '" + opts.hostname + "'" : "interface '" +
            opts.interface + "'", " (", e.what(), "); set ProcessGroupGlooOptions::hostname or interface");
  }
  auto context = std::make_shared<::gloo::rendezvous::Context>(rank(), size());
  context->setTimeout(timeout());
  GlooStoreAdapter adapter(std::make_shared<PrefixStore>("gloo", store_));
  context->connectFullMesh(adapter, device);
  // Note [Leaving the rendezvous together]: a rank that has connected to all its peers may go on and,
  // in a short program, exit, while a peer is still completing its side of their connection: that
  // peer's rendezvous would then fail. A barrier over the new connections returns on each rank only
  // once every rank has connected, so nobody leaves the rendezvous before all have arrived.
  ::gloo::BarrierOptions barrier(context);
  barrier.setTimeout(timeout());
  ::gloo::barrier(barrier);
  // Note [Synchronous pairs]: by default a Gloo TCP pair hands every received message from the
  // device's event-loop thread to the thread waiting in the collective. Measured here (2 ranks, 11
  // floats): about 90-290 us per all-reduce, most of it those thread wake-ups, where one loopback
  // round trip takes about 30 us. In synchronous mode the collective's own thread reads its socket
  // directly (a blocking read bounded by the context's timeout; no busy polling, which would steal
  // the core the peer rank computes on): about 31 us. Synchronous pairs only serve buffers bound to
  // a pair, so every collective below is one of Gloo's bound-buffer algorithms (AllreduceRing,
  // BroadcastOneToAll, AllgatherRing, BarrierAllToAll), built for the call and dropped after it:
  // building one takes the context's next slot, the same on every rank because every rank builds
  // the same algorithms in the same order (Note [Collective order]), so no cache needs to agree
  // across ranks.
  // Note [A world of one]: Gloo's ring algorithms need a peer; with none, every collective is its
  // own result (an all-reduce or broadcast leaves the tensor as it is), so they return before Gloo.
  for (int peer = 0; peer < size(); ++peer)
    if (peer != rank()) context->getPair(peer)->setSync(/*sync=*/true, /*busyPoll=*/false);
  gloo_->context = std::move(context);
}

void ProcessGroupGloo::enqueue(const std::shared_ptr<Work>& work, std::function<void()> run) {
  queue_->push(work, [description = work->description(), timeout = timeout(), run = std::move(run)] {
    try {
      run();
    } catch (const Error&) {
      throw;  // ours, already named
    } catch (const std::exception& e) {
      // Gloo's exceptions say what happened to which socket; ours add which collective, and why that
      // usually happens.
      const std::string gloo_message = e.what();
      if (gloo_message.find("Timed out") != std::string::npos ||
          gloo_message.find("timeout") != std::string::npos)
        MT_FAIL_TIMEOUT(description, " timed out after ", format_ms(timeout), ": a peer is dead or hung, or did "
                        "not issue the same collective (Note [Collective order]). Gloo: ", gloo_message);
      MT_FAIL(description, " failed (timeout ", format_ms(timeout), "): a peer closed its connection or the "
              "network failed; did another rank exit? Gloo: ", gloo_message);
    }
  });
}

std::shared_ptr<Work> ProcessGroupGloo::allreduce(Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "allreduce");
  check_reduce(tensor, op, "allreduce");
  const uint64_t seq = next_sequence();
  auto work = std::make_shared<Work>(
      describe(seq, "allreduce", describe_tensor(tensor) + ", " + reduce_op_name(op)), timeout());
  tensor.storage()->bump_version();
  enqueue(work, [this, tensor, op] {
    const int n = element_count(tensor);
    if (n == 0 || size() == 1) return;  // Note [A world of one]
    with_type(tensor.dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* data = static_cast<T*>(tensor.raw_data());
      const auto* reduce = op == ReduceOp::Max ? ::gloo::ReductionFunction<T>::max
                                               : ::gloo::ReductionFunction<T>::sum;
      // Note [Allreduce algorithm]: the result must be the same bits on every rank (Note [Same bits on
      // every rank] in tests/distributed/collectives.h), and which algorithm runs depends only on the
      // byte count, the same on every rank. Gloo's plain ring (each rank adds what arrives to its own
      // buffer and passes it on) fails the first: rank r adds x_r + x_{r-1} + x_{r-2} ..., a different
      // order on every rank from 3 ranks on. So small buffers are allgathered (the same one message
      // per step as the ring, measured here at 2 ranks with synchronous pairs: 58 us against 110 us
      // for halving-doubling at 1,000 floats), then every rank adds the slots in rank order, x_0 +
      // x_1 + ... Halving-doubling (reduce-scatter, then allgather, by recursive halving) reduces each
      // chunk on one rank and sends that rank's result to all, so its ranks agree; it moves 1/size of
      // the data per message and wins for large buffers, 242 us against 1,058 us for 203,530 floats
      // at 2 ranks; the two cross near 128 KiB.
      if (static_cast<size_t>(n) * sizeof(T) <= kGatherMaxBytes)
        gloo_->allreduce_in_rank_order(data, n, reduce);
      else
        ::gloo::AllreduceHalvingDoubling<T>(gloo_->context, {data}, n, reduce).run();
      if (op == ReduceOp::Avg) divide(data, n, size());  // Sum, then divide: Gloo has no average
    });
  });
  return work;
}

std::shared_ptr<Work> ProcessGroupGloo::broadcast(Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast");
  check_root(root, "broadcast");
  const uint64_t seq = next_sequence();
  auto work = std::make_shared<Work>(
      describe(seq, "broadcast", describe_tensor(tensor) + ", root " + std::to_string(root)), timeout());
  tensor.storage()->bump_version();
  enqueue(work, [this, tensor, root] {
    const int n = element_count(tensor);
    if (n == 0 || size() == 1) return;
    with_type(tensor.dtype(), [&](auto zero) {
      using T = decltype(zero);
      // The root sends from the tensor, the others receive into it.
      ::gloo::BroadcastOneToAll<T>(gloo_->context, {static_cast<T*>(tensor.raw_data())}, n, root).run();
    });
  });
  return work;
}

std::shared_ptr<Work> ProcessGroupGloo::allgather(std::vector<Tensor>& outputs, const Tensor& input) {
  prepare_allgather(outputs, input, "allgather");
  const uint64_t seq = next_sequence();
  auto work = std::make_shared<Work>(describe(seq, "allgather", describe_tensor(input)), timeout());
  for (auto& out : outputs) out.storage()->bump_version();
  // Gloo gathers into one buffer, rank by rank; the outputs are filled from it afterwards.
  const Tensor flat = empty({size() * input.numel()}, {.dtype = input.dtype()});
  enqueue(work, [this, input, outputs, flat] {
    const int n = element_count(input);
    if (n == 0) return;
    with_type(input.dtype(), [&](auto zero) {
      using T = decltype(zero);
      if (size() == 1)
        std::memcpy(flat.raw_data(), input.raw_data(), n * sizeof(T));
      else
        ::gloo::AllgatherRing<T>(gloo_->context, {static_cast<const T*>(input.raw_data())},
                                 static_cast<T*>(flat.raw_data()), n).run();
      for (int r = 0; r < size(); ++r)
        std::memcpy(outputs[r].raw_data(), static_cast<T*>(flat.raw_data()) + static_cast<int64_t>(r) * n, n * sizeof(T));
    });
  });
  return work;
}

std::shared_ptr<Work> ProcessGroupGloo::barrier() {
  const uint64_t seq = next_sequence();
  auto work = std::make_shared<Work>(describe(seq, "barrier", ""), timeout());
  enqueue(work, [this] {
    if (size() > 1) ::gloo::BarrierAllToAll(gloo_->context).run();
  });
  return work;
}

}  // namespace mt::dist

#else  // no Gloo in this build

namespace mt::dist {

struct ProcessGroupGloo::Gloo {};

bool ProcessGroupGloo::is_available() { return false; }

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, ProcessGroupGlooOptions opts)
    : ProcessGroup(rank, size, opts.timeout) {
  MT_FAIL("this build of minitrain has no Gloo backend: CMake did not find Gloo (Debian: apt install "
          "libgloo-dev, then reconfigure)");
}
ProcessGroupGloo::~ProcessGroupGloo() = default;
std::shared_ptr<Work> ProcessGroupGloo::allreduce(Tensor&, ReduceOp) { MT_FAIL("no Gloo backend"); }
std::shared_ptr<Work> ProcessGroupGloo::broadcast(Tensor&, int) { MT_FAIL("no Gloo backend"); }
std::shared_ptr<Work> ProcessGroupGloo::allgather(std::vector<Tensor>&, const Tensor&) { MT_FAIL("no Gloo backend"); }
std::shared_ptr<Work> ProcessGroupGloo::barrier() { MT_FAIL("no Gloo backend"); }

}  // namespace mt::dist

#endif
