// The built-in comm hooks (see comm_hook.h).
#include "distributed/ddp/comm_hook.h"

namespace mt::dist {

std::shared_ptr<Work> AllreduceHook::launch(ProcessGroup& pg, GradBucket& bucket) {
  if (pg.size() > 1) bucket.buffer.mul_(1.0 / pg.size());
  return pg.allreduce(bucket.buffer, ReduceOp::Sum);
}

std::shared_ptr<Work> Fp16CompressHook::launch(ProcessGroup& pg, GradBucket& bucket) {
  MT_CHECK(bucket.buffer.dtype() == kFloat32, "Fp16CompressHook: bucket ", bucket.index, " holds ",
           bucket.buffer.dtype(), " gradients; fp16 compression is for float32 ones");
  Tensor& half = compressed_[bucket.index];
  if (!half.defined() || half.numel() != bucket.buffer.numel())  // first use, or a rebuilt bucket
    half = empty({bucket.buffer.numel()}, {.dtype = DType::Float16, .device = bucket.buffer.device()});
  if (pg.size() > 1) bucket.buffer.mul_(1.0 / pg.size());  // before the cast: Note [fp16 compression]
  half.copy_(bucket.buffer);
  return pg.allreduce(half, ReduceOp::Sum);
}

void Fp16CompressHook::finish(ProcessGroup&, GradBucket& bucket) { bucket.buffer.copy_(compressed_.at(bucket.index)); }

std::shared_ptr<CommHook> make_comm_hook(const std::string& name) {
  if (name == "allreduce") return std::make_shared<AllreduceHook>();
  if (name == "fp16") return std::make_shared<Fp16CompressHook>();
  MT_FAIL("unknown DDP comm hook '", name, "' (allreduce, fp16)");
}

}  // namespace mt::dist
