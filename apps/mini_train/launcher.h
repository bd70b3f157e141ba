// mini_train's launcher: `mini_train --nproc N` runs the same job data-parallel on N CPU processes,
// `mini_train --gpus 0,1` on one process per listed GPU (worker LOCAL_RANK r trains on the r-th).
// The launcher process trains nothing itself; it
//   1. picks the store's port (a free one unless --master-port), a random MT_JOB_TOKEN, and sets
//      RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT for each child
//      (and OPENBLAS_NUM_THREADS=1 unless the user set it: N ranks share the cores);
//   2. fork+execs N workers of this binary (/proc/self/exe) with the same arguments minus --nproc;
//      each child gets PR_SET_PDEATHSIG(SIGKILL), so none outlives the launcher;
//   3. supervises them: a worker that exits non-zero or by a signal ends the job (the others get
//      SIGTERM, then SIGKILL after a grace period, workers.h) and the launcher prints ONE line naming
//      the rank that failed first, with the reason it reported ("mini_train: rank 1 exited with code
//      1: ...", "... was killed by signal 9"), not a peer that failed after it on the connections it
//      closed (Note [The first failure is the one reported] in distributed/fault/heartbeat.h), and exits 1.
//      SIGINT/SIGTERM to the launcher stop every worker the same way (exit 128 + signal). A worker
//      that stops sending heartbeats (SIGSTOP) ends the job too, named with its phase, from start-up
//      to exit (Note [Heartbeat], Note [Watched from start to exit] in distributed/fault/heartbeat.h);
//   4. with --max-restarts K, starts them all again after a failure, from the newest checkpoint
//      (Note [Restarts] in launcher.cpp).
// A worker sees RANK/WORLD_SIZE in its environment and trains as that rank (trainer.cpp), exactly as
// it would under torchrun or srun. With --backend mpi the one child is mpirun; its ranks beat to a
// store this launcher hosts and watches (Heartbeat::from_env, MT_HEARTBEAT_STORE).
//
// Several machines (--nnodes M): run the same command on each, with --node-rank 0..M-1 and node 0's
// --master-addr and a fixed --master-port. Each launcher starts its --nproc workers as global ranks
// node_rank·nproc ... (Note [Ranks across nodes] in workers.cpp); global rank 0, on node 0, hosts
// the store. Every node must present the same job token: export one MT_JOB_TOKEN on all of them (or
// none, and the store checks nothing, as torchrun's does). A launcher supervises only its own node:
// when a rank elsewhere dies, this node's ranks fail at their next collective, and it reports that.
// With --max-restarts the launchers work together instead: node 0's hosts the store for the whole
// job, a failure anywhere stops every node, and they restart together, one count for the job
// (Note [Restarts across nodes] in node_restarts.h).
#pragma once

#include <string>
#include <vector>

#include "apps/mini_train/options.h"

namespace mt::app {

// Runs opts.nproc workers and supervises them; returns the launcher's exit code.
int launch(int argc, char** argv, const Options& opts);

// One run of `mpirun -np nproc program...` (program[0]: its path), supervised, its ranks' heartbeats
// watched in a store this launcher hosts (from their first beat on when `any_program`: `mini_train
// launch`); returns the launcher's exit code.
int run_mpirun(const Options& opts, int nproc, const std::vector<std::string>& program, bool any_program);

}  // namespace mt::app
