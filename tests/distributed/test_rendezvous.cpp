// Rendezvous from the environment: what torchrun, srun and mpirun set becomes a RendezvousInfo, and every
// missing or malformed variable is an error that names it (Note [Rendezvous defaults]).
#include <doctest/doctest.h>

#include <map>

#include "distributed/store/rendezvous.h"
#include "tensor/check.h"

using namespace mt;
using namespace mt::dist;

namespace {

// An environment made of a map, so the tests never touch the real one.
EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

const std::map<std::string, std::string> kTorchrun = {
    {"RANK", "5"},       {"WORLD_SIZE", "8"},         {"LOCAL_RANK", "1"},
    {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "node01"}, {"MASTER_PORT", "29500"}};

std::map<std::string, std::string> with(std::map<std::string, std::string> vars, const std::string& name,
                                        const std::optional<std::string>& value) {
  if (value) vars[name] = *value;
  else vars.erase(name);
  return vars;
}

}  // namespace

TEST_CASE("env:// reads what torchrun sets") {
  const RendezvousInfo info = rendezvous_from_env(env_of(kTorchrun)).value();
  CHECK(info.rank == 5);
  CHECK(info.world_size == 8);
  CHECK(info.local_rank == 1);
  CHECK(info.local_world_size == 4);
  CHECK(info.master_addr == "node01");
  CHECK(info.master_port == 29500);
  CHECK(info.store_prefix.empty());  // rank 0 hosts the store
  // mini_train's multi-node launcher hosts it instead and names the attempt's prefix.
  CHECK(rendezvous_from_env(env_of(with(kTorchrun, "MT_STORE_PREFIX", "attempt/2")))->store_prefix == "attempt/2");
}

TEST_CASE("no rendezvous variables at all means a plain single-process run") {
  CHECK_FALSE(rendezvous_from_env(env_of({{"HOME", "/root"}})).has_value());
}

TEST_CASE("env:// on one machine: LOCAL_* and MASTER_ADDR may be left out, MASTER_PORT may not") {
  const RendezvousInfo info =
      rendezvous_from_env(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1234"}})).value();
  CHECK(info.local_rank == 1);
  CHECK(info.local_world_size == 2);
  CHECK(info.master_addr == "127.0.0.1");
  CHECK_THROWS_WITH_AS(rendezvous_from_env(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}})),
                       doctest::Contains("MASTER_PORT is not set"), Error);
  // Spanning machines (4 of 8 here), the store's address cannot be guessed.
  CHECK_THROWS_WITH_AS(rendezvous_from_env(env_of(with(kTorchrun, "MASTER_ADDR", std::nullopt))),
                       doctest::Contains("MASTER_ADDR is not set, and the job spans machines"), Error);
}

