// Comm hooks: what DDP does with a bucket of gradients once it is ready. The default hook averages it
// over the ranks with one all-reduce; another hook can compress it first (Fp16CompressHook,
// Bf16CompressHook), or do anything else that leaves the average in the bucket. PyTorch's register_comm_hook, with the
// future's `.then()` split into two calls because our Work has no continuations:
//
//   launch(pg, bucket)   right when the bucket is ready, during backward: start communicating, return
//                        the Work to wait for (Note [Bucket launch order] still holds: DDP calls
//                        launch in bucket order, so the hook's collectives pair up across ranks)
//   finish(pg, bucket)   in finalize, after that Work completed: leave the AVERAGE over ranks of every
//                        rank's bucket in bucket.buffer
//
//   ddp->register_comm_hook(std::make_shared<dist::Fp16CompressHook>());  // before the first backward
//
// Not here: PowerSGD and other low-rank hooks, hooks that chain. ZeRO (distributed/zero/) brings a
// hook of its own and refuses to be combined with another.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group/process_group.h"

namespace mt::dist {

// One bucket as a hook sees it.
struct GradBucket {
  size_t index = 0;      // launch order: 0 holds the last layers' gradients
  // Flat, contiguous: this rank's gradients, then DesyncGuard::kElements guard elements (Note [Desync
  // guard] in desync_guard.cpp). The hook turns ALL of it into the average over ranks, the guard
  // elements like the gradients.
  Tensor buffer;
  const std::vector<std::string>* parameter_names = nullptr;  // the parameters whose .grad are views of it
  // Its first `divided` elements are divided by the world size already: the gradients arrived so
  // (Note [Dividing while writing]), for a hook that divides_first(). The hook divides the rest.
  int64_t divided = 0;
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;  // for --ddp-stats and logs
  virtual std::shared_ptr<Work> launch(ProcessGroup& pg, GradBucket& bucket) = 0;
  virtual void finish(ProcessGroup& pg, GradBucket& bucket) {}
  // The dtype a bucket of `bucket` dtype travels in: it bounds the integers the desync guard may use
  // (Note [Desync guard]). A hook that compresses says so here.
  virtual DType wire_dtype(DType bucket) const { return bucket; }
  // True when the hook (or what registered it) was built on bucket_layout() as it was, so the
  // buckets must keep it: DDP then skips its bucket rebuild (Note [Bucket rebuild] in bucket_rebuild.cpp).
  virtual bool fixed_layout() const { return false; }
  // True when finish() leaves nothing in the bucket that anyone reads later (ZeRO-2 has copied this
  // rank's shard out): the reducer then allocates each bucket when its first gradient of a backward
  // arrives and releases it once finished (Note [Buckets that live for one backward] in reducer.cpp).
  // The parameters' .grad are undefined between backwards.
  virtual bool releases_buckets() const { return false; }
  // Whether the hook begins by dividing the bucket by the world size (mul_ by 1/world, Note
  // [Averaging]). Then the reducer has gradients divided as they are written into the bucket, and
  // the hook divides only what GradBucket::divided says is left: one pass less over every bucket.
  virtual bool divides_first() const { return false; }
};

// The default: divide by the world size, then all-reduce (Sum) in place (Note [Averaging] in reducer.cpp).
class AllreduceHook : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  std::shared_ptr<Work> launch(ProcessGroup& pg, GradBucket& bucket) override;
  bool divides_first() const override { return true; }
};

// Note [fp16 compression]: halves the bytes on the wire. The bucket is divided by the world size
// FIRST, while still float32 (so a sum of many ranks' gradients cannot overflow float16's 65504), cast
// to a float16 copy, all-reduced as float16, and cast back in finish. Costs: gradients keep about 3
// significant digits (relative error up to 2^-11 per rounding, one rounding per cast and per sum
// step), and magnitudes below 2^-24 (about 6e-8) flush to zero. Worth it when the network, not the
// arithmetic, bounds the step (many ranks, slow links); on one machine's shared memory it is not.
// PyTorch's fp16_compress_hook makes the same choices.
//
// Note [bf16 compression]: the same with bfloat16 on the wire (PyTorch's bf16_compress_hook).
// bfloat16 has float32's exponent, so nothing overflows or flushes to zero that float32 keeps, but
// only 8 significant bits: relative error up to 2^-8 per rounding, eight times fp16's. The pick when
// gradients span a wide range (no loss scaling needed, as in bf16 training); fp16 when they fit its
// range and the digits matter. Dividing first stays, for the reducer's one pass (divides_first), not
// for range. The desync guard's integers must be exact in the wire dtype (Note [Desync guard]):
// bfloat16 holds integers up to 256, and its marker sums up to 12 ranks, so the hook refuses more.
//
// CompressHook is both: divide, cast to the wire dtype into a copy kept per bucket, all-reduce the
// copy (Sum), cast back in finish.
class CompressHook : public CommHook {
 public:
  bool divides_first() const override { return true; }
  std::shared_ptr<Work> launch(ProcessGroup& pg, GradBucket& bucket) override;
  void finish(ProcessGroup& pg, GradBucket& bucket) override;
  DType wire_dtype(DType) const override { return wire_; }

 protected:
  explicit CompressHook(DType wire) : wire_(wire) {}

 private:
  DType wire_;
  std::map<size_t, Tensor> compressed_;  // per bucket: its copy in the wire dtype, reused every step
};

class Fp16CompressHook : public CompressHook {
 public:
  Fp16CompressHook() : CompressHook(kFloat16) {}
  std::string name() const override { return "fp16"; }
};

class Bf16CompressHook : public CompressHook {
 public:
  Bf16CompressHook() : CompressHook(kBFloat16) {}
  std::string name() const override { return "bf16"; }
};

// "allreduce", "fp16" or "bf16" -> a new hook; throws naming the choices otherwise (mini_train --comm-hook).
std::shared_ptr<CommHook> make_comm_hook(const std::string& name);

}  // namespace mt::dist
