// connect_gloo: Gloo's full mesh of TCP pairs for one ProcessGroupGloo, made over our Store, bounded
// by the group's timeout however the peers fail. Private to process_group_gloo.cpp (it names Gloo's
// types, which the public headers keep out of sight); compiled only where CMake found Gloo.
#pragma once

#include <gloo/rendezvous/context.h>

#include <chrono>
#include <memory>

#include "distributed/process_group/gloo/process_group_gloo.h"
#include "distributed/store/store.h"

namespace mt::dist::detail {

// Connects rank `rank` of `size` to every other rank, meeting through `store`. Returns within
// opts.timeout (plus a moment): a connected context, or an error naming this rank, what failed and,
// when this rank's address is a loopback one, GLOO_SOCKET_IFNAME.
std::shared_ptr<::gloo::rendezvous::Context> connect_gloo(const std::shared_ptr<Store>& store, int rank, int size,
                                                          const ProcessGroupGlooOptions& opts);

}  // namespace mt::dist::detail
