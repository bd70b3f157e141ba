// Uses the installed headers and library: one gradient, checked against its known value; a
// data-parallel step in a world of one (init_process_group's default backend); whether the CUDA
// backend came with the library it linked; the process-group backends it has (gloo and mpi only
// from their components) and what init_process_group("gloo") says; started as if by mpirun
// (check.sh sets OpenMPI's variables), what init_process_group says without minitrain::mpi; and an
// error raised
// by a check inlined from an installed header, whose location must read as in the repository
// ("tensor/tensor.h"), not as the install prefix (tests/install/check.sh reads this output).
#include <cstdio>
#include <memory>
#include <string>

#include "minitrain.h"
#include "tensor/cuda_info.h"

int main() {
  // Started as a rank of an MPI job (OpenMPI's variables, no MASTER_PORT): the backend "auto" picks.
  if (const auto job = mt::dist::rendezvous_from_env(); job && job->world_size > 1) {
    try {
      auto pg = mt::dist::init_process_group({.rendezvous = *job});
      std::printf("consumer: mpirun: %s backend, %d ranks\n", pg->backend().c_str(), pg->size());
    } catch (const mt::Error& e) {
      std::printf("consumer: mpirun: %s\n", e.what());
    }
    return 0;
  }
  mt::Tensor w = mt::full({3}, 2.0, {.requires_grad = true});
  (w * w).sum().backward();  // d/dw Σw² = 2w = 4
  const double g = w.grad().sum().item();
  std::printf("consumer: grad sum %.1f\n", g);

  auto net = std::make_shared<mt::nn::Linear>(2, 1);
  auto pg = mt::dist::init_process_group();  // "auto": a world of one is "local"
  auto ddp = std::make_shared<mt::dist::DistributedDataParallel>(net, pg);
  ddp->zero_grad();
  ddp->forward(mt::ones({4, 2})).sum().backward();  // dL/db = 4 rows
  const double db = net->bias.grad().item();
  std::printf("consumer: %s backend, bias grad %.1f\n", pg->backend().c_str(), db);

  // Whether the CUDA backend is linked in: only through minitrain::cuda (check.sh reads this).
  std::printf("consumer: CUDA backend %s\n", mt::cuda_is_built() ? "linked" : "absent");

  // The backends linked in: minitrain::gloo and minitrain::mpi register theirs (check.sh reads this).
  std::string names;
  for (const std::string& name : mt::dist::registered_process_group_backends()) names += " " + name;
  std::printf("consumer: backends%s\n", names.c_str());
  try {
    auto gloo = mt::dist::init_process_group({.backend = "gloo"});  // a world of one: rank 0 hosts the store
    std::printf("consumer: gloo group of %d\n", gloo->size());
  } catch (const mt::Error& e) {
    std::printf("consumer: gloo: %s\n", e.what());
  }

  try {
    mt::full({1}, 1.0).data_ptr<int64_t>();  // float32 read as int64: the check in tensor/tensor.h
  } catch (const mt::Error& e) {
    std::printf("consumer: error: %s\n", e.what());
  }
  return g == 12.0 && db == 4.0 ? 0 : 1;
}
