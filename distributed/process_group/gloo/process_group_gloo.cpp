// ProcessGroupGloo: the rendezvous (connecting is gloo_connect.cpp), and each collective as one task on the
// CollectiveQueue (see process_group_gloo.h). Compiled only with Gloo: process_group_gloo_stub.cpp
// stands in without it, and register_gloo.cpp makes init_process_group("gloo") find either.
#include "distributed/process_group/gloo/process_group_gloo.h"

#include <gloo/allgather_ring.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/reduce_scatter.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "distributed/process_group/detail/collective_queue.h"
#include "distributed/process_group/gloo/detail/gloo_connect.h"
#include "distributed/process_group/gloo/detail/lost_peer.h"
#include "tensor/raw_ops.h"
#include "tensor/half.h"

namespace mt::dist {

namespace {

// Calls f(T{}) with T the C++ type of `dtype` (check_tensor has admitted only these five).
template <typename F>
void with_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Int64: return f(int64_t{});
    case DType::Float16: return f(::gloo::float16{});  // Gloo sums halves through float32
    // Gloo has no bfloat16; mt::BFloat16 converts to and from float, so Gloo's generic sum and max
    // compute in float32 and round each result once, as for halves.
    case DType::BFloat16: return f(BFloat16{});
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
void divide(BFloat16* data, int n, int world) {
  for (int i = 0; i < n; ++i) data[i] = static_cast<float>(data[i]) / static_cast<float>(world);
}

constexpr size_t kGatherMaxBytes = 128 * 1024;  // Note [Allreduce algorithm]

// Note [Bounded messages]: on synchronous pairs (Note [Synchronous pairs] in gloo_connect.cpp) a send
// returns only once the whole message is in the kernel's socket buffers, and nothing reads a socket
// until its owner asks. Gloo's halving-doubling and ring algorithms have two ranks (or a whole ring)
// send to each other at the same step before either receives, so a message larger than what the two
// socket buffers hold leaves every rank of the cycle blocked in its write: a GPT of 2 x 512 (25 MiB
// bucket, 13 MiB messages) sat there until the collective timeout at 2, 3 and 4 ranks. So large
// collectives run as a sequence of runs over pieces of at most kPieceBytes, each message then at
// most that much (halving-doubling sends at most half its buffer per step at a power-of-two world,
// the ring one rank's piece): well inside what a loopback or LAN TCP connection buffers from its
// first bytes (Linux sizes the send buffer to about twice the initial window, some 1.3 MB on
// loopback). The cost is Gloo's latency once per piece, about 45 us at 2 ranks (bench_allreduce,
// 1,000 floats) against about 0.5 ms to move the piece's MiB (scripts/scaling_model.py's Gloo fit,
// 0.49 ns per byte): under a tenth of a large collective's time.
constexpr size_t kPieceBytes = 1024 * 1024;
template <typename T>
int piece_elements() { return static_cast<int>(kPieceBytes / sizeof(T)); }

// Gloo's bound-buffer algorithms count elements in an int.
int element_count(const Tensor& t) {
  MT_CHECK(t.numel() <= std::numeric_limits<int>::max(), "ProcessGroupGloo: ", t.numel(),
           " elements is more than Gloo's collectives take at once (2^31 - 1); split the tensor");
  return static_cast<int>(t.numel());
}

}  // namespace

struct ProcessGroupGloo::Gloo {
  std::shared_ptr<::gloo::rendezvous::Context> context;
  std::unique_ptr<detail::LostPeer> lost_peer;  // names the rank behind Gloo's errors (Note [Naming the lost peer])
  std::vector<char> gathered;  // allreduce_in_rank_order's (size, n) slots, kept for the next call

  // The small buffers' way (Note [Allreduce algorithm]): every rank's n elements gathered into
  // gathered, slot r from rank r, then data = ((x_0 + x_1) + x_2) + ... on every rank alike.
  template <typename T>
  void allreduce_in_rank_order(T* data, int n, const ::gloo::ReductionFunction<T>* reduce) {
    const int size = context->size;
    gathered.resize(static_cast<size_t>(size) * static_cast<size_t>(n) * sizeof(T));
    T* slots = reinterpret_cast<T*>(gathered.data());
    ::gloo::AllgatherRing<T>(context, {data}, slots, n).run();
    std::copy(slots, slots + n, data);
    for (int r = 1; r < size; ++r) reduce->call(data, slots + static_cast<size_t>(r) * n, static_cast<size_t>(n));
  }

