// The entry that makes init_process_group("gloo") find ProcessGroupGloo, with Gloo or without it
// (then is_available() is false and constructing says how to get it).
#include "distributed/process_group/gloo/process_group_gloo.h"
#include "distributed/process_group/backends.h"

// ---- registration: init_process_group("gloo") (Note [Backends register themselves]) ---------------
extern "C" const bool mt_process_group_gloo_registered;
const bool mt_process_group_gloo_registered = mt::dist::register_process_group_backend(
    "gloo", {.available = mt::dist::ProcessGroupGloo::is_available(), .needs_store = true,
             .make = [](const mt::dist::InitOptions& opts, std::shared_ptr<mt::dist::Store> store) {
               using namespace mt::dist;
               ProcessGroupGlooOptions gloo{.timeout = opts.timeout, .hostname = opts.gloo_hostname,
                                            .interface = opts.gloo_interface};
               if (gloo.interface.empty()) gloo.interface = process_env("GLOO_SOCKET_IFNAME").value_or("");
               if (gloo.interface.empty() && gloo.hostname.empty() && is_loopback(opts.rendezvous.master_addr))
                 gloo.hostname = "127.0.0.1";
               return std::make_shared<ProcessGroupGloo>(std::move(store), opts.rendezvous.rank,
                                                         opts.rendezvous.world_size, gloo);
             }});
