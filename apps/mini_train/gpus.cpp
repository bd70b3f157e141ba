// --gpus: parsing, the checks that run before spawning, and binding a process to its GPU (gpus.h).
#include "apps/mini_train/gpus.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tensor/check.h"
#include "tensor/cuda_info.h"

#if MT_HAVE_CUDA
#include "tensor/cuda/cuda_device.h"
#endif

namespace mt::app {

namespace {

// "535.104.05" from the driver's /proc entry, or why there is none: for the no-GPU message.
std::string driver_version() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "no NVIDIA driver loaded";
  const auto kernel = line.find("Kernel Module");
  if (kernel == std::string::npos) return line;
  std::istringstream rest(line.substr(kernel + 13));
  std::string version;
  rest >> version;
  return "NVIDIA driver " + version;
}

}  // namespace

std::vector<int> parse_gpu_list(const std::string& list) {
  std::vector<int> gpus;
  std::stringstream ss(list);
  std::string part;
  const auto malformed = [&] {
    MT_FAIL("--gpus '", list, "': expected a comma-separated list of GPU indices, e.g. --gpus 0,1");
  };
  if (list.empty() || list.back() == ',') malformed();
  while (std::getline(ss, part, ',')) {
    if (part.empty() || part.size() > 4 || !std::all_of(part.begin(), part.end(), ::isdigit)) malformed();
    const int g = std::atoi(part.c_str());
    MT_CHECK(std::find(gpus.begin(), gpus.end(), g) == gpus.end(), "--gpus ", list, ": GPU ", g,
             " is listed twice; each GPU takes one worker");
    gpus.push_back(g);
  }
  return gpus;
}

void validate_gpus(const Options& o) {
  if (o.gpus.empty()) return;
  const std::vector<int> gpus = parse_gpu_list(o.gpus);
  MT_CHECK(o.nproc == 1, "--gpus ", o.gpus, " and --nproc ", o.nproc, " do not go together: --gpus starts one "
           "process per listed GPU; drop --nproc");
  MT_CHECK(cuda_is_built(), "--gpus ", o.gpus, ": this build has no CUDA backend: rebuild where nvcc is found "
           "(cmake -DMT_CUDA=ON), or train on the CPU with --nproc");
  MT_CHECK(gpus.size() == 1 || nccl_is_built(), "--gpus ", o.gpus, ": this build has no NCCL, which training on "
           "several GPUs needs: install NCCL (or set NCCL_ROOT) and reconfigure, or use one GPU");
  const int count = cuda_device_count();
  MT_CHECK(count > 0, "--gpus ", o.gpus, ": no CUDA GPU is visible (", driver_version(), ", CUDA_VISIBLE_DEVICES=",
           std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "(unset)", ")");
  for (int g : gpus)
    MT_CHECK(g < count, "--gpus ", o.gpus, ": GPU ", g, " does not exist; this machine has ", count, " (0..",
             count - 1, ")");
}

int worker_count(const Options& o) {
  return o.gpus.empty() ? o.nproc : static_cast<int>(parse_gpu_list(o.gpus).size());
}

Device training_device(const Options& o, int local_rank) {
  if (o.gpus.empty()) return kCPU;
  const std::vector<int> gpus = parse_gpu_list(o.gpus);
  MT_CHECK(local_rank >= 0 && local_rank < static_cast<int>(gpus.size()), "--gpus ", o.gpus, ": this worker's "
           "LOCAL_RANK is ", local_rank, ", but only ", gpus.size(), " GPUs are listed (one worker per GPU)");
  return Device(DeviceType::CUDA, gpus[static_cast<size_t>(local_rank)]);
}

void bind_device(const Device& device) {
  if (!device.is_cuda()) return;
#if MT_HAVE_CUDA
  cuda::set_device(device.index);
#else
  MT_FAIL("this build has no CUDA backend");
#endif
}

}  // namespace mt::app