  // Large all-reduces piece by piece (Note [Bounded messages]); each piece's result is the same bits
  // on every rank, as the whole buffer's would be (Note [Allreduce algorithm]).
  template <typename T>
  void allreduce_in_pieces(T* data, int n, const ::gloo::ReductionFunction<T>* reduce) {
    for (int off = 0; off < n; off += piece_elements<T>())
      ::gloo::AllreduceHalvingDoubling<T>(context, {data + off}, std::min(piece_elements<T>(), n - off), reduce).run();
  }

  // Every rank's n elements into out, rank by rank, gathered a piece at a time (Note [Bounded
  // messages]) through `pieces`, from where each rank's piece is copied to its place in out.
  template <typename T>
  void allgather(const T* in, T* out, int n) {
    const int size = context->size, piece = std::max(1, piece_elements<T>() / size);
    if (n <= piece) {
      ::gloo::AllgatherRing<T>(context, {in}, out, n).run();
      return;
    }
    pieces.resize(static_cast<size_t>(size) * static_cast<size_t>(piece) * sizeof(T));
    T* slots = reinterpret_cast<T*>(pieces.data());
    for (int off = 0; off < n; off += piece) {
      const int len = std::min(piece, n - off);
      ::gloo::AllgatherRing<T>(context, {in + off}, slots, len).run();
      for (int r = 0; r < size; ++r)
        std::memcpy(static_cast<void*>(out + static_cast<size_t>(r) * n + off), slots + static_cast<size_t>(r) * len,
                    static_cast<size_t>(len) * sizeof(T));
    }
  }

  // Note [Reduce-scatter algorithm]: the same switch as Note [Allreduce algorithm], on the whole
  // buffer's bytes. Small buffers are allgathered and each rank adds the slots of its own shard in
  // rank order, x_0 + x_1 + ... (the all-reduce's sum, bit for bit, so a test can compute it).
  // Large ones go through Gloo's halving-doubling reduce-scatter, which moves (size-1)/size of the
  // buffer per rank, like a ring, and works in place on the buffer it is given: on return, that
  // buffer's FIRST shard holds this rank's result. (Gloo's unbound-buffer algorithms are out: our pairs are synchronous, Note
  // [Synchronous pairs] in gloo_connect.cpp.)
  template <typename T>
  void reduce_scatter(T* out, T* data, int n_shard) {
    const int size = context->size, rank = context->rank;
    const size_t n = static_cast<size_t>(n_shard), total = n * static_cast<size_t>(size);
    if (total * sizeof(T) <= kGatherMaxBytes) {
      gathered.resize(total * static_cast<size_t>(size) * sizeof(T));
      T* slots = reinterpret_cast<T*>(gathered.data());
      ::gloo::AllgatherRing<T>(context, {data}, slots, static_cast<int>(total)).run();
      const size_t own = static_cast<size_t>(rank) * n;
      std::copy(slots + own, slots + own + n, out);
      for (int r = 1; r < size; ++r) ::gloo::ReductionFunction<T>::sum->call(out, slots + r * total + own, n);
      return;
    }
    // Piece by piece (Note [Bounded messages]): piece `off` of every rank's shard side by side in
    // `pieces`, reduce-scattered there, this rank's result then at its front. A byte copy throughout:
    // gloo::float16 declares a copy assignment of its own, but it only copies the bits.
    const size_t piece = static_cast<size_t>(std::max(1, piece_elements<T>() / size));
    pieces.resize(static_cast<size_t>(size) * piece * sizeof(T));
    T* side = reinterpret_cast<T*>(pieces.data());
    for (size_t off = 0; off < n; off += piece) {
      const size_t len = std::min(piece, n - off);
      for (int r = 0; r < size; ++r)
        std::memcpy(static_cast<void*>(side + r * len), data + r * n + off, len * sizeof(T));
      ::gloo::ReduceScatterHalvingDoubling<T>(context, {side}, static_cast<int>(len) * size,
                                              std::vector<int>(size, static_cast<int>(len)))
          .run();
      std::memcpy(static_cast<void*>(out + off), side, len * sizeof(T));
    }
  }
  std::vector<char> pieces;  // allgather's and reduce_scatter's pieces (Note [Bounded messages])
};

bool ProcessGroupGloo::is_available() { return true; }

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size,
                                   ProcessGroupGlooOptions opts)
    : ProcessGroup(rank, size, opts.timeout), store_(std::move(store)), gloo_(std::make_unique<Gloo>()),
      queue_(std::make_unique<detail::CollectiveQueue>()) {
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

  // Note [Connecting without hostages] in gloo_connect.cpp: bounded by the timeout, whatever the peers do.
  gloo_->context = detail::connect_gloo(store_, rank, size, opts);
  gloo_->lost_peer = std::make_unique<detail::LostPeer>(*gloo_->context, store_, timeout());
}

