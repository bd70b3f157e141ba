// DDP's buffer broadcast (see buffer_sync.h): rank 0's buffers copied to every rank, in place.
#include "distributed/ddp/detail/buffer_sync.h"

#include <memory>
#include <vector>

#include "autograd/grad_mode.h"

namespace mt::dist {

// Note [Buffer broadcast]: parameters stay identical across ranks by construction (same start, same
// averaged gradient, same update), but buffers are not trained: a BatchNorm in training mode updates
// its running_mean/running_var from THIS rank's batch, so after one forward every rank holds
// different running statistics, and they would drift further apart each step. Evaluation (which
// uses them) would then depend on the rank, and a checkpoint written by rank 0 would not be the
// model the other ranks are running. So, as PyTorch's DDP does with broadcast_buffers (the
// default), DDP::forward in training mode first copies rank 0's buffers to every rank: each step
// starts from rank 0's statistics, and each rank's forward updates them with its own batch. Between
// that forward and the next one the ranks' buffers differ again (each holds rank 0's values moved by
// its own batch); rank 0's are the authoritative ones. That is why the replica guard
// (replica_guard.h) compares parameters only, and why saving from rank 0 is right: the next forward
// of every rank starts from exactly what rank 0 holds. Join (ddp_join.h) keeps a rank without data in
// step: DDP::shadow_backward takes part in the same broadcast before the buckets. The cost is one
// small broadcast per buffer per step (BatchNorm: 2·C floats and an int64), none in a world of one
// or for a model without buffers.
void broadcast_buffers(ProcessGroup& pg, const NamedTensors& buffers) {
  if (pg.size() == 1 || buffers.empty()) return;
  NoGradGuard no_grad;
  std::vector<Tensor> tensors;
  for (const auto& [name, b] : buffers) tensors.push_back(b);
  std::vector<std::shared_ptr<Work>> works;
  for (Tensor& t : tensors) works.push_back(pg.broadcast(t, 0));  // all issued, then all waited for
  for (auto& w : works) w->wait();
}

}  // namespace mt::dist
