// Step checkpoints and the mid-epoch resume (see checkpoint_step.h, Note [Mid-epoch resume]).
#include "apps/mini_train/checkpoint_step.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tensor/check.h"

namespace mt::app {

namespace {
constexpr const char* kLossSums = "loss_sums";
}

bool step_checkpoint_due(const Options& o, int64_t step, bool epoch_done) {
  return o.checkpoint_every > 0 && !o.checkpoint_dir.empty() && !epoch_done && step % o.checkpoint_every == 0;
}

Tensor gather_progress(dist::ProcessGroup* pg, int world, int rank, const EpochProgress& mine) {
  std::vector<double> rows(static_cast<size_t>(2 * world), 0.0);  // (world, 2)
  rows[static_cast<size_t>(2 * rank)] = mine.loss_sum;
  rows[static_cast<size_t>(2 * rank + 1)] = static_cast<double>(mine.seen);
  Tensor sums = from_vector(rows, {world, 2});
  if (!pg) return sums;
  // On the group's device (NCCL reduces GPU tensors only); x + 0 is exact, so the sum is a gather.
  sums = sums.to(pg->device());
  pg->allreduce(sums, dist::ReduceOp::Sum)->wait();
  return sums.to(kCPU);
}

void add_progress(Checkpoint& c, int64_t batches, const Tensor& loss_sums) {
  c.epoch_batches = batches;
  c.progress[kLossSums] = loss_sums;
}

EpochProgress resumed_progress(const Checkpoint& c, int world, int rank, const std::string& from) {
  if (c.epoch_batches == 0) return {};
  const auto it = c.progress.find(kLossSums);
  MT_CHECK(it != c.progress.end() && it->second.dim() == 2 && it->second.size(1) == 2, "--resume ", from,
           ": a checkpoint taken mid-epoch (", c.epoch_batches, " batches into epoch ", c.epoch + 1,
           ") needs progress/", kLossSums, " of shape (ranks, 2)");
  const Tensor& sums = it->second;
  MT_CHECK(sums.size(0) == world, "--resume ", from, ": the checkpoint was taken mid-epoch (", c.epoch_batches,
           " batches into epoch ", c.epoch + 1, ") by ", sums.size(0), " processes, this run has ", world,
           "; an epoch is split by the number of processes, so resume it with ", sums.size(0),
           ", or from an epoch checkpoint (checkpoint-epoch-NNNNNN.safetensors)");
  const std::vector<double> v = sums.to(kCPU).to_vector<double>();
  return {.batches = c.epoch_batches, .loss_sum = v[static_cast<size_t>(2 * rank)],
          .seen = static_cast<int64_t>(v[static_cast<size_t>(2 * rank + 1)])};
}

}  // namespace mt::app
