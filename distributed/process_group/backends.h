// The process-group backends a program has, by name: init_process_group("gloo") looks "gloo" up here.
// "local" and "nccl" come with the library itself (ProcessGroupNCCL says "no NCCL" in a build without
// it); "gloo" and "mpi" live in their own libraries, the components minitrain::gloo and
// minitrain::mpi, so that a program that links only minitrain::minitrain carries no libgloo or libmpi
// (tests/install/check.sh looks with ldd). A name that is not here gives one error naming the
// component to link.
//
// Note [Backends register themselves]: a component's source defines a global whose initialiser calls
// register_process_group_backend, e.g. in gloo/register_gloo.cpp:
//   extern "C" const bool mt_process_group_gloo_registered = register_process_group_backend("gloo", ...);
// A static library's object that nothing references is dropped by the linker, initialiser and all, so
// that alone would be fragile. The component's CMake target therefore carries the link option
// `-Wl,--undefined=mt_process_group_gloo_registered` (cmake/Components.cmake): linking the target
// names the symbol, the linker must pull the object that defines it, and its initialiser runs before
// main. The registry itself is a function-local static, made on first use, so it exists whichever
// initialiser runs first. Nothing to call, nothing a user can forget: link the target, get the backend.
//
// Not here: unregistering, or loading backends from plugins at run time.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group/init_process_group.h"

namespace mt::dist {

struct ProcessGroupBackend {
  // Whether this build has what the backend needs (false: the component is linked but was built
  // without its library; make() then says how to get it).
  bool available = false;
  // Whether init_process_group makes (or joins) a store for it first: gloo and nccl meet through
  // one; mpi (the launcher told MPI who is who) and local (a world of one) need none.
  bool needs_store = false;
  // Builds the group. `store` is the group's own (prefixed) store when needs_store, else null.
  std::function<std::shared_ptr<ProcessGroup>(const InitOptions& opts, std::shared_ptr<Store> store)> make;
};

// Adds (or replaces) the backend `name`. Returns true, so it can initialise a global
// (Note [Backends register themselves]).
bool register_process_group_backend(const std::string& name, ProcessGroupBackend backend);

// The backend `name`; throws an mt::Error when it is not registered: for "gloo" and "mpi" the error
// names the component to link, for anything else it lists the known names.
const ProcessGroupBackend& process_group_backend(const std::string& name);

// Whether `name` is registered and available in this build.
bool process_group_backend_available(const std::string& name);

// The registered names, sorted.
std::vector<std::string> registered_process_group_backends();

}  // namespace mt::dist