ProcessGroupGloo::~ProcessGroupGloo() = default;

// Note [A world of one]: Gloo's ring algorithms need a peer; with none, every collective is its own
// result (an all-reduce or broadcast leaves the tensor as it is), so they return before Gloo.

void ProcessGroupGloo::enqueue(const std::shared_ptr<Work>& work, std::function<void()> run) {
  queue_->push(work, [this, description = work->description(), timeout = timeout(), run = std::move(run)] {
    try {
      run();
    } catch (const Error&) {
      throw;  // ours, already named
    } catch (const std::exception& e) {
      // Gloo's exceptions say what happened to which socket; ours add which collective, which rank
      // that socket led to and where the failure began (Note [Naming the lost peer], which also
      // leaves this rank's notice for its peers: before the connections close, below).
      const std::string gloo_message = e.what();
      const bool timed_out = gloo_message.find("Timed out") != std::string::npos ||
                             gloo_message.find("timeout") != std::string::npos;
      const std::string lost = gloo_->lost_peer->explain(gloo_message, timed_out);
      // Note [A failure closes the connections]: the queue is poisoned now (Note [A failed collective
      // poisons the queue]), so the connections will carry nothing more; closing them at once makes
      // the peers that wait for this rank in the same collective fail now, with "connection closed",
      // instead of at their timeout. One dead rank thus ends the collective on every rank within a
      // round trip, whichever peers it talked to.
      for (int peer = 0; peer < size(); ++peer)
        if (peer != rank()) gloo_->context->getPair(peer)->close();
      if (timed_out)
        MT_FAIL_TIMEOUT(description, " timed out after ", format_ms(timeout), ": ",
                        lost.empty() ? "a peer is dead or hung, or did not issue the same collective" : lost,
                        " (Note [Collective order]). Gloo: ", gloo_message);
      MT_FAIL_PEER_LOST(description, " failed (timeout ", format_ms(timeout), "): ",
                        lost.empty() ? "a peer closed its connection or the network failed; did another rank exit?" : lost,
                        ". Gloo: ", gloo_message);
    }
  });
}

void ProcessGroupGloo::allreduce_now(const Tensor& tensor, ReduceOp op) {
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
    // order on every rank from 3 ranks on. So small buffers are allgathered, then every rank adds
    // the slots in rank order, x_0 + x_1 + ...: the same one message per step as the ring, and as
    // fast (bench_allreduce, 11 floats: 2 ranks 41 us, the ring 40; 3 ranks 126 us, the ring 130),
    // where halving-doubling took 110 us against the ring's 58 at 1,000 floats. Halving-doubling (reduce-scatter, then allgather, by recursive halving) reduces each
    // chunk on one rank and sends that rank's result to all, so its ranks agree; it moves 1/size of
    // the data per message and wins for large buffers, 242 us against 1,058 us for 203,530 floats
    // at 2 ranks; the two cross near 128 KiB.
    if (static_cast<size_t>(n) * sizeof(T) <= kGatherMaxBytes)
      gloo_->allreduce_in_rank_order(data, n, reduce);
    else
      gloo_->allreduce_in_pieces(data, n, reduce);
    if (op == ReduceOp::Avg) divide(data, n, size());  // Sum, then divide: Gloo has no average
  });
}

