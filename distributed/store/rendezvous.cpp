// Reading RendezvousInfo from env:// or Slurm variables (see rendezvous.h, Note [Rendezvous defaults]).
#include "distributed/store/rendezvous.h"

#include <charconv>
#include <cstdlib>
#include <vector>

#include "tensor/check.h"

namespace mt::dist {

namespace {

// What each field is called where it came from, so an error names the thing the user can change.
struct FieldNames {
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
  const char* master_addr;
  const char* master_port;
};
constexpr FieldNames kStructNames{"rank", "world_size", "local_rank", "local_world_size", "master_addr",
                                  "master_port"};
constexpr FieldNames kEnvNames{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                               "MASTER_PORT"};
constexpr FieldNames kSlurmNames{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_TASKS_PER_NODE",
                                 "MASTER_ADDR", "MASTER_PORT"};

int parse_int(const std::string& name, const std::string& value) {
  int out = 0;
  const char* first = value.data();
  const char* last = first + value.size();
  const auto [end, ec] = std::from_chars(first, last, out);
  MT_CHECK(ec == std::errc() && end == last && first != last, name, "='", value, "' is not an integer");
  return out;
}

int require_int(const EnvLookup& env, const std::string& name, const char* hint) {
  const std::optional<std::string> value = env(name);
  MT_CHECK(value.has_value(), name, " is not set; ", hint);
  return parse_int(name, *value);
}

void validate_with(const RendezvousInfo& info, const std::string& source, const FieldNames& n) {
  const std::string where = source + ": ";
  MT_CHECK(info.world_size >= 1, where, n.world_size, "=", info.world_size, " must be at least 1");
  MT_CHECK(info.rank >= 0 && info.rank < info.world_size, where, n.rank, "=", info.rank, " must be in [0, ",
           n.world_size, "=", info.world_size, ")");
  MT_CHECK(info.local_world_size >= 1 && info.local_world_size <= info.world_size, where, n.local_world_size,
           "=", info.local_world_size, " must be in [1, ", n.world_size, "=", info.world_size, "]");
  MT_CHECK(info.local_rank >= 0 && info.local_rank < info.local_world_size, where, n.local_rank, "=",
           info.local_rank, " must be in [0, ", n.local_world_size, "=", info.local_world_size, ")");
  MT_CHECK(!info.master_addr.empty(), where, n.master_addr, " is empty");
  MT_CHECK(info.master_port >= 0 && info.master_port <= 65535, where, n.master_port, "=", info.master_port,
           " is not a port number");
}

// The environment names the port the ranks meet at: 0 cannot be it.
void require_port(const RendezvousInfo& info) {
  MT_CHECK(info.master_port > 0, "MASTER_PORT=0 is not a port the ranks can meet at; set it to a free port");
}

RendezvousInfo from_torchrun(const EnvLookup& env) {
  RendezvousInfo info;
  const char* hint = "env:// needs RANK, WORLD_SIZE, MASTER_PORT (and MASTER_ADDR on more than one machine)";
  info.rank = require_int(env, "RANK", hint);
  info.world_size = require_int(env, "WORLD_SIZE", hint);
  const auto local_rank = env("LOCAL_RANK"), local_world = env("LOCAL_WORLD_SIZE");
  MT_CHECK(local_rank.has_value() == local_world.has_value(), local_rank ? "LOCAL_WORLD_SIZE" : "LOCAL_RANK",
           " is not set but ", local_rank ? "LOCAL_RANK" : "LOCAL_WORLD_SIZE", " is: set both or neither");
  if (local_rank) {
    info.local_rank = parse_int("LOCAL_RANK", *local_rank);
    info.local_world_size = parse_int("LOCAL_WORLD_SIZE", *local_world);
  } else {  // one machine (Note [Rendezvous defaults])
    info.local_rank = info.rank;
    info.local_world_size = info.world_size;
  }
  info.master_port = require_int(env, "MASTER_PORT", "set it to a free port, the same for every rank");
  if (const auto addr = env("MASTER_ADDR")) {
    info.master_addr = *addr;
  } else {
    MT_CHECK(info.local_world_size == info.world_size, "MASTER_ADDR is not set, and the job spans machines "
             "(LOCAL_WORLD_SIZE=", info.local_world_size, " < WORLD_SIZE=", info.world_size,
             "): set it to the address of the machine of rank 0");
    info.master_addr = "127.0.0.1";
  }
  if (const auto prefix = env("MT_STORE_PREFIX")) info.store_prefix = *prefix;
  validate_with(info, "env://", kEnvNames);
  require_port(info);
  return info;
}

// This task's place in the Slurm step: rank, world size, local rank and local world size.
RendezvousInfo slurm_ranks(const EnvLookup& env) {
  RendezvousInfo info;
  const char* hint = "is this process running under srun?";
  info.rank = require_int(env, "SLURM_PROCID", hint);
  info.world_size = require_int(env, "SLURM_NTASKS", hint);
  info.local_rank = require_int(env, "SLURM_LOCALID", hint);
  const auto tasks_per_node = env("SLURM_TASKS_PER_NODE");
  MT_CHECK(tasks_per_node.has_value(), "SLURM_TASKS_PER_NODE is not set; ", hint);
  info.local_world_size = slurm_tasks_on_node(*tasks_per_node, require_int(env, "SLURM_NODEID", hint));
  return info;
}

RendezvousInfo from_slurm(const EnvLookup& env) {
  RendezvousInfo info = slurm_ranks(env);
  info.master_port = require_int(env, "MASTER_PORT", "Slurm does not choose one: export MASTER_PORT=<a free "
                                 "port> in the batch script");
  if (const auto addr = env("MASTER_ADDR")) {
    info.master_addr = *addr;
  } else if (const auto nodes = env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST")
                                                           : env("SLURM_JOB_NODELIST")) {
    info.master_addr = first_slurm_host(*nodes);
  } else {
    MT_FAIL("MASTER_ADDR is not set, and neither is SLURM_STEP_NODELIST or SLURM_JOB_NODELIST to take the "
            "first node from");
  }
  validate_with(info, "Slurm", kSlurmNames);
  require_port(info);
  return info;
}

constexpr FieldNames kOmpiNames{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                "OMPI_COMM_WORLD_LOCAL_SIZE", "MASTER_ADDR", "MASTER_PORT"};
constexpr FieldNames kPmiNames{"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "MASTER_ADDR",
                               "MASTER_PORT"};

RendezvousInfo from_mpi_launcher(const EnvLookup& env) {
  RendezvousInfo info;
  const FieldNames* names = &kOmpiNames;
  if (env("OMPI_COMM_WORLD_RANK")) {
    const char* hint = "is this process running under OpenMPI's mpirun?";
    info.rank = require_int(env, "OMPI_COMM_WORLD_RANK", hint);
    info.world_size = require_int(env, "OMPI_COMM_WORLD_SIZE", hint);
    info.local_rank = require_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", hint);
    info.local_world_size = require_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", hint);
  } else {
    names = &kPmiNames;
    const char* hint = "is this process running under mpiexec (Hydra)?";
    info.rank = require_int(env, "PMI_RANK", hint);
    info.world_size = require_int(env, "PMI_SIZE", hint);
    const auto local_rank = env("MPI_LOCALRANKID"), local_size = env("MPI_LOCALNRANKS");
    info.local_rank = local_rank ? parse_int("MPI_LOCALRANKID", *local_rank) : info.rank;
    info.local_world_size = local_size ? parse_int("MPI_LOCALNRANKS", *local_size) : info.world_size;
  }
  if (const auto port = env("MASTER_PORT")) info.master_port = parse_int("MASTER_PORT", *port);
  if (const auto addr = env("MASTER_ADDR")) info.master_addr = *addr;
  validate_with(info, "MPI launcher", *names);
  return info;
}

}  // namespace

std::optional<RendezvousInfo> rendezvous_from_mpi_launcher(const EnvLookup& env) {
  if (env("OMPI_COMM_WORLD_RANK") || env("PMI_RANK")) return from_mpi_launcher(env);
  if (!env("SLURM_PROCID")) return std::nullopt;
  // srun: Slurm's variables, without the store address from_slurm insists on.
  RendezvousInfo info = slurm_ranks(env);
  if (const auto port = env("MASTER_PORT")) info.master_port = parse_int("MASTER_PORT", *port);
  validate_with(info, "Slurm", kSlurmNames);
  return info;
}

std::optional<std::string> process_env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  return value ? std::optional<std::string>(value) : std::nullopt;
}

