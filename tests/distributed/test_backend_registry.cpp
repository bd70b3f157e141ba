// The backend registry (distributed/process_group/backends.h): init_process_group finds its backends by
// name; this binary links minitrain::gloo and minitrain::mpi, so theirs are registered, by the
// initialisers the link option keeps (Note [Backends register themselves]). What a program without the
// components meets is tests/install/check.sh's.
#include <doctest/doctest.h>

#include "distributed/process_group/backends.h"
#include "distributed/process_group/process_group_local.h"

using namespace mt;
using namespace mt::dist;

TEST_CASE("backend registry: the linked components registered gloo and mpi beside local and nccl") {
  CHECK(registered_process_group_backends() == std::vector<std::string>{"gloo", "local", "mpi", "nccl"});
  CHECK(process_group_backend_available("local"));
  CHECK_FALSE(process_group_backend_available("ucc"));
  CHECK_THROWS_WITH_AS(init_process_group({.backend = "ucc"}),
                       doctest::Contains("unknown backend 'ucc' (auto, gloo, mpi, nccl, local)"), Error);
}

TEST_CASE("backend registry: a registered backend is what init_process_group builds, with or without a store") {
  int made = 0;
  bool had_store = false;
  auto backend = [&](bool needs_store) {
    return ProcessGroupBackend{.available = true, .needs_store = needs_store,
                               .make = [&](const InitOptions& opts, std::shared_ptr<Store> store) {
                                 ++made;
                                 had_store = store != nullptr;
                                 return std::make_shared<ProcessGroupLocal>(opts.timeout);
                               }};
  };
  register_process_group_backend("test-no-store", backend(false));
  CHECK(init_process_group({.backend = "test-no-store"})->backend() == "local");
  CHECK((made == 1 && !had_store));
  // A world of one whose rank 0 hosts the TCPStore (port 0: any free one) hands the backend that store.
  register_process_group_backend("test-store", backend(true));
  CHECK(init_process_group({.backend = "test-store"})->backend() == "local");
  CHECK((made == 2 && had_store));
}
