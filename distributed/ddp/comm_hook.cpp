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

// The largest world whose desync-guard sums bfloat16 holds exactly (Note [bf16 compression]).
constexpr int kBf16MaxWorld = 12;

std::shared_ptr<Work> CompressHook::launch(ProcessGroup& pg, GradBucket& bucket) {
  MT_CHECK(bucket.buffer.dtype() == kFloat32, name(), " comm hook: bucket ", bucket.index, " holds ",
           bucket.buffer.dtype(), " gradients; ", name(), " compression is for float32 ones");
  MT_CHECK(wire_ != kBFloat16 || pg.size() <= kBf16MaxWorld, "bf16 comm hook: ", pg.size(), " ranks is more "
           "than the ", kBf16MaxWorld, " whose desync guard bfloat16 keeps exact (Note [bf16 compression]); "
           "use the fp16 hook or none");
  Tensor& narrow = compressed_[bucket.index];
  if (!narrow.defined() || narrow.numel() != bucket.buffer.numel())  // first use, or a rebuilt bucket
    narrow = empty({bucket.buffer.numel()}, {.dtype = wire_, .device = bucket.buffer.device()});
  divide_rest(pg, bucket);  // before the cast: Note [fp16 compression]
  narrow.copy_(bucket.buffer);
  return pg.allreduce_own_guard(narrow, ReduceOp::Sum);
}

void CompressHook::finish(ProcessGroup&, GradBucket& bucket) { bucket.buffer.copy_(compressed_.at(bucket.index)); }

std::shared_ptr<CommHook> make_comm_hook(const std::string& name) {
  if (name == "allreduce") return std::make_shared<AllreduceHook>();
  if (name == "fp16") return std::make_shared<Fp16CompressHook>();
  if (name == "bf16") return std::make_shared<Bf16CompressHook>();
  MT_FAIL("unknown DDP comm hook '", name, "' (allreduce, fp16, bf16)");
}

}  // namespace mt::dist