void validate(const RendezvousInfo& info, const std::string& source) { validate_with(info, source, kStructNames); }

std::optional<RendezvousInfo> rendezvous_from_env(const EnvLookup& env) {
  if (env("RANK") || env("WORLD_SIZE")) return from_torchrun(env);
  if (env("OMPI_COMM_WORLD_RANK") || env("PMI_RANK")) return from_mpi_launcher(env);
  if (env("SLURM_PROCID")) return from_slurm(env);
  return std::nullopt;
}

std::string first_slurm_host(const std::string& hostlist) {
  // Hosts are separated by commas outside brackets; within a host, each [a-b,c] group contributes its
  // first element, zero padding kept ("rack[1-2]-n[08-09]" -> "rack1-n08").
  std::string host;
  for (size_t i = 0; i < hostlist.size() && hostlist[i] != ','; ++i) {
    if (hostlist[i] != '[') {
      host += hostlist[i];
      continue;
    }
    const size_t close = hostlist.find(']', i);
    MT_CHECK(close != std::string::npos, "Slurm node list '", hostlist, "' has an unclosed '['");
    const std::string group = hostlist.substr(i + 1, close - i - 1);
    const std::string first = group.substr(0, group.find_first_of(",-"));
    MT_CHECK(!first.empty(), "Slurm node list '", hostlist, "' has an empty range");
    host += first;
    i = close;
  }
  MT_CHECK(!host.empty(), "Slurm node list '", hostlist, "' names no host");
  return host;
}