std::shared_ptr<Work> ProcessGroupGloo::run_allreduce(Tensor& tensor, ReduceOp op, const std::string& what) {
  auto work = std::make_shared<Work>(what, timeout());
  enqueue(work, [this, tensor, op] { allreduce_now(tensor, op); });
  return work;
}

// Note [Guarding large all-reduces] in collective_guard.cpp: the guard's all-reduce ran just before on
// this same thread, so its verdict is known when this one's turn comes.
std::shared_ptr<Work> ProcessGroupGloo::run_allreduce_if(Tensor& tensor, ReduceOp op, const std::string& what,
                                                         std::function<bool()> proceed) {
  auto work = std::make_shared<Work>(what, timeout());
  enqueue(work, [this, tensor, op, proceed = std::move(proceed)] {
    if (proceed()) allreduce_now(tensor, op);
  });
  return work;
}

std::shared_ptr<Work> ProcessGroupGloo::run_broadcast(Tensor& tensor, int root, const std::string& what) {
  auto work = std::make_shared<Work>(what, timeout());
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

std::shared_ptr<Work> ProcessGroupGloo::run_allgather(std::vector<Tensor>& outputs, const Tensor& input,
                                                      const std::string& what) {
  auto work = std::make_shared<Work>(what, timeout());
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
        gloo_->allgather(static_cast<const T*>(input.raw_data()), static_cast<T*>(flat.raw_data()), n);
      for (int r = 0; r < size(); ++r)
        std::memcpy(outputs[r].raw_data(), static_cast<T*>(flat.raw_data()) + static_cast<int64_t>(r) * n, n * sizeof(T));
    });
  });
  return work;
}

std::shared_ptr<Work> ProcessGroupGloo::run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op,
                                                           const std::string& what) {
  auto work = std::make_shared<Work>(what, timeout());
  // Out of place, Gloo works on a copy, so that the input stays as it was.
  const bool in_place = is_own_shard(output, input, rank());
  const Tensor work_on = in_place || size() == 1 ? input : raw::clone(input);
  enqueue(work, [this, output, work_on, op] {
    const int n = element_count(output);
    element_count(work_on);
    if (n == 0) return;
    with_type(work_on.dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* out = static_cast<T*>(output.raw_data());
      T* data = static_cast<T*>(work_on.raw_data());
      if (size() == 1) {  // Note [A world of one]
        if (out != data) std::copy(data, data + n, out);
      } else {
        gloo_->reduce_scatter(out, data, n);
      }
      if (op == ReduceOp::Avg) divide(out, n, size());
    });
  });
  return work;
}

std::shared_ptr<Work> ProcessGroupGloo::run_allgather_into(Tensor& output, const Tensor& input, const std::string& what) {
  auto work = std::make_shared<Work>(what, timeout());
  enqueue(work, [this, output, input] {
    const int n = element_count(input);
    element_count(output);
    if (n == 0) return;
    with_type(input.dtype(), [&](auto zero) {
      using T = decltype(zero);
      T* out = static_cast<T*>(output.raw_data());
      const T* in = static_cast<const T*>(input.raw_data());
      T* own = out + static_cast<int64_t>(rank()) * n;
      if (size() == 1) {
        if (own != in) std::copy(in, in + n, own);
        return;
      }
      // The ring first copies its input into its own shard; in place, from a copy (memcpy must not
      // copy a buffer onto itself).
      std::vector<T> copy;
      if (in == own) copy.assign(own, own + n);
      gloo_->allgather(copy.empty() ? in : copy.data(), out, n);
    });
  });
  return work;
}

std::shared_ptr<Work> ProcessGroupGloo::run_barrier(const std::string& what) {
  auto work = std::make_shared<Work>(what, timeout());
  enqueue(work, [this] {
    if (size() > 1) ::gloo::BarrierAllToAll(gloo_->context).run();
  });
  return work;
}

}  // namespace mt::dist
