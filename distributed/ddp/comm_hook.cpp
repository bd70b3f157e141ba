// The built-in comm hooks (see comm_hook.h).
#include "distributed/ddp/comm_hook.h"

namespace mt::dist {

namespace {
// Divides what is not divided yet (GradBucket::divided; Note [Dividing while writing]).
void divide_rest(ProcessGroup& pg, GradBucket& bucket) {
  const int64_t n = bucket.buffer.numel();
  if (pg.size() > 1 && bucket.divided < n) bucket.buffer.narrow(0, bucket.divided, n - bucket.divided).mul_(1.0 / pg.size());
}
}  // namespace

std::shared_ptr<Work> AllreduceHook::launch(ProcessGroup& pg, GradBucket& bucket) {
  divide_rest(pg, bucket);
  return pg.allreduce_own_guard(bucket.buffer, ReduceOp::Sum);  // the bucket ends in its guard
}

std::shared_ptr<Work> Fp16CompressHook::launch(ProcessGroup& pg, GradBucket& bucket) {
  MT_CHECK(bucket.buffer.dtype() == kFloat32, "Fp16CompressHook: bucket ", bucket.index, " holds ",
           bucket.buffer.dtype(), " gradients; fp16 compression is for float32 ones");
  Tensor& half = compressed_[bucket.index];
  if (!half.defined() || half.numel() != bucket.buffer.numel())  // first use, or a rebuilt bucket
    half = empty({bucket.buffer.numel()}, {.dtype = DType::Float16, .device = bucket.buffer.device()});
  divide_rest(pg, bucket);  // before the cast: Note [fp16 compression]
  half.copy_(bucket.buffer);
  return pg.allreduce_own_guard(half, ReduceOp::Sum);
}

void Fp16CompressHook::finish(ProcessGroup&, GradBucket& bucket) { bucket.buffer.copy_(compressed_.at(bucket.index)); }

std::shared_ptr<CommHook> make_comm_hook(const std::string& name) {
  if (name == "allreduce") return std::make_shared<AllreduceHook>();
  if (name == "fp16") return std::make_shared<Fp16CompressHook>();
  MT_FAIL("unknown DDP comm hook '", name, "' (allreduce, fp16)");
}

}  // namespace mt::dist
