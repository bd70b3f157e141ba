// JobAttempts: the launchers of a job that spans machines (one launcher per node) agreeing, through
// one store, on the job's attempts: when attempt k starts, why it failed, whether every node
// finished. It is what lets `mini_train --nnodes M --max-restarts K` restart the whole job with one
// restart count (apps/mini_train/node_restarts.h); torchelastic's agents do the same job with their
// own rendezvous. The store must outlive every worker: node 0's launcher hosts it for the whole job.
//
// Note [Job attempts]: the launchers' keys, all under "launch/" (keys are never deleted, so every
// attempt and every meeting has keys of its own):
//   launch/meet/<name>/<node>        meet(): node n arrived, with a value (a check, a checkpoint name)
//   launch/attempt/<k>/failures      fail(): add()-counted; the poster that counts 1 writes ...
//   launch/attempt/<k>/cause         ... the one cause of attempt k's failure (first writer wins)
//   launch/attempt/<k>/done/<node>   finish(): every worker of node n exited 0 in attempt k
//   launch/end, launch/end/count     end(): the job ends, no further attempt (interrupt, bad setup,
//                                    a node missing at a meeting); first writer wins too
//   launch/beat/<node>               nodes 1..M-1 count up once a second; node 0 watches the counts
// The workers of attempt k meet under their own prefix, workers_prefix(k) = "attempt/<k>".
//
// Note [Launcher heartbeats]: a node whose launcher vanished without a TCP reset (its machine lost
// power, a cable pulled) cannot post a failure, and its store connection looks alive. Node 0 reads
// the other launchers' beats (only those it has seen beat at least once: a node still starting is
// the next meeting's timeout to name); one that has not changed for heartbeat_timeout fails the
// attempt naming that node, and the next meeting ends the job at once instead of at the timeout.
// Node 0 itself is watched through its store: it runs in node 0's launcher, so a stopped node 0
// makes every request of the others fail after their store timeout (set to the heartbeat timeout).
// Beats go out from whichever of meet(), poll() and finish() is running: the launcher calls them at
// least every few hundred milliseconds, except while it stops workers (a few seconds at most).
//
// Not here: starting or stopping processes (the launcher does), which checkpoint to resume from
// (meet() carries what node 0 saw; the launcher compares), elastic membership (M is fixed).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/store/store.h"

namespace mt::dist {

struct JobAttemptsOptions {
  int nnodes = 1;
  int node_rank = 0;
  std::chrono::milliseconds timeout = kDefaultTimeout;   // a meeting, and finish()'s wait for the others
  std::chrono::milliseconds heartbeat_timeout{0};        // Note [Launcher heartbeats]; 0: no beats
  std::chrono::milliseconds beat_every = std::chrono::seconds(1);
  std::chrono::milliseconds poll_every = std::chrono::milliseconds(100);  // how often meet/finish look
  WaitNotices notices{};  // what a long meeting says, every notices.every (Note [Waiting out loud])
};

// Why a launcher stops its workers: the cause of the attempt's failure (posted by any node), or the
// end of the job.
struct JobStop {
  std::string cause;
  bool final = false;  // end() was called: no attempt follows, whatever restarts are left
};

// Thrown by meet() when the job was ended (by this node: a node missing at the timeout; or by
// another); what() is the cause, the one line every node prints.
class JobEnded : public Error {
 public:
  using Error::Error;
};

class JobAttempts {
 public:
  JobAttempts(std::shared_ptr<Store> store, JobAttemptsOptions opts);

  // A barrier of the nnodes launchers named `name`, where each brings `value`: returns every node's
  // value, index = node. Throws JobEnded when the job was ended meanwhile, or when a node has not
  // come after opts.timeout (the line names those nodes; this node ends the job with it).
  std::vector<std::string> meet(const std::string& name, const std::string& value);

  // Attempt `attempt` failed with `cause` ("node 1: rank 3 was killed by signal 9"). The first
  // poster's cause is the attempt's; later posts change nothing (Note [Job attempts]).
  void fail(int attempt, const std::string& cause);
  // Ends the job with `cause`: every node stops, and none starts another attempt.
  void end(const std::string& cause);

  // One look while this node's workers run: beats, watches (Note [Launcher heartbeats]), and says
  // why to stop, if anyone posted a failure of `attempt` or ended the job.
  std::optional<JobStop> poll(int attempt);
  // Why `attempt` stopped, waiting up to opts.timeout for its cause (a poster may be between its
  // count and its cause). For a launcher whose own workers failed: the cause that won.
  JobStop stop_of(int attempt);
  // Every worker of this node exited 0: says so, then waits until every node has (nullopt: the job
  // is done) or the attempt failed elsewhere (its stop). After opts.timeout it fails the attempt,
  // naming the nodes that never reported.
  std::optional<JobStop> finish(int attempt);

  // The store prefix under which attempt k's workers meet (MT_STORE_PREFIX).
  static std::string workers_prefix(int attempt);

 private:
  struct Seen {  // node 0's view of another node's beats
    std::string value;
    Clock::time_point changed;
  };
  std::optional<std::string> beat();  // a stopped launcher's line, from node 0's watch
  std::optional<JobStop> stopped(int attempt);
  std::string nodes(const std::vector<int>& which) const;  // "nodes 1, 2 of 3"

  std::shared_ptr<Store> store_;
  JobAttemptsOptions opts_;
  uint64_t beats_ = 0;
  Clock::time_point next_beat_{};
  std::map<int, Seen> seen_;
};

}  // namespace mt::dist
