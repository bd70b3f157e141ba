// ZeRO stages 1 and 2 (Rajbhandari et al., SC 2020): data parallelism where each rank keeps only 1/N
// of the optimizer state (stage 1) and also only 1/N of the reduced gradients (stage 2). Every rank
// still holds the whole model; what changes is what happens to a bucket and to the optimizer step:
//
//   backward   each bucket is REDUCE-SCATTERED instead of all-reduced (ZeroHook, a DDP comm hook):
//              rank r ends with the average of its own shard of the bucket only
//   step       the wrapped optimizer updates only this rank's shard of the parameters, so only that
//              shard has momentum / Adam moments (ZeroRedundancyOptimizer)
//   gather     the updated shards are ALL-GATHERED, so every rank again holds the whole model
//   stage 2    the reduce-scatter writes this rank's shard into a buffer of its own, and DDP frees
//              the bucket as soon as that is done (Note [ZeRO-2: only the shard stays])
//
//   auto ddp = std::make_shared<dist::DistributedDataParallel>(model, pg);
//   dist::ZeroRedundancyOptimizer opt(ddp, std::make_unique<optim::Adam>(model->parameters(), opts),
//                                     {.stage = 2});   // 1 by default
//   loss(ddp->forward(x), y).backward();   // reduce-scatter, bucket by bucket, during backward
//   opt.step();                            // this rank's shard, then the all-gather
//
// Note [ZeRO communication] (the bytes) and Note [Where ZeRO's memory goes] are in zero.cpp;
// docs/ddp.md has the walk-through. It lives in distributed/, not optim/, because it is made of
// collectives and of DDP's buckets, and optim/ sits below distributed/ (nothing there knows that
// distribution exists).
//
// Uneven inputs: a dist::Join over the DDP model works with it, with {.step = [&] { zero.step(); }}
// (Note [Join], distributed/ddp/ddp_join.h).
//
// Not here: ZeRO-3, sharding the parameters themselves (FullyShardedDataParallel, fsdp.h, in units
// of its own instead of DDP's buckets), optimizers whose update is not elementwise
// (LAMB, Shampoo: they need the whole parameter).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "distributed/ddp/comm_hook.h"
#include "distributed/ddp/ddp.h"
#include "nn/sharded_state.h"
#include "optim/optimizer.h"

namespace mt::dist {

// Note [ZeRO shards]: a bucket of `numel` gradient elements (then the desync guard's elements) is
// split as   [ shard 0 | shard 1 | ... | shard N-1 | tail ][ guard ]   with q = numel / N elements
// per shard (rounded down). The body (N·q elements) is reduce-scattered: rank r ends with the
// average of [r·q, (r+1)·q). The tail (numel - N·q < N gradient elements) and the guard are
// all-reduced, so the guard is checked on every rank exactly as in plain DDP (Note [Desync guard])
// and every rank holds the tail's average and steps it, identically (a few elements per bucket of
// replicated state, instead of padding the bucket).
struct ZeroShard {
  int64_t numel = 0;  // gradient elements of the bucket
  int64_t shard = 0;  // q
  int64_t body = 0;   // N·q
};
ZeroShard zero_shard(int64_t numel, int world);

// Note [ZeRO-2: only the shard stays]: stage 1 reduce-scatters each bucket in place and keeps the
// whole bucket; stage 2 keeps, per bucket, only `kept` = [ this rank's shard (q) | tail ] (Note
// [ZeRO shards]), allocated once, and that is where the optimizer's pieces find their gradients. As
// each bucket becomes ready during backward, the hook divides it by the world size and issues the
// reduce-scatter with the shard of `kept` as its output, and the all-reduce of a copy of the tail
// and guard (a Work holds what it reduces until DDP drops it after finalize; a view would keep the
// whole bucket alive that long); finish() copies the sums back into the bucket and the tail into
// `kept`. The hook says releases_buckets(), so DDP allocates each bucket when its first gradient
// arrives and releases it right after finish(), at its next ready hook or in finalize (Note
// [Buckets that live for one backward], distributed/ddp/reducer.cpp):
// between backwards a rank holds q + tail gradient elements per bucket instead of the whole bucket.
// no_sync backwards launch nothing, so their buckets stay and accumulate, and the synced backward
// reduce-scatters the sums; each synced backward overwrites `kept` (as under stage 1, gradients add
// up over micro-batches through no_sync, not over synced backwards without a step). The step and
// its all-gather are stage 1's, with buckets of the step's own for the gathered parameters
// (ZeroRedundancyOptimizer::step).
//
// The comm hook: reduce-scatter the body, all-reduce tail and guard (Note [ZeRO shards]). Stage 1
// (no `kept`): in place; after it only this rank's shard of each bucket (and the tail) holds averaged
// gradients, the rest of the bucket this rank's own scaled gradients, which nothing reads. Stage 2:
// into `kept`, as above. Use it through ZeroRedundancyOptimizer, which registers it.
class ZeroHook : public CommHook {
 public:
  // `kept`: stage 2's buffer per bucket (q + tail elements), or empty for stage 1.
  explicit ZeroHook(std::vector<Tensor> kept = {}) : kept_(std::move(kept)) {}
  std::string name() const override { return kept_.empty() ? "zero" : "zero2"; }
  bool fixed_layout() const override { return true; }  // the shards were cut from bucket_layout()
  bool releases_buckets() const override { return !kept_.empty(); }
  std::shared_ptr<Work> launch(ProcessGroup& pg, GradBucket& bucket) override;
  void finish(ProcessGroup& pg, GradBucket& bucket) override;

