// The --nproc launcher (see launcher.h): what the workers run, mpirun's job, and the restarts of
// one machine; the child processes themselves are workers.h's, several machines node_restarts.h's.
#include "apps/mini_train/launcher.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "apps/mini_train/backend.h"
#include "apps/mini_train/gpus.h"
#include "apps/mini_train/node_restarts.h"
#include "apps/mini_train/outputs.h"
#include "apps/mini_train/workers.h"
#include "distributed/fault/heartbeat.h"
#include "distributed/store/tcp_store.h"
#include "tensor/check.h"

namespace mt::app {

namespace {

// argv without "--nproc N" / "--nproc=N": what each worker runs. A worker learns its rank from the
// environment; --nnodes and --node-rank stay, for its config table.
std::vector<std::string> worker_args(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--nproc") {
      ++i;
      continue;
    }
    if (a.rfind("--nproc=", 0) == 0) continue;
    args.push_back(a);
  }
  return args;
}

}  // namespace

namespace {

// `mpirun -np N <program> <args>`, with what this machine needs.
std::vector<std::string> mpirun_argv(int nproc, const std::vector<std::string>& program) {
  const std::string mpirun = find_mpirun();
  MT_CHECK(!mpirun.empty(), "--backend mpi: no mpirun on the PATH (Debian: apt install openmpi-bin)");
  std::vector<std::string> argv{mpirun, "-np", std::to_string(nproc),
                                // One thread per rank, and the ranks may share cores: no pinning.
                                "--bind-to", "none"};
  // OpenMPI refuses more ranks than cores unless told that it is meant.
  if (nproc > static_cast<int>(std::thread::hardware_concurrency())) argv.push_back("--oversubscribe");
  argv.insert(argv.end(), program.begin(), program.end());
  return argv;
}

}  // namespace

