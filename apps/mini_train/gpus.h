// mini_train --gpus LIST: which GPUs a job trains on, checked before anything is spawned or loaded.
//
//   --gpus 0        one process on GPU 0 (no process group, no DDP)
//   --gpus 0,1,2,3  the launcher starts one worker per GPU; worker LOCAL_RANK r trains on the r-th
//                   listed GPU, and the workers all-reduce gradients with NCCL
//
// Every request that cannot be met is one line naming the problem: a malformed list, a GPU listed
// twice, --gpus with --nproc, a build without the CUDA backend (or without NCCL, for several GPUs),
// no visible GPU, a GPU index beyond the machine's count.
#pragma once

#include <string>
#include <vector>

#include "apps/mini_train/options.h"
#include "tensor/device.h"

namespace mt::app {

// "0,2,3" -> {0, 2, 3}. Throws on empty entries, non-numbers, negative indices and duplicates.
std::vector<int> parse_gpu_list(const std::string& list);

// The checks above, for opts.gpus (nothing to check when it is empty). Runs in the launcher and
// again in every worker; both see the same GPUs.
void validate_gpus(const Options& opts);

// How many worker processes the options ask for: one per listed GPU, or --nproc.
int worker_count(const Options& opts);

// The device this process trains on: kCPU without --gpus; the listed GPU of this LOCAL_RANK
// (0 when not launched) with it.
Device training_device(const Options& opts, int local_rank);

// Makes `device` the calling thread's current CUDA device (so that CUDA's context, and NCCL's, are
// created on it and on no other GPU). Nothing for the CPU.
void bind_device(const Device& device);

}  // namespace mt::app
