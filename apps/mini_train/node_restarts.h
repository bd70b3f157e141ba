// mini_train --nnodes M --max-restarts K: the restarts of a job that spans machines, with ONE
// restart count for the whole job. launcher.cpp hands the job over here; how the launchers agree is
// distributed/fault/job_attempts.h; one run of this node's workers is workers.h's run_workers.
//
// Note [Restarts across nodes]:
//   1. Node 0's launcher hosts the job's TCPStore on --master-port for the whole job; every worker,
//      rank 0 too, joins it as a client (Note [Launcher-hosted store] in distributed/process_group/init_process_group.cpp), and
//      the other nodes' launchers connect to it with MT_JOB_TOKEN, as their workers do.
//   2. At the start the launchers meet once ("start") and compare what must be equal on every node
//      (--nproc, --max-restarts, whether there is a --checkpoint-dir), and the folder itself (Note
//      [One checkpoint folder]). A mismatch ends the job on every node with one line.
//   3. Attempt k: the M launchers meet ("attempt/k"; after --timeout the line names the nodes that
//      did not come). Node 0, whose workers are stopped (nothing is being written), brings the name
//      of the newest checkpoint; the others must see the same one. The workers start with
//      MT_STORE_PREFIX=attempt/k, a fresh prefix (store keys are never deleted), and from attempt 1
//      on with --resume auto.
//   4. A failure on any node (a worker's exit or signal, a stopped worker, a stopped launcher: Note
//      [Launcher heartbeats]) is posted once as attempt k's cause (the first poster wins). Every
//      launcher polls for it while it supervises, stops its workers, and then either meets at
//      attempt k+1 and prints "restart k+1 of K ... after <cause>", the same line on every node, or,
//      with no restart left, ends with the cause, non-zero on every node. An interrupt (Ctrl-C) ends
//      the job on every node and is never restarted. A launcher that loses the store (node 0's
//      launcher ended, or its machine is gone) stops its workers and ends with one line.
//   5. Success: every node's workers exit 0; each launcher says so and waits (at most --timeout)
//      until every node has, so node 0 keeps the store up until the last one is done.
//
// Note [One checkpoint folder]: a restarted job resumes every rank from one checkpoint, the one rank
// 0 wrote, and every rank must read that same file (DDP broadcasts parameters, not the optimizer's
// state). Two ways: (a) --checkpoint-dir is one folder that every node sees (NFS, a cluster
// filesystem), checked; or (b) rank 0 sends its checkpoint to the others at every resume. We take
// (a): it needs no new code in the trainer's resume paths (--resume PATH and auto, --zero 1's
// gathered shards) and no broadcast of the whole model and optimizer state per restart, and jobs on
// several machines have such a folder for their data and results anyway. It is checked, not
// assumed: at the start node 0 writes a random nonce into its --checkpoint-dir (kSharedCheckFile)
// and every other node must read that nonce in its own; at every attempt node 0 names the newest
// checkpoint it sees and a node that sees another (a stale cache) ends the job rather than train
// from a different state.
#pragma once

#include <string>
#include <vector>

#include "apps/mini_train/options.h"

namespace mt::app {

// Runs this node's part of the job (`nproc` workers of `worker_argv`) through every attempt; returns
// the launcher's exit code: 0 when every node's workers succeeded, 1 after a failure with no restart
// left (or a setup mismatch, or the store lost), 128 + signal when this launcher was interrupted.
int launch_nodes(const Options& opts, std::vector<std::string> worker_argv, int nproc);

}  // namespace mt::app
