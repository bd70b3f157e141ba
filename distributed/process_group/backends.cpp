// The table of process-group backends (backends.h). "local" and "nccl" are entered when the
// table is made, so they need no registration of their own: they are in the same library as the
// table (ProcessGroupNCCL as its stub in a build without NCCL).
#include "distributed/process_group/backends.h"

#include <map>
#include <mutex>

#include "distributed/process_group/process_group_local.h"
#include "distributed/process_group/nccl/process_group_nccl.h"

namespace mt::dist {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, ProcessGroupBackend> backends;
};

Registry& registry() {
  static Registry* r = [] {
    auto* made = new Registry;  // never destroyed: a group may be made during static destruction
    made->backends["local"] = {.available = true, .needs_store = false,
                               .make = [](const InitOptions& opts, std::shared_ptr<Store>) {
                                 MT_CHECK(opts.rendezvous.world_size == 1,
                                          "init_process_group: the local backend is a world of one, but "
                                          "world_size is ", opts.rendezvous.world_size, "; use the gloo backend");
                                 return std::make_shared<ProcessGroupLocal>(opts.timeout);
                               }};
    // NCCL: one GPU per rank: cuda_device, or by default GPU local_rank (the launcher, torchrun and
    // srun number a machine's ranks 0..LOCAL_WORLD_SIZE-1).
    made->backends["nccl"] = {.available = ProcessGroupNCCL::is_available(), .needs_store = true,
                              .make = [](const InitOptions& opts, std::shared_ptr<Store> store) {
                                const RendezvousInfo& info = opts.rendezvous;
                                return std::make_shared<ProcessGroupNCCL>(
                                    std::move(store), info.rank, info.world_size,
                                    ProcessGroupNCCLOptions{.timeout = opts.timeout,
                                                            .device = opts.cuda_device >= 0 ? opts.cuda_device
                                                                                            : info.local_rank});
                              }};
    return made;
  }();
  return *r;
}

// The backends that ship as components of their own, and the CMake target that brings each.
const char* component_of(const std::string& name) {
  if (name == "gloo") return "minitrain::gloo";
  if (name == "mpi") return "minitrain::mpi";
  return nullptr;
}

}  // namespace

bool register_process_group_backend(const std::string& name, ProcessGroupBackend backend) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.backends[name] = std::move(backend);
  return true;
}

const ProcessGroupBackend& process_group_backend(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.backends.find(name);
  if (it != r.backends.end()) return it->second;  // std::map: the reference outlives the lock
  if (const char* component = component_of(name))
    MT_FAIL("init_process_group: the ", name, " backend is not linked into this program: link the ", component,
            " component (CMake: find_package(minitrain COMPONENTS ", name, "), then target_link_libraries(",
            "your_target PRIVATE ", component, "))");
  MT_FAIL("init_process_group: unknown backend '", name, "' (auto, gloo, mpi, nccl, local)");
}

bool process_group_backend_available(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.backends.find(name);
  return it != r.backends.end() && it->second.available;
}

std::vector<std::string> registered_process_group_backends() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& entry : r.backends) names.push_back(entry.first);
  return names;  // std::map keeps them sorted
}

}  // namespace mt::dist
