// The --env report (see env_report.h). It reads /proc and the environment only: it must work on a
// machine where nothing else does.
#include "apps/mini_train/env_report.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "apps/mini_train/backend.h"
#include "data/fashion_mnist.h"
#include "distributed/process_group/gloo/process_group_gloo.h"
#include "distributed/process_group/mpi/process_group_mpi.h"
#include "tensor/backend.h"
#include "tensor/cuda_info.h"
#include "tensor/parallel.h"

namespace mt::app {

namespace {

// The value of the first "key<spaces>: value" line of a /proc file.
std::string proc_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

void row(const char* key, const std::string& value) { std::printf("  %-22s %s\n", key, value.c_str()); }

}  // namespace

void print_env_report() {
  std::printf("minitrain environment\n");
  const std::string cpu = proc_field("/proc/cpuinfo", "model name");
  row("CPU", (cpu.empty() ? "unknown" : cpu) + ", " + std::to_string(std::thread::hardware_concurrency()) +
                 " hardware threads");
  const std::string mem = proc_field("/proc/meminfo", "MemTotal");
  row("memory", mem.empty() ? "unknown" : mem);
  // The intra-op threads (tensor/parallel.h); a malformed MT_NUM_THREADS or MT_SPIN_US is reported, not thrown.
  std::string threads;
  try {
    threads = std::to_string(get_num_threads()) + " per process (--threads, else MT_NUM_THREADS, else cores / ranks "
              "on this machine); GEMM runs on them in blocks (" + cpu_gemm_library() +
              ", single-threaded); an idle one spins " + std::to_string(thread_spin_us()) +
              " µs before it sleeps (MT_SPIN_US)";
  } catch (const std::exception& e) {
    threads = e.what();
  }
  row("threads", threads);

  // GPUs: the driver's /proc entries exist whether or not this build can use them.
  const std::filesystem::path gpus = "/proc/driver/nvidia/gpus";
  std::error_code ec;
  int count = 0;
  if (std::filesystem::is_directory(gpus, ec)) {
    for (const auto& entry : std::filesystem::directory_iterator(gpus, ec)) {
      const std::string info = (entry.path() / "information").string();
      row(("GPU " + std::to_string(count)).c_str(), proc_field(info.c_str(), "Model") + " (bus " +
                                                        entry.path().filename().string() + ")");
      ++count;
    }
  }
  const std::string driver = proc_field("/proc/driver/nvidia/version", "NVRM version");
  row("NVIDIA driver", driver.empty() ? "not loaded" : driver);
  row("GPUs", std::to_string(count) + (count == 0 ? " (no GPU: mini_train trains on the CPU)" : ""));
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  row("CUDA_VISIBLE_DEVICES", visible ? visible : "(unset)");
  // What this build can do with them (tensor/cuda_info.h asks the CUDA runtime, in CUDA builds only).
  if (cuda_is_built()) {
    const int usable = cuda_device_count();
    row("CUDA backend", "built; " + std::to_string(usable) + " usable GPU" + (usable == 1 ? "" : "s") +
                            (usable == 0 ? " (mini_train --gpus needs one)" : ""));
    for (int d = 0; d < usable; ++d) row(("cuda:" + std::to_string(d)).c_str(), cuda_device_description(d));
  } else {
    row("CUDA backend", "not in this build (needs nvcc at configure time; CPU training works everywhere)");
  }
  row("NCCL", nccl_is_built() ? "built (ProcessGroupNCCL: mini_train --gpus 0,1,...)"
                              : "not in this build (needs the CUDA backend and NCCL; multi-GPU training needs it)");
  row("Gloo", dist::ProcessGroupGloo::is_available() ? "available (CPU collectives over TCP: --backend gloo)"
                                                      : "not in this build (Debian: libgloo-dev, then rebuild)");
  const std::string mpirun = find_mpirun();
  row("MPI", !dist::ProcessGroupMPI::is_available()
                 ? "not in this build (Debian: libopenmpi-dev openmpi-bin, then rebuild)"
                 : mpirun.empty() ? "built, but no mpirun on the PATH (Debian: openmpi-bin): --nproc uses Gloo"
                                  : "available (shared-memory CPU collectives; --nproc uses it): " + mpirun);
  const bool fashion = std::filesystem::is_directory(data::kFashionMnistDir, ec);
  row("Fashion-MNIST", fashion ? std::string(data::kFashionMnistDir)
                               : std::string("missing: install Debian's dataset-fashion-mnist (scripts/install-deps.sh)"));
}

void print_version() {
  const auto yes_no = [](bool b) { return b ? "yes" : "no"; };
  // MT_VERSION and MT_GIT_DESCRIBE: set for this file alone by CMakeLists.txt (project version,
  // `git describe --always --dirty` at configure time, or "unknown" outside a git checkout).
  std::printf("mini_train %s (%s), CUDA %s, MPI %s, Gloo %s\n", MT_VERSION, MT_GIT_DESCRIBE, yes_no(cuda_is_built()),
              yes_no(dist::ProcessGroupMPI::is_available()), yes_no(dist::ProcessGroupGloo::is_available()));
}

}  // namespace mt::app
