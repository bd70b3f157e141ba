// init_process_group: store + backend from a RendezvousInfo (see init.h). The backends themselves are
// looked up by name (backends.h): this file knows none of them, so it links neither Gloo nor MPI.
#include "distributed/process_group/init_process_group.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "distributed/process_group/backends.h"
#include "distributed/store/tcp_store.h"
#include "distributed/store/torch_store.h"

namespace mt::dist {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::string resolve_backend(const InitOptions& opts) {
  if (opts.backend != "auto") return opts.backend;
  if (opts.cuda_device >= 0) return "nccl";
  // RANK is what torchrun and mini_train's launcher set: their ranks meet through a store, even
  // inside a Slurm allocation whose variables would also name a rank.
  const std::optional<RendezvousInfo> launched = process_env("RANK") ? std::nullopt : rendezvous_from_mpi_launcher();
  if (launched && process_group_backend_available("mpi")) return "mpi";
  if (opts.rendezvous.world_size == 1 && !opts.store) return "local";
  // Ranks started by mpirun (or srun) without MASTER_PORT have no store to meet at, so Gloo cannot
  // run either: the missing piece is the MPI backend, and the error names its component rather
  // than Gloo's, or the port.
  if (launched && launched->master_port == 0 && !opts.store) {
    const std::vector<std::string> linked = registered_process_group_backends();
    const bool mpi_linked = std::find(linked.begin(), linked.end(), "mpi") != linked.end();
    const char* launcher = process_env("SLURM_PROCID") && !process_env("OMPI_COMM_WORLD_RANK") &&
                                   !process_env("PMI_RANK") ? "srun" : "mpirun";
    MT_CHECK(mpi_linked, "init_process_group: this program was started by ", launcher,
             ", but the MPI backend is not linked: link minitrain::mpi (find_package(minitrain COMPONENTS mpi))");
    return "mpi";  // linked from a build without MPI: its stub says what is missing
  }
  return "gloo";
}

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& given) {
  InitOptions opts = given;
  opts.backend = resolve_backend(given);
  const RendezvousInfo& info = opts.rendezvous;
  validate(info);
  const ProcessGroupBackend& backend = process_group_backend(opts.backend);  // throws for a missing one
  if (!backend.needs_store) return backend.make(opts, nullptr);

  WaitNotices notices = opts.wait_notices;
  if (notices.who.empty()) notices.who = "rank " + std::to_string(info.rank) + " of " + std::to_string(info.world_size);
  std::shared_ptr<Store> store = opts.store;
  if (store) store->set_wait_notices(notices);
  if (!store && process_env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True") {
    // Note [torchrun's agent store]: torchrun's agent already hosts a PyTorch TCPStore at
    // MASTER_ADDR:MASTER_PORT (rank 0 hosting its own there fails: the port is taken), so every rank
    // joins it as a client (torch_store.h). The keys go under the restart count: torchrun's
    // --max-restarts keeps the agent, and its store, across restarts of the workers.
    MT_CHECK(info.master_port > 0, "init_process_group: TORCHELASTIC_USE_AGENT_STORE is set but MASTER_PORT is not");
    store = std::make_shared<PrefixStore>(
        "minitrain/" + process_env("TORCHELASTIC_RESTART_COUNT").value_or("0"),
        std::make_shared<TorchTCPStore>(TorchTCPStoreOptions{.host = info.master_addr, .port = info.master_port,
                                                             .timeout = opts.timeout, .notices = notices}));
  }
  if (!store) {
    // Note [Launcher-hosted store]: a launcher that restarts its workers hosts the store itself, so
    // that it outlives every one of them (mini_train --nnodes with --max-restarts: node 0's launcher,
    // for the whole job). It names a fresh prefix per attempt in info.store_prefix (keys are never
    // deleted, so attempt k+1 must not find attempt k's addresses), and every rank, rank 0 too,
    // connects as a client.
    const bool host = opts.rank0_hosts_store && info.store_prefix.empty() && info.rank == 0;
    MT_CHECK(info.master_port > 0 || (host && info.world_size == 1), "init_process_group: rank ", info.rank,
             " of ", info.world_size, " has no master_port to meet the others at");
    store = std::make_shared<TCPStore>(TCPStoreOptions{.host = info.master_addr,
                                                       .port = info.master_port,
                                                       .is_server = host,
                                                       .job_token = opts.job_token,
                                                       .timeout = opts.timeout,
                                                       // everyone is on this machine: nobody else may connect
                                                       .loopback_only = host && is_loopback(info.master_addr),
                                                       .notices = notices});
    if (!info.store_prefix.empty()) store = std::make_shared<PrefixStore>(info.store_prefix, store);
  }
  // The group's keys live under their own prefix, so the store can serve a launcher (or a second
  // group) without collisions.
  return backend.make(opts, std::make_shared<PrefixStore>("default_pg", store));
}

}  // namespace mt::dist
