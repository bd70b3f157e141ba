// init_process_group: from "who am I and where do we meet" (RendezvousInfo) to a working ProcessGroup,
// the way torch.distributed.init_process_group does it:
//
//   auto info = mt::dist::rendezvous_from_env().value_or(mt::dist::RendezvousInfo{});
//   auto pg = mt::dist::init_process_group({.rendezvous = info});   // backend "auto"
//
//   "auto"   (the default) what the launch implies: "nccl" when cuda_device is set; "mpi" when
//            mpirun/mpiexec/srun started this process (and not a RANK-setting launcher such as
//            torchrun or mini_train's) and this build has MPI; "local" for a world of one without a
//            store; else "gloo". pg->backend() says which was chosen.
//   "local"  a world of one (ProcessGroupLocal); needs no store
//   "gloo"   rank 0 hosts a TCPStore at master_addr:master_port, every rank connects to it, and the
//            ranks meet there to build a ProcessGroupGloo
//   "mpi"    a ProcessGroupMPI over the processes mpirun/srun started; no store (rank and size come
//            from MPI; a rendezvous with world_size > 1, e.g. rendezvous_from_mpi_launcher(), must match)
//   "nccl"   the same store, then a ProcessGroupNCCL on GPU local_rank (CUDA tensors)
//
// Under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True), every rank joins the PyTorch
// TCPStore that torchrun hosts at MASTER_ADDR:MASTER_PORT (torch_store.h) instead.
//
// A launcher that hosts the store itself (so that it outlives any one rank) passes that store in
// `store`, or sets rank0_hosts_store = false so that rank 0 connects like everyone else, or names a
// RendezvousInfo::store_prefix: then rank 0 connects too, and the job's keys go under that prefix
// (Note [Launcher-hosted store] in init_process_group.cpp). A FileStore can be passed the same way.
//
// There is no global "default group": the returned group is passed to whatever needs it (DDP, a
// sampler's seed agreement), so a reader can always see which group a collective runs on.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "distributed/process_group/process_group.h"
#include "distributed/store/rendezvous.h"
#include "distributed/store/store.h"

namespace mt::dist {

struct InitOptions {
  std::string backend = "auto";    // "auto", "gloo", "mpi", "nccl" or "local" (see above)
  RendezvousInfo rendezvous{};     // default: a world of one
  std::chrono::milliseconds timeout = kDefaultTimeout;  // the store's and every collective's
  // What the rendezvous says while it waits long: a line every 10 s naming the ranks not yet arrived
  // or the store address not answering (Note [Waiting out loud]); `who` defaults to "rank R of W".
  // Set on the store, also on a store passed in below.
  WaitNotices wait_notices{};
  std::optional<std::string> job_token{};  // for the TCPStore (Note [Job token]); default $MT_JOB_TOKEN
  bool rank0_hosts_store = true;   // false: a launcher hosts the TCPStore at master_addr:master_port
  std::shared_ptr<Store> store{};  // set: meet through this store instead of a new TCPStore
  // The address peers reach this rank's Gloo sockets at (ProcessGroupGlooOptions). Empty: 127.0.0.1
  // when master_addr is a loopback address (everyone is on this machine), else the machine's host name.
  std::string gloo_hostname{};
  std::string gloo_interface{};    // empty: $GLOO_SOCKET_IFNAME, if set
  int cuda_device = -1;            // nccl: this rank's GPU; -1: rendezvous.local_rank
};

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& opts = {});

// The backend init_process_group uses for `opts`: opts.backend, or what "auto" resolves to.
std::string resolve_backend(const InitOptions& opts);

// Whether `host` names this machine's loopback interface ("127.0.0.1", "127.x.y.z", "localhost", "::1").
bool is_loopback(const std::string& host);

}  // namespace mt::dist
