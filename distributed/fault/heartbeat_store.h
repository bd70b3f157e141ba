// Heartbeats through the job's store, for ranks that no mini_train launcher watches (started by
// torchrun, srun, or by hand with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT): the same question as
// Note [Heartbeat] in heartbeat.h (which rank stopped, and where), answered by the ranks themselves.
//
// Note [Store heartbeat]: every rank's StoreHeartbeat thread, once a second,
//   1. sets "heartbeat/<rank>" to "<seq> <phase> <bucket> <step>" (seq counts up: a changed value
//      is a beat);
//   2. reads the beats of the ranks it watches: rank 0 watches every other rank, rank 1 watches
//      rank 0 (so a stopped rank 0 is named too). A watched rank whose value has not changed for the
//      heartbeat timeout has stopped: the watcher sets "heartbeat/stopped" to a line naming it and its
//      last phase, and calls on_stopped with that line;
//   3. reads "heartbeat/stopped": set by a watcher, every rank calls on_stopped with it within a
//      second, so the whole job ends with the same line (no rank is left waiting in a collective for
//      the stopped one until the collective timeout).
// A store that stops answering for the heartbeat timeout (its host, rank 0 unless a launcher or
// torchrun hosts it, is stopped) is reported the same way, by every rank that sees it.
// Requests per second: about 2·world at the store (a check and a get per watched rank), not
// world². The beat comes from its own thread over its own store connection, so a slow rank (long
// evaluation, checkpoint write, waiting for a slow peer) keeps beating; a rank that ends sets "heartbeat/<rank>" to "done" first, so a rank
// that finished early (rank 0 still evaluating) is not taken for a stopped one.
//
// What it does not do: end the process (on_stopped does: library code never exits), restart
// anything, or find a store for MPI jobs, which meet without one (mini_train's launcher, or its
// rank 0 under a bare mpirun, hosts one for them: apps/mini_train/peer_heartbeat.cpp).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "distributed/store/rendezvous.h"
#include "distributed/store/store.h"

namespace mt::dist {

struct StoreHeartbeatOptions {
  std::chrono::milliseconds timeout = std::chrono::seconds(30);  // silence that means "stopped"
  std::chrono::milliseconds every = std::chrono::seconds(1);
  // Called once, from the heartbeat thread, with the line naming the stopped rank (or store).
  std::function<void(const std::string& line)> on_stopped;
};

class StoreHeartbeat {
 public:
  // `store`: a connection of this heartbeat's own (its requests block; see connect_job_store).
  StoreHeartbeat(std::shared_ptr<Store> store, int rank, int world_size, StoreHeartbeatOptions opts);
  ~StoreHeartbeat();  // sets this rank's beat to "done", then stops the thread
  StoreHeartbeat(const StoreHeartbeat&) = delete;
  StoreHeartbeat& operator=(const StoreHeartbeat&) = delete;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A new client connection to the store that init_process_group met the ranks at for `info`: the
// TCPStore at master_addr:master_port (rank 0's or a launcher's; token from MT_JOB_TOKEN), or, under
// torchrun's agent store, torchrun's (Note [torchrun's agent store] in init_process_group.cpp). Its requests give
// up after `timeout`.
std::shared_ptr<Store> connect_job_store(const RendezvousInfo& info, std::chrono::milliseconds timeout);

}  // namespace mt::dist