TEST_CASE("env:// errors name the variable and say what was expected") {
  const auto error_for = [](const std::string& name, const std::optional<std::string>& value) {
    try {
      rendezvous_from_env(env_of(with(kTorchrun, name, value)));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_for("RANK", "five").find("RANK='five' is not an integer") != std::string::npos);
  CHECK(error_for("RANK", "8").find("RANK=8 must be in [0, WORLD_SIZE=8)") != std::string::npos);
  CHECK(error_for("RANK", std::nullopt).find("RANK is not set") != std::string::npos);
  CHECK(error_for("WORLD_SIZE", "0").find("WORLD_SIZE=0 must be at least 1") != std::string::npos);
  CHECK(error_for("WORLD_SIZE", "8x").find("WORLD_SIZE='8x' is not an integer") != std::string::npos);
  CHECK(error_for("LOCAL_RANK", "4").find("LOCAL_RANK=4 must be in [0, LOCAL_WORLD_SIZE=4)") != std::string::npos);
  CHECK(error_for("LOCAL_WORLD_SIZE", std::nullopt).find("LOCAL_WORLD_SIZE is not set but LOCAL_RANK is") !=
        std::string::npos);
  CHECK(error_for("MASTER_PORT", "70000").find("MASTER_PORT=70000 is not a port number") != std::string::npos);
  CHECK(error_for("MASTER_PORT", "0").find("MASTER_PORT=0 is not a port the ranks can meet at") != std::string::npos);
  CHECK(error_for("MASTER_PORT", "").find("MASTER_PORT='' is not an integer") != std::string::npos);
}

TEST_CASE("Slurm's variables are the fallback when RANK is not set") {
  const std::map<std::string, std::string> slurm = {
      {"SLURM_PROCID", "5"},  {"SLURM_NTASKS", "7"},  {"SLURM_LOCALID", "0"},
      {"SLURM_NODEID", "2"},  {"SLURM_TASKS_PER_NODE", "2(x2),3"},
      {"SLURM_STEP_NODELIST", "gpu[07-09]"}, {"MASTER_PORT", "29400"}};
  const RendezvousInfo info = rendezvous_from_env(env_of(slurm)).value();
  CHECK(info.rank == 5);
  CHECK(info.world_size == 7);
  CHECK(info.local_rank == 0);
  CHECK(info.local_world_size == 3);  // node 2 is the one with 3 tasks
  CHECK(info.master_addr == "gpu07");
  CHECK(info.master_port == 29400);
  CHECK(rendezvous_from_env(env_of(with(slurm, "MASTER_ADDR", "head"))).value().master_addr == "head");
  CHECK_THROWS_WITH_AS(rendezvous_from_env(env_of(with(slurm, "MASTER_PORT", std::nullopt))),
                       doctest::Contains("MASTER_PORT is not set; Slurm does not choose one"), Error);
  CHECK_THROWS_WITH_AS(rendezvous_from_env(env_of(with(slurm, "SLURM_LOCALID", std::nullopt))),
                       doctest::Contains("SLURM_LOCALID is not set"), Error);
  CHECK_THROWS_WITH_AS(rendezvous_from_env(env_of(with(slurm, "SLURM_PROCID", "9"))),
                       doctest::Contains("SLURM_PROCID=9 must be in [0, SLURM_NTASKS=7)"), Error);
}

TEST_CASE("Slurm host lists and task counts") {
  CHECK(first_slurm_host("node01") == "node01");
  CHECK(first_slurm_host("node[07-09,12],gpu3") == "node07");
  CHECK(first_slurm_host("rack[1-2]-n[08-09]") == "rack1-n08");
  CHECK(first_slurm_host("a,b") == "a");
  CHECK_THROWS_WITH_AS(first_slurm_host("node[01-"), doctest::Contains("unclosed"), Error);

  CHECK(slurm_tasks_on_node("4", 0) == 4);
  CHECK(slurm_tasks_on_node("2(x3),1", 2) == 2);
  CHECK(slurm_tasks_on_node("2(x3),1", 3) == 1);
  CHECK_THROWS_WITH_AS(slurm_tasks_on_node("2(x3),1", 4), doctest::Contains("beyond the 4 nodes"), Error);
  CHECK_THROWS_WITH_AS(slurm_tasks_on_node("2(x3", 0), doctest::Contains("SLURM_TASKS_PER_NODE='2(x3' is not valid"),
                       Error);
}

TEST_CASE("a process started by mpirun, mpiexec or srun learns its rank without any store variable") {
  const std::map<std::string, std::string> ompi = {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  const RendezvousInfo info = rendezvous_from_mpi_launcher(env_of(ompi)).value();
  CHECK(info.rank == 3);
  CHECK(info.world_size == 4);
  CHECK(info.local_rank == 1);
  CHECK(info.local_world_size == 2);
  CHECK(info.master_port == 0);  // ProcessGroupMPI needs no store
  // rendezvous_from_env knows mpirun too; a Gloo job under mpirun still names its store's port.
  CHECK(rendezvous_from_env(env_of(with(ompi, "MASTER_PORT", "29500"))).value().master_port == 29500);
  CHECK_THROWS_WITH_AS(rendezvous_from_mpi_launcher(env_of(with(ompi, "OMPI_COMM_WORLD_RANK", "4"))),
                       doctest::Contains("OMPI_COMM_WORLD_RANK=4 must be in [0, OMPI_COMM_WORLD_SIZE=4)"), Error);

  const RendezvousInfo hydra = rendezvous_from_mpi_launcher(env_of({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}})).value();
  CHECK(hydra.rank == 1);
  CHECK(hydra.local_world_size == 2);  // no MPI_LOCALNRANKS: one machine

  const RendezvousInfo srun = rendezvous_from_mpi_launcher(env_of({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"},
                                                                   {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "1"},
                                                                   {"SLURM_TASKS_PER_NODE", "2(x2)"}})).value();
  CHECK(srun.rank == 2);
  CHECK(srun.local_world_size == 2);
  CHECK_FALSE(rendezvous_from_mpi_launcher(env_of({{"RANK", "0"}})).has_value());
}
