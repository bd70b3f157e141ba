// --accumulate K: one optimizer step per group of K micro-batches, so that a run with
// --batch-size B --accumulate K ends at the weights of --batch-size K·B (to float rounding). This
// file holds only the arithmetic of the groups; the trainer (trainer.cpp) runs them.
//
// Note [Gradient accumulation]: the loader still makes batches of --batch-size (the micro-batches),
// in the order a K·B loader would, since both slice the same permutation of the epoch (Note [Epoch
// seeding] in data/sampler.h). Three things make K micro-batches one step of the K·B batch:
//   - the gradients add up: no zero_grad between the micro-batches of a group, only before its first;
//   - each micro-batch's loss (a mean over its n examples) is scaled by n / N, N the examples in its
//     group, so the summed gradient is that of the mean over the N examples. For a full group that
//     is 1/K; the epoch's last group may hold fewer or smaller micro-batches (like the K·B loader's
//     last batch), and n / N keeps it exact there too;
//   - under DDP the first micro-batches of a group run forward and backward inside ddp.no_sync(),
//     which only accumulates into the buckets; the group's last backward all-reduces the sum once
//     (distributed/ddp/ddp.h), so a step costs one all-reduce whatever K is.
// BatchNorm (--model cnn) normalises each micro-batch by its own statistics, so there the result
// is close to the large batch's but not equal, as in PyTorch.
#pragma once

#include <algorithm>
#include <cstdint>

namespace mt::app {

struct Accumulation {
  int64_t k = 1;           // micro-batches per optimizer step (--accumulate)
  int64_t batch_size = 1;  // examples per micro-batch (the last of an epoch may have fewer)
  int64_t samples = 0;     // examples this rank sees per epoch (a DistributedSampler's padded share)

  // Micro-batches per epoch: what the loader yields.
  int64_t batches() const { return (samples + batch_size - 1) / batch_size; }
  // Optimizer steps per epoch: one per group, the last group possibly short.
  int64_t steps() const { return (batches() + k - 1) / k; }
  // Whether micro-batch j (0-based in the epoch) is the last of its group: the step follows it.
  bool ends_step(int64_t j) const { return (j + 1) % k == 0 || j + 1 == batches(); }
  // What micro-batch j's loss, a mean over its n examples, is multiplied by: n / (examples in its group).
  double loss_scale(int64_t j, int64_t n) const {
    const int64_t first = j / k * k, end = std::min(first + k, batches());
    const int64_t group = std::min(end * batch_size, samples) - first * batch_size;
    return static_cast<double>(n) / static_cast<double>(group);
  }
};

}  // namespace mt::app