 private:
  std::vector<Tensor> kept_;
  std::map<size_t, std::shared_ptr<Work>> scattering_;  // per bucket: its reduce-scatter in flight
  std::map<size_t, Tensor> tails_;  // stage 2, per bucket: the copy of tail and guard being all-reduced
};

// One contiguous run of a parameter that this rank updates: elements [param_offset, +numel) of the
// flattened parameter, at [bucket_offset, +numel) of its bucket.
struct ZeroPiece {
  size_t param = 0;  // index in the full optimizer's numbering (group after group)
  size_t bucket = 0;
  int64_t param_offset = 0, bucket_offset = 0, numel = 0;
};

// Builds the optimizer that updates this rank's pieces, group g of it holding the pieces of `full`'s
// group g, each group non-empty (a placeholder stands in for a group with no piece here).
using ZeroFactory = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<std::vector<Tensor>>& groups)>;

namespace detail {
// The default Factory: `full`'s kind (SGD, Adam, AdamW) with full's groups' options, over `groups`.
std::unique_ptr<optim::Optimizer> make_like(const optim::Optimizer& full, const std::vector<std::vector<Tensor>>& groups);
}  // namespace detail

struct ZeroOptions {
  int stage = 1;         // 1: the optimizer state sharded; 2: the reduced gradients too
  ZeroFactory make{};    // how to build `full`'s kind over pieces; by default SGD, Adam and AdamW are known
};

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  using Factory = ZeroFactory;

  // `full`: the optimizer as plain DDP would use it, over the model's parameters (its kind, groups,
  // hyperparameters and any state it holds, e.g. loaded from a checkpoint, carry over; then it is
  // dropped). Registers ZeroHook on `ddp`: before the first backward, on every rank, with the same
  // stage everywhere. Under stage 2 the parameters' .grad are undefined between backwards (the
  // shards are the pieces' gradients, Note [ZeRO-2: only the shard stays]).
  ZeroRedundancyOptimizer(std::shared_ptr<DistributedDataParallel> ddp, std::unique_ptr<optim::Optimizer> full,
                          ZeroOptions options = {});

  // This rank's shard, then the all-gather of every bucket. Afterwards every rank holds the same
  // parameters; under stage 1 the gradients read zero (their buckets carried the all-gather).
  void step() override;

  // clip_grad_norm_ (optim/clip_grad.h) for ZeRO, 2-norm: after backward only this rank's shard holds
  // averaged gradients, so each rank sums the squares of its shard (the tails, alike on every rank,
  // counted by rank 0 only), one all-reduce adds the ranks' sums, and every rank scales its pieces by
  // the same coefficient. A COLLECTIVE. Returns the norm before clipping.
  double clip_grad_norm(double max_norm) override;
  // This rank's pieces of the reduced gradients (the tails on every rank): what step() reads, and
  // what a GradScaler unscales and checks (Note [One found-inf for all ranks], ddp/found_inf.h).
  std::vector<Tensor> step_gradients() const override;

  // The model's parameters in `full`'s groups; the learning rates are the inner optimizer's.
  size_t num_param_groups() const override { return groups_.size(); }
  const std::vector<Tensor>& params(size_t group) const override;
  double lr(size_t group) const override { return inner_->lr(group); }
  void set_lr(size_t group, double lr) override { inner_->set_lr(group, lr); }

  // A COLLECTIVE (every rank calls it), Note [Consolidated ZeRO state]: the state of `full` as if a
  // plain optimizer had run, gathered from every rank's shards. The same keys and shapes as plain
  // DDP's optimizer (Note [Optimizer state dict]), so a checkpoint does not depend on the world size
  // and loads into a ZeRO run of any world size, or into a plain one.
  optim::StateDict state_dict() const override;
  // Takes this rank's pieces out of a consolidated (or plain) state dict. Not a collective.
  void load_state_dict(const optim::StateDict& state) override;
  // NOT a collective: this rank's share of state_dict(), under its keys (state.<i>.<field> shaped
  // like parameter i): per piece of this rank, the piece's range of each tensor field; each scalar
  // field (Adam's step) once per parameter; the param_groups.* entries, alike on every rank, whole
  // in `replicated`. The pieces of all ranks together cover state_dict() (the tails of Note [ZeRO
  // shards] twice or more). What a sharded checkpoint writes (nn/sharded_checkpoint.h).
  LocalShard local_state() const;

  const std::vector<ZeroPiece>& pieces() const { return pieces_; }
  int stage() const { return stage_; }

 private:
  struct Bucket {
    Tensor buffer;  // stage 1: DDP's bucket, gradients then the guard; stage 2: undefined
    Tensor kept;    // stage 2: [ shard | tail ] of the reduced gradients (Note [ZeRO-2: only the shard stays])
    ZeroShard split;
    std::vector<size_t> params;     // full indices, in bucket order
    std::vector<int64_t> offsets;   // where each starts in the bucket
  };
  void build_buckets();
  void build_pieces();
  // state_dict's steps (zero_state.cpp). The inner optimizer's state fields by kind: tensor fields
  // (per element) and scalar ones (per parameter); the param_groups.* entries go to `out` as they
  // are, with `full`'s counts.
  struct StateFields {
    std::set<std::string> tensors, scalars;
  };
  StateFields state_fields(const optim::StateDict& inner, optim::StateDict& out) const;
  using PieceEntry = std::function<const Tensor*(size_t piece, const std::string& field)>;
  void consolidate_tensor_field(size_t b, const std::string& field, const PieceEntry& entry,
                                optim::StateDict& out) const;
  void consolidate_scalar_field(size_t b, const std::string& field, const PieceEntry& entry,
                                optim::StateDict& out) const;
  Tensor piece_grad(const ZeroPiece& piece) const;
  void gather_parameters(size_t b, Tensor& body);  // step's copy-out, after body's all-gather

  std::shared_ptr<DistributedDataParallel> ddp_;
  std::shared_ptr<ProcessGroup> pg_;
  std::vector<std::vector<Tensor>> groups_;  // the model's parameters, in full's groups
  std::vector<Tensor> all_;                  // every parameter, in full numbering (group after group)
  std::vector<Tensor> flat_;                 // the same, flattened views
  std::vector<Bucket> buckets_;
  std::vector<ZeroPiece> pieces_;
  std::vector<int64_t> inner_piece_;         // inner parameter index -> piece, or -1 for a placeholder
  std::vector<size_t> inner_group_size_;
  std::unique_ptr<optim::Optimizer> inner_;
  int stage_ = 1;
};

}  // namespace mt::dist
