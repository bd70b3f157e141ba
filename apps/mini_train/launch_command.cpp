// `mini_train launch` (see launch_command.h).
//
// Note [Launching any program]: the launcher that runs mini_train's workers (launcher.h, workers.h)
// knows nothing of training; it sets the environment a rank reads (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, MT_JOB_TOKEN, as torchrun does), starts the ranks,
// and supervises them: one failure ends all, named with its reason, and --max-restarts K runs them
// all again. So any program that meets its peers through
//     auto pg = dist::init_process_group({.rendezvous = *dist::rendezvous_from_env()});
// runs under it as mini_train's own workers do. Two things are the program's to opt into:
//   - heartbeats: `auto beat = dist::Heartbeat::from_env();` as its first line (Note [Heartbeat]).
//     A program that never beats is watched for exits only, so the launcher watches each rank from
//     its first beat on, where mini_train's workers are watched from their start;
//   - restarts resume from what the program saved: MT_RESTART_COUNT (0, 1, ...) says which attempt
//     this is, as TORCHELASTIC_RESTART_COUNT does under torchrun.
// With --backend mpi (or auto, where mpirun exists) the ranks are `mpirun -np N PROGRAM`'s, and the
// program's init_process_group picks MPI from mpirun's variables.
#include "apps/mini_train/launch_command.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "apps/mini_train/backend.h"
#include "apps/mini_train/launcher.h"
#include "apps/mini_train/options.h"
#include "apps/mini_train/workers.h"
#include "tensor/check.h"

namespace mt::app {

namespace {

constexpr const char* kUsage =
    "usage: mini_train launch --nproc N [--backend gloo|mpi|auto] [--max-restarts K] [--heartbeat-timeout S] "
    "[--master-port P] -- PROGRAM [ARGS...]";

// An integer option's value in [lo, hi], or a one-line error.
int int_value(const std::string& flag, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  MT_CHECK(!v.empty() && *end == '\0' && n >= lo && n <= hi, "launch: ", flag, " must be an integer in ", lo, "..",
           hi, ", got '", v, "'");
  return static_cast<int>(n);
}

// PROGRAM as a path execv can run: as given when it names a folder, else found on the PATH.
std::string program_path(const std::string& program) {
  std::string path = program;
  if (program.find('/') == std::string::npos) {
    path.clear();
    const char* dirs = std::getenv("PATH");
    std::istringstream in(dirs ? dirs : "");
    for (std::string dir; path.empty() && std::getline(in, dir, ':');)
      if (!dir.empty() && access((dir + "/" + program).c_str(), X_OK) == 0) path = dir + "/" + program;
    MT_CHECK(!path.empty(), "launch: ", program, ": not found on the PATH");
  }
  MT_CHECK(access(path.c_str(), X_OK) == 0, "launch: ", path, ": not an executable file");
  return path;
}

struct LaunchArgs {
  Options o;                          // the launcher's fields only: nproc, backend, restarts, ...
  std::vector<std::string> program;   // PROGRAM and its arguments
};

LaunchArgs parse(int argc, char** argv) {
  LaunchArgs a;
  a.o.nproc = 0;
  int i = 2;
  for (; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (flag == "--") break;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos)
      value = flag.substr(eq + 1), flag = flag.substr(0, eq);
    else if (flag == "--nproc" || flag == "--backend" || flag == "--max-restarts" || flag == "--heartbeat-timeout" ||
             flag == "--master-port") {
      MT_CHECK(i + 1 < argc, "launch: ", flag, " needs a value");
      value = argv[++i];
    }
    if (flag == "--nproc") a.o.nproc = int_value(flag, value, 1, 256);
    else if (flag == "--max-restarts") a.o.max_restarts = int_value(flag, value, 0, 1000);
    else if (flag == "--heartbeat-timeout") a.o.heartbeat_timeout = int_value(flag, value, 0, 86400);
    else if (flag == "--master-port") a.o.master_port = int_value(flag, value, 1, 65535);
    else if (flag == "--backend") {
      MT_CHECK(value == "gloo" || value == "mpi" || value == "auto", "launch: --backend must be gloo, mpi or auto, got '",
               value, "'");
      a.o.backend = value;
    } else {
      MT_FAIL("launch: unknown option '", argv[i], "' (the program and its arguments come after --)");
    }
  }
  MT_CHECK(a.o.nproc > 0, "launch: --nproc N is required");
  MT_CHECK(i + 1 < argc, "launch: no program to run: put it after --");
  a.program.assign(argv + i + 1, argv + argc);
  a.program[0] = program_path(a.program[0]);
  validate_backend(a.o);
  return a;
}

}  // namespace

int run_launch(int argc, char** argv) {
  LaunchArgs a;
  try {
    a = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mini_train: %s\n%s\n", e.what(), kUsage);
    return 2;
  }
  const bool mpi = launch_backend(a.o) == "mpi";
  for (int restart = 0;; ++restart) {
    setenv("MT_RESTART_COUNT", std::to_string(restart).c_str(), 1);  // the workers inherit it
    const int rc = mpi ? run_mpirun(a.o, a.o.nproc, a.program, true)
                       : run_workers(a.o, a.program, a.o.nproc, {.any_program = true});
    if (rc == 0 || rc > 128 || restart >= a.o.max_restarts) return rc;
    std::fprintf(stderr, "mini_train: restart %d of %d (--max-restarts) after the failure above: every rank again, "
                 "MT_RESTART_COUNT=%d\n", restart + 1, a.o.max_restarts, restart + 1);
  }
}

}  // namespace mt::app
