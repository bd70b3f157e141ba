// The restarts of a job on several machines (see node_restarts.h, Note [Restarts across nodes]).
#include "apps/mini_train/node_restarts.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "apps/mini_train/workers.h"
#include "distributed/process_group/init_process_group.h"
#include "distributed/fault/job_attempts.h"
#include "distributed/store/tcp_store.h"
#include "nn/checkpoint.h"
#include "tensor/check.h"
#include "tensor/output_file.h"

namespace mt::app {

namespace {

// Node 0 writes a nonce here at the start; every node must read it (Note [One checkpoint folder]).
constexpr const char* kSharedCheckFile = ".mini_train-shared-check";

// One node's launcher: its store connection, the launchers' agreement, and how it talks.
struct Node {
  const Options& o;
  int nproc;
  std::string who;  // "node 1"
  std::shared_ptr<dist::Store> store{};
  std::unique_ptr<dist::JobAttempts> job{};

  // Ends the job on every node with `line`, and this launcher too.
  [[noreturn]] void end(const std::string& line) {
    job->end(line);
    throw dist::JobEnded(line);
  }
};

// Node 0 hosts the store (Note [Restarts across nodes], 1); the others connect, and a request that
// node 0 does not answer for --heartbeat-timeout means node 0 is gone (Note [Launcher heartbeats]).
std::shared_ptr<dist::Store> job_store(const Options& o) {
  const char* token = std::getenv("MT_JOB_TOKEN");
  const bool host = o.node_rank == 0;
  auto store = std::make_shared<dist::TCPStore>(dist::TCPStoreOptions{
      .host = o.master_addr, .port = o.master_port, .is_server = host, .job_token = token ? token : "",
      .timeout = std::chrono::seconds(o.timeout), .loopback_only = host && dist::is_loopback(o.master_addr),
      .notices = {.who = "node " + std::to_string(o.node_rank) + " of " + std::to_string(o.nnodes)}});
  if (!host && o.heartbeat_timeout > 0) store->set_timeout(std::chrono::seconds(o.heartbeat_timeout));
  return store;
}

// What every node must agree on (Note [Restarts across nodes], 2).
std::string setup_of(const Options& o, int nproc) {
  return "--nproc " + std::to_string(nproc) + " --max-restarts " + std::to_string(o.max_restarts) +
         (o.checkpoint_dir.empty() ? " without --checkpoint-dir" : " with a --checkpoint-dir");
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The "start" meeting: node 0 brings its setup, a nonce it wrote into its --checkpoint-dir and that
// folder's name; every other node compares (Note [One checkpoint folder]).
void start(Node& n) {
  const Options& o = n.o;
  std::string mine = setup_of(o, n.nproc);
  if (o.node_rank == 0 && !o.checkpoint_dir.empty()) {
    const std::string nonce = random_token();
    const std::string path = (std::filesystem::path(o.checkpoint_dir) / kSharedCheckFile).string();
    write_file_atomically(path, nonce + '\n', "--checkpoint-dir (node 0's check that every node sees the folder)");
    mine += "\n" + nonce + "\n" + o.checkpoint_dir;
  }
  const std::vector<std::string> node0 = lines_of(n.job->meet("start", mine)[0]);
  if (o.node_rank == 0) return;
  if (node0.empty() || node0[0] != setup_of(o, n.nproc))
    n.end(n.who + " runs " + setup_of(o, n.nproc) + ", node 0 runs " + (node0.empty() ? "?" : node0[0]) +
          ": every node of a job must run the same --nproc and --max-restarts, each with a --checkpoint-dir or none");
  if (o.checkpoint_dir.empty()) return;
  const std::string path = (std::filesystem::path(o.checkpoint_dir) / kSharedCheckFile).string();
  std::ifstream in(path);
  std::string read;
  in >> read;
  if (node0.size() == 3 && read == node0[1]) return;
  n.end("--checkpoint-dir " + o.checkpoint_dir + " of " + n.who + " is not the folder node 0 checkpoints to (" +
        (node0.size() == 3 ? node0[2] : "?") + "): node 0 wrote a nonce there, and " + n.who +
        (in ? " reads another one in " : " cannot read ") + path +
        ". With --max-restarts on several machines every node resumes from rank 0's checkpoint, so "
        "--checkpoint-dir must be one folder that every node sees (a shared filesystem such as NFS)");
}

// The newest checkpoint's file name ("" if none): what node 0 brings to an attempt's meeting.
std::string newest_name(const Options& o) {
  const std::string newest = latest_checkpoint(o.checkpoint_dir);
  return newest.empty() ? "" : std::filesystem::path(newest).filename().string();
}

// After attempt k's meeting every worker is stopped, so every node must see node 0's newest checkpoint.
void check_same_checkpoint(Node& n, const std::string& node0_newest) {
  if (n.o.node_rank == 0 || n.o.checkpoint_dir.empty()) return;
  const std::string mine = newest_name(n.o);
  if (mine == node0_newest) return;
  const auto named = [](const std::string& s) { return s.empty() ? std::string("none") : s; };
  n.end(n.who + " sees the newest checkpoint " + named(mine) + " in --checkpoint-dir " + n.o.checkpoint_dir +
        ", node 0 sees " + named(node0_newest) + ": the nodes would resume from different states, so the job ends "
        "(Note [One checkpoint folder]: every node needs the same folder, seen up to date)");
}

// Before attempt k's workers start: node 0 prunes, the launchers meet, every node checks that it
// sees node 0's newest checkpoint, and from attempt 1 on every node prints the same restart line.
void begin_attempt(Node& n, int attempt, const std::string& cause) {
  const Options& o = n.o;
  if (o.node_rank == 0) prune_stale_temporaries(o.checkpoint_dir);  // Note [Stale temporaries]
  const std::vector<std::string> met =
      n.job->meet("attempt/" + std::to_string(attempt), o.node_rank == 0 ? newest_name(o) : "");
  check_same_checkpoint(n, met[0]);
  if (attempt == 0 && o.node_rank == 0 && !o.checkpoint_dir.empty()) {  // every node has read the nonce
    std::error_code ec;
    std::filesystem::remove(std::filesystem::path(o.checkpoint_dir) / kSharedCheckFile, ec);
  }
  if (attempt > 0)
    std::fprintf(stderr, "mini_train: restart %d of %d (--max-restarts, one count for the whole job) after %s: "
                 "the workers of all %d nodes again, %s\n", attempt, o.max_restarts, cause.c_str(), o.nnodes,
                 resume_origin(o.checkpoint_dir).c_str());
}

// What run_workers does for attempt k on this node: its workers meet under the attempt's prefix, a
// failure here is posted, a failure elsewhere stops them, an interrupt ends the job. A store error
// is kept in `lost`.
AttemptHooks hooks_for(Node& n, int attempt, std::string& lost) {
  return {
      .store_prefix = dist::JobAttempts::workers_prefix(attempt),
      .on_failure = [&n, attempt, &lost](const std::string& line) {
        try {
          // A worker that fails because a peer elsewhere died (its collective broke) is not the
          // cause; the first poster is, and this line says so.
          const std::string mine = n.who + ": " + line;
          n.job->fail(attempt, mine);
          const std::string first = n.job->stop_of(attempt).cause;
          if (first != mine) return line + ", after " + first;
        } catch (const Error& e) {
          lost = e.what();
        }
        return line;
      },
      .poll = [&n, attempt, &lost]() -> std::optional<std::string> {
        try {
          const std::optional<dist::JobStop> stop = n.job->poll(attempt);
          if (stop) return "stopped " + n.who + "'s workers: " + stop->cause;
        } catch (const Error& e) {
          lost = e.what();
          return "stopped " + n.who + "'s workers: lost the job's store";
        }
        return std::nullopt;
      },
      // Posted before this node's workers stop, so that the others, whose workers now fail, find
      // the end of the job and not their own failure to restart from.
      .on_interrupt = [&n](int sig) {
        try {
          n.job->end(n.who + " was interrupted (signal " + std::to_string(sig) + "): the job ends there, "
                     "an interrupt is never restarted");
        } catch (const Error&) {
          // The store is gone too: the other nodes learn it from that.
        }
      }};
}

}  // namespace

int launch_nodes(const Options& o, std::vector<std::string> worker_argv, int nproc) {
  Node n{o, nproc, "node " + std::to_string(o.node_rank)};
  try {
    n.store = job_store(o);
    n.job = std::make_unique<dist::JobAttempts>(
        n.store, dist::JobAttemptsOptions{.nnodes = o.nnodes, .node_rank = o.node_rank,
                                          .timeout = std::chrono::seconds(o.timeout),
                                          .heartbeat_timeout = std::chrono::seconds(o.heartbeat_timeout),
                                          .notices = n.store->wait_notices()});
    start(n);
    std::string cause;  // of the attempt that failed last
    for (int attempt = 0;; ++attempt) {
      begin_attempt(n, attempt, cause);
      std::string lost;  // what the store said when this launcher lost it
      const int rc = run_workers(o, worker_argv, nproc, hooks_for(n, attempt, lost));
      if (!lost.empty()) MT_FAIL("lost the job's store, which node 0's launcher hosts (it ended, or its machine "
                                 "cannot be reached): ", lost);
      if (rc > 128) return rc;  // interrupted: the job was ended (hooks_for)
      const std::optional<dist::JobStop> stop = rc == 0 ? n.job->finish(attempt) : n.job->stop_of(attempt);
      if (!stop) return 0;  // every node's workers succeeded
      if (stop->final) throw dist::JobEnded(stop->cause);
      if (attempt >= o.max_restarts) {
        std::fprintf(stderr, "mini_train: the job failed with no restart left (--max-restarts %d, one count for the "
                     "whole job): %s\n", o.max_restarts, stop->cause.c_str());
        return 1;
      }
      cause = stop->cause;
      if (!o.checkpoint_dir.empty()) worker_argv = resume_auto(worker_argv);
    }
  } catch (const dist::JobEnded& e) {
    std::fprintf(stderr, "mini_train: the job ended: %s\n", e.what());
  } catch (const Error& e) {
    std::fprintf(stderr, "mini_train: %s: error: %s\n", n.who.c_str(), e.what());
  }
  return 1;
}

}  // namespace mt::app