int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id) {
  // "2(x3),1": 2 tasks on each of 3 nodes, then 1 task on the next one.
  const auto bad = [&] {
    MT_FAIL("SLURM_TASKS_PER_NODE='", tasks_per_node, "' is not valid: expected counts like '4' or '2(x3),1'");
  };
  MT_CHECK(node_id >= 0, "SLURM_NODEID=", node_id, " must not be negative");
  int node = 0;
  size_t pos = 0;
  while (pos < tasks_per_node.size()) {
    size_t end = tasks_per_node.find(',', pos);
    if (end == std::string::npos) end = tasks_per_node.size();
    const std::string item = tasks_per_node.substr(pos, end - pos);
    const size_t paren = item.find('(');
    int count = 0, repeat = 1;
    const std::string count_text = item.substr(0, paren);
    if (count_text.empty() || count_text.find_first_not_of("0123456789") != std::string::npos) bad();
    count = parse_int("SLURM_TASKS_PER_NODE", count_text);
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')') bad();
      const std::string repeat_text = item.substr(paren + 2, item.size() - paren - 3);
      if (repeat_text.empty() || repeat_text.find_first_not_of("0123456789") != std::string::npos) bad();
      repeat = parse_int("SLURM_TASKS_PER_NODE", repeat_text);
    }
    if (node_id < node + repeat) return count;
    node += repeat;
    pos = end + 1;
  }
  MT_FAIL("SLURM_NODEID=", node_id, " is beyond the ", node, " nodes of SLURM_TASKS_PER_NODE='", tasks_per_node,
          "'");
}

}  // namespace mt::dist
