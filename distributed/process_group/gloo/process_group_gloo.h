// ProcessGroupGloo: collectives on CPU tensors over Gloo's TCP transport (github.com/facebookincubator/gloo,
// the library PyTorch's CPU backend uses). Ranks exchange their Gloo addresses through our Store, then
// each pair of ranks keeps a TCP connection for the group's lifetime.
//
//   auto store = std::make_shared<TCPStore>(TCPStoreOptions{.host = "10.0.0.1", .port = 29500,
//                                                           .is_server = rank == 0});
//   ProcessGroupGloo pg(store, rank, world_size, {.timeout = std::chrono::seconds(30)});
//   pg.allreduce(t)->wait();
//
// Gloo's collectives block the calling thread, so they run on a CollectiveQueue (detail/collective_queue.h): allreduce()
// returns at once and the caller keeps computing, which is what lets DDP overlap communication with
// backward. Gloo itself is only ever touched from that one thread, so it needs no locking here.
//
// Each collective gets the group's timeout as Gloo's end-to-end timeout: a peer that dies makes the
// others fail as soon as its sockets close (usually at once), and a peer that hangs makes them fail
// when the timeout runs out; the error names the collective and the timeout either way.
//
// Not here: Gloo's ibverbs transport, ReduceOp beyond Sum/Avg/Max, reduce/scatter/all-to-all, splitting
// the group. Built only where CMake found Gloo (Debian: libgloo-dev; conda-forge has none);
// elsewhere is_available() is false and the constructor says so.
#pragma once

#include <memory>
#include <string>

#include "distributed/process_group/process_group.h"
#include "distributed/store/store.h"

namespace mt::dist {

namespace detail {
class CollectiveQueue;
}

struct ProcessGroupGlooOptions {
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // The address peers use to reach this rank: a host name or an IP address of this machine. Empty:
  // Gloo resolves this machine's host name (init_process_group passes 127.0.0.1 for single-machine
  // jobs whose MASTER_ADDR is a loopback address).
  std::string hostname{};
  // A network interface ("eth0", "ib0", "lo") whose address to use instead; PyTorch's
  // GLOO_SOCKET_IFNAME. Takes precedence over hostname.
  std::string interface{};
};

class ProcessGroupGloo : public ProcessGroup {
 public:
  // Meets the other ranks through `store` and connects to every one of them. Blocks until all `size`
  // ranks have arrived; throws a TimeoutError naming the ranks that did not, or an mt::Error when this
  // rank's world size differs from rank 0's. Use a fresh store (or PrefixStore) per group.
  ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, ProcessGroupGlooOptions opts = {});
  ~ProcessGroupGloo() override;

  // Whether this build has Gloo.
  static bool is_available();
  std::string backend() const override { return "gloo"; }
  const std::shared_ptr<Store>& store() const { return store_; }

 private:
  // The collectives (Note [One opening for every collective]: ProcessGroup checked and numbered them).
  std::shared_ptr<Work> run_allreduce(Tensor& tensor, ReduceOp op, const std::string& what) override;
  std::shared_ptr<Work> run_broadcast(Tensor& tensor, int root, const std::string& what) override;
  std::shared_ptr<Work> run_allgather(std::vector<Tensor>& outputs, const Tensor& input, const std::string& what) override;
  std::shared_ptr<Work> run_barrier(const std::string& what) override;
  std::shared_ptr<Work> run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op,
                                           const std::string& what) override;
  std::shared_ptr<Work> run_allgather_into(Tensor& output, const Tensor& input, const std::string& what) override;
  std::shared_ptr<Work> run_allreduce_if(Tensor& tensor, ReduceOp op, const std::string& what,
                                         std::function<bool()> proceed) override;
  void allreduce_now(const Tensor& tensor, ReduceOp op);  // on the queue's thread

  struct Gloo;  // Gloo's context; defined in process_group_gloo.cpp so that Gloo's headers stay private
  // Queues `run` for `work`, turning Gloo's exceptions into errors that name the collective.
  void enqueue(const std::shared_ptr<Work>& work, std::function<void()> run);

  std::shared_ptr<Store> store_;    // kept: rank 0's hosts the TCPStore server for the whole job
  std::unique_ptr<Gloo> gloo_;
  std::unique_ptr<detail::CollectiveQueue> queue_;  // declared last: joined before gloo_ is destroyed
};

}  // namespace mt::dist