// --backend mpi: the job is `mpirun -np N <program> <args>`, one child, supervised like a worker.
// mpirun starts the ranks (they find rank and size in OMPI_COMM_WORLD_*, backend.cpp) and ends the
// job when one of them fails, printing which; we then print one line and exit 1.
int run_mpirun(const Options& o, int nproc, const std::vector<std::string>& program, bool any_program) {
  const std::vector<std::string> argv = mpirun_argv(nproc, program);
  // Note [mpirun as root]: OpenMPI refuses to start as root (containers often are) unless both of
  // these are set. Starting a job the user asked for is not the place to refuse; we say so once.
  const bool root = geteuid() == 0;
  if (root && !o.quiet && !std::getenv("OMPI_ALLOW_RUN_AS_ROOT"))
    std::fprintf(stderr, "mini_train: note: running as root, so OMPI_ALLOW_RUN_AS_ROOT=1 and "
                 "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set for mpirun (OpenMPI's permission to run as root)\n");

  // Note [Heartbeat] for MPI ranks, which are mpirun's children, not ours: this launcher hosts a store
  // for their heartbeats alone (loopback, its own token), named to them in MT_HEARTBEAT_STORE, and
  // watches it from the moment mpirun starts, MPI_Init and MPI_Finalize included (Note [Watched from
  // start to exit] in distributed/fault/heartbeat.h).
  std::shared_ptr<dist::TCPStore> heartbeat_store;
  const std::string token = random_token();
  dist::HeartbeatMonitor heartbeats(std::chrono::seconds(o.heartbeat_timeout), !any_program);
  if (o.heartbeat_timeout > 0)
    heartbeat_store = std::make_shared<dist::TCPStore>(dist::TCPStoreOptions{
        .host = "127.0.0.1", .port = 0, .is_server = true, .job_token = token, .loopback_only = true});
  const std::string heartbeat_at = heartbeat_store ? "127.0.0.1:" + std::to_string(heartbeat_store->port()) : "";

  LauncherSignals signals;
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<Worker> job(1);
  const bool terminal = isatty(STDOUT_FILENO);
  const pid_t pid = spawn(argv, signals.old_mask, getpid(), [root, terminal, &heartbeat_at, &token] {
    if (!heartbeat_at.empty()) {
      setenv("MT_HEARTBEAT_STORE", heartbeat_at.c_str(), 1);
      setenv("MT_JOB_TOKEN", token.c_str(), 1);
    }
    setenv("OPENBLAS_NUM_THREADS", "1", 0);  // 0: keep the user's value; N ranks share the cores
    if (!terminal) setenv("MT_NO_PROGRESS", "1", 1);  // progress.h
    if (root) {
      setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
      setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
  });
  MT_CHECK(pid > 0, "--nproc: fork failed: ", std::strerror(errno));
  job[0] = {.pid = pid, .running = true};
  if (heartbeat_store) heartbeats.watch_store(heartbeat_store, 0, nproc);
  // A stopped rank: mpirun would wait for it forever, and a stopped process ignores SIGTERM until it
  // runs again, so mpirun and its ranks are killed outright; what the job says is this line.
  const auto watchdog = [&]() -> std::optional<WatchdogStop> {
    const auto stale = heartbeats.poll();
    if (!stale) return std::nullopt;
    kill_process_tree(pid);
    return stopped_worker(*stale, o.heartbeat_timeout);
  };
  return supervise(job, signals.watched, {.describe_failure = [](int, std::optional<int> exit) {
    const int status = exit.value_or(0);  // mpirun, the only child, reports no failure: it has exited
    return "the MPI job failed: mpirun " + (WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                                                 : "exited with code " + std::to_string(WEXITSTATUS(status))) +
           " (the failing rank's own line is above)";
  }, .watchdog = watchdog, .checkpoint_dir = o.checkpoint_dir, .trainer = !any_program});
}

int launch(int argc, char** argv, const Options& o) {
  validate(o);  // refuse bad options once, not once per rank
  const int nproc = worker_count(o);  // --nproc, or one worker per --gpus GPU (gpus.h): on this node
  MT_CHECK(nproc >= 2 || o.nnodes > 1, "--nproc must be at least 2 to launch workers, got ", nproc);
  MT_CHECK(nproc <= 256, "--nproc must be at most 256, got ", nproc);
  // The outputs' folders, checked here once before any worker starts (rank 0 checks again with the
  // model's size). Otherwise rank 0's error races its peers: its unwinding closes its connections,
  // a peer fails on them first, and the launcher stops rank 0 before its line is printed.
  if (o.node_rank == 0) check_outputs(o, {});
  const std::vector<std::string> args = worker_args(argc, argv);
  const char* token = std::getenv("MT_JOB_TOKEN");
  if (o.nnodes > 1 && (!token || !*token) && !o.quiet && o.node_rank == 0)
    std::fprintf(stderr, "mini_train: warning: --nnodes %d without MT_JOB_TOKEN: the store on port %d accepts any "
                 "process that can reach it. Export the same MT_JOB_TOKEN (any secret string) on every node\n",
                 o.nnodes, o.master_port);
  // This binary by its real path, not /proc/self/exe: ps and top then show "mini_train ..." with
  // the worker's arguments.
  std::vector<std::string> worker_argv{self_path()};
  worker_argv.insert(worker_argv.end(), args.begin(), args.end());
  if (o.nnodes > 1 && o.max_restarts > 0) return launch_nodes(o, worker_argv, nproc);  // Note [Restarts across nodes]
  // Note [Restarts]: --max-restarts K reruns every worker of this machine after a failure, at most K
  // times in the job, from the newest checkpoint of --checkpoint-dir (--resume auto), or from the start
  // without one. Checkpoints resume exactly (trainer.cpp), so the final weights are bit-for-bit those
  // of a run that never failed. An interrupt (Ctrl-C) is never restarted.
  for (int restart = 0;; ++restart) {
    prune_stale_temporaries(o.checkpoint_dir);  // Note [Stale temporaries]
    const int rc = o.gpus.empty() && launch_backend(o) == "mpi" ? run_mpirun(o, nproc, worker_argv, false)
                                                                 : run_workers(o, worker_argv, nproc);
    if (rc == 0 || rc > 128 || restart >= o.max_restarts) return rc;
    if (!o.checkpoint_dir.empty()) worker_argv = resume_auto(worker_argv);
    std::fprintf(stderr, "mini_train: restart %d of %d (--max-restarts) after the failure above: all workers "
                 "again, %s\n", restart + 1, o.max_restarts, resume_origin(o.checkpoint_dir).c_str());
  }
}

}  // namespace mt::app
