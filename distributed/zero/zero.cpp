// ZeroRedundancyOptimizer (see zero.h): construct (find DDP's buckets, cut this rank's pieces,
// build the inner optimizer over them), step (inner step, then all-gather), for stages 1 and 2. The
// state dicts are in zero_state.cpp.
#include "distributed/zero/zero.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tensor/memory.h"
#include "tensor/raw_ops.h"

namespace mt::dist {

// Note [ZeRO communication]: a ring all-reduce IS a reduce-scatter followed by an all-gather; each
// moves (N-1)/N of the buffer in and out of every rank. ZeRO-1 only does the optimizer step in
// between: the reduce-scatter leaves each rank the averaged gradient of its shard, the rank updates
// that shard, and the all-gather sends the updated PARAMETERS around instead of the reduced
// gradients. So a step moves 2·(N-1)/N·P elements per rank for P parameters, the bytes of one
// all-reduce, plus a few elements per bucket (the tail and the desync guard, all-reduced). What it
// costs is latency: two collectives per bucket instead of one, and the all-gather runs after the
// optimizer step, where nothing of backward is left to hide it behind.
//
// Note [Where ZeRO's memory goes]: per rank, for P parameters of float32 and world N,
//   parameters   4P bytes      every rank keeps the whole model (forward and backward need it)
//   gradients    stage 1: 4P bytes, DDP's buckets, whole: the reduce-scatter is in place.
//                stage 2: 4P/N bytes between steps, the kept shards (plus the tails, under N
//                elements per bucket); during backward also the buckets between their first
//                gradient and their reduce-scatter's end (Note [ZeRO-2: only the shard stays])
//   optimizer    4P·k/N bytes  k state buffers per parameter (SGD momentum 1, Adam 2), only for
//                this rank's shard (plus the tails)
// against 4P·(2 + k) for plain DDP. The pieces the inner optimizer updates are views of the
// parameters and of the buckets (stage 1) or of the kept shards (stage 2). Stage 1's all-gather
// lands in the buckets themselves (their gradients are spent by then), from where each parameter
// copies its part; stage 2 has no buckets left, so its step allocates one bucket-sized buffer per
// all-gather and keeps at most two alive, the next one's all-gather running while this one's is
// copied out. With Adam at N = 4 that is 4P + 4P + 2P = 10P bytes (stage 1) or 4P + P + 2P = 7P
// bytes (stage 2) instead of 16P.

namespace {

// The default Factory: the kind of `full`, with full's groups' options.
template <typename Opt>
std::unique_ptr<optim::Optimizer> rebuild(const Opt& full, const std::vector<std::vector<Tensor>>& groups) {
  auto opt = std::make_unique<Opt>(groups[0], full.options(0));
  for (size_t g = 1; g < groups.size(); ++g) opt->add_param_group(groups[g], full.options(g));
  return opt;
}

}  // namespace

std::unique_ptr<optim::Optimizer> detail::make_like(const optim::Optimizer& full,
                                                    const std::vector<std::vector<Tensor>>& groups) {
  if (const auto* sgd = dynamic_cast<const optim::SGD*>(&full)) return rebuild(*sgd, groups);
  if (const auto* adamw = dynamic_cast<const optim::AdamW*>(&full)) return rebuild(*adamw, groups);
  if (const auto* adam = dynamic_cast<const optim::Adam*>(&full)) return rebuild(*adam, groups);
  MT_FAIL("ZeRO: no default way to rebuild this optimizer over shards (SGD, Adam and AdamW are known); pass a "
          "Factory");
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::shared_ptr<DistributedDataParallel> ddp,
                                                 std::unique_ptr<optim::Optimizer> full, ZeroOptions options)
    : ddp_(std::move(ddp)), stage_(options.stage) {
  MT_CHECK(ddp_ != nullptr && full != nullptr, "ZeroRedundancyOptimizer: needs a DDP model and an optimizer");
  MT_CHECK(stage_ == 1 || stage_ == 2, "ZeroRedundancyOptimizer: stage ", stage_, " is not 1 or 2 (ZeRO-3 is "
           "FullyShardedDataParallel with FsdpOptimizer, distributed/zero/fsdp.h)");
  MT_CHECK(ddp_->stats().comm_hook == "allreduce", "ZeroRedundancyOptimizer: the DDP model has the '",
           ddp_->stats().comm_hook, "' comm hook; ZeRO reduce-scatters the gradients through a hook of its own, "
           "and compression hooks (fp16, bf16) do not combine with it");
  pg_ = ddp_->process_group();
  std::vector<size_t> group_of;
  for (size_t g = 0; g < full->num_param_groups(); ++g) {
    groups_.push_back(full->params(g));
    for (const Tensor& p : full->params(g)) {
      MT_CHECK(p.is_contiguous(), "ZeroRedundancyOptimizer: parameter ", flat_.size(), " is not contiguous");
      flat_.push_back(raw::view(p, {p.numel()}));
      group_of.push_back(g);
    }
  }
  all_ = full->parameters();
  build_buckets();
  build_pieces();
  std::vector<std::vector<Tensor>> inner_groups(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t j = 0; j < pieces_.size(); ++j) {
      const ZeroPiece& piece = pieces_[j];
      if (group_of[piece.param] != g) continue;
      Tensor view = raw::narrow(flat_[piece.param], 0, piece.param_offset, piece.numel);
      view.set_grad(piece_grad(piece));
      inner_groups[g].push_back(view);
      inner_piece_.push_back(static_cast<int64_t>(j));
    }
    if (inner_groups[g].empty()) {  // no piece of this group here: a placeholder that never has a gradient
      inner_groups[g].push_back(empty({0}, {.dtype = flat_.front().dtype(), .device = flat_.front().device()}));
      inner_piece_.push_back(-1);
    }
    inner_group_size_.push_back(inner_groups[g].size());
  }
  inner_ = options.make ? options.make(inner_groups) : detail::make_like(*full, inner_groups);
  MT_CHECK(inner_->num_param_groups() == groups_.size(), "ZeroRedundancyOptimizer: the factory made ",
           inner_->num_param_groups(), " param groups, expected ", groups_.size());
  load_state_dict(full->state_dict());  // hyperparameters, and any state `full` already had
  std::vector<Tensor> kept;  // stage 2's (Note [ZeRO-2: only the shard stays])
  for (const Bucket& b : buckets_)
    if (b.kept.defined()) kept.push_back(b.kept);
  ddp_->register_comm_hook(std::make_shared<ZeroHook>(std::move(kept)));
}

// DDP's buckets as its reducer laid them out (DistributedDataParallel::bucket_layout): each
// parameter's gradient is a view of its bucket (Note [Gradients are bucket views]), and the hook
// reduce-scatters the bucket, so this rank's shard of each bucket is what it steps. Stage 2 keeps
// that shard, and the tail, in a buffer of its own instead (Note [ZeRO-2: only the shard stays]).
void ZeroRedundancyOptimizer::build_buckets() {
  size_t bucketed = 0;
  for (const DistributedDataParallel::BucketLayout& layout : ddp_->bucket_layout()) {
    const ZeroShard split = zero_shard(layout.numel, pg_->size());
    Bucket b{.buffer = stage_ == 1 ? layout.buffer : Tensor(), .kept = Tensor(), .split = split, .params = {},
             .offsets = layout.offsets};
    if (stage_ == 2) {
      MemoryKindGuard kind(MemoryKind::kGradients);  // Note [Memory kinds]
      b.kept = zeros({split.shard + split.numel - split.body},
                     {.dtype = layout.parameters.front().dtype(), .device = layout.parameters.front().device()});
    }
    for (size_t k = 0; k < layout.parameters.size(); ++k) {
      const Tensor& param = layout.parameters[k];
      const auto at = std::find_if(all_.begin(), all_.end(), [&](const Tensor& p) { return p.is_same(param); });
      MT_CHECK(at != all_.end(), "ZeroRedundancyOptimizer: parameter '", layout.names[k], "' of the DDP model is "
               "not in the optimizer; give the optimizer every trainable parameter");
      b.params.push_back(static_cast<size_t>(at - all_.begin()));
    }
    bucketed += b.params.size();
    buckets_.push_back(std::move(b));
  }
  MT_CHECK(bucketed == all_.size(), "ZeroRedundancyOptimizer: the optimizer has ", all_.size(), " parameters, the "
           "DDP buckets ", bucketed, "; a parameter without requires_grad cannot be in the optimizer");
}

// This rank's pieces: each parameter's overlap with this rank's shard and with the tail of its
// bucket (Note [ZeRO shards]), in bucket order.
void ZeroRedundancyOptimizer::build_pieces() {
  const std::vector<Tensor>& all = all_;
  const int64_t rank = pg_->rank();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    const ZeroShard& s = bucket.split;
    const std::pair<int64_t, int64_t> owned[2] = {{rank * s.shard, (rank + 1) * s.shard}, {s.body, s.numel}};
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const int64_t begin = bucket.offsets[k], end = begin + all[bucket.params[k]].numel();
      for (const auto& [lo, hi] : owned) {
        const int64_t a = std::max(begin, lo), z = std::min(end, hi);
        if (a < z)
          pieces_.push_back({.param = bucket.params[k], .bucket = b, .param_offset = a - begin, .bucket_offset = a,
                             .numel = z - a});
      }
    }
  }
}

// Where a piece's reduced gradient is: its place in the bucket (stage 1), or in the kept
// [ shard | tail ] (stage 2).
Tensor ZeroRedundancyOptimizer::piece_grad(const ZeroPiece& piece) const {
  const Bucket& bucket = buckets_[piece.bucket];
  if (stage_ == 1) return raw::narrow(bucket.buffer, 0, piece.bucket_offset, piece.numel);
  const ZeroShard& s = bucket.split;
  const int64_t at = piece.bucket_offset < s.body ? piece.bucket_offset - pg_->rank() * s.shard
                                                  : s.shard + piece.bucket_offset - s.body;
  return raw::narrow(bucket.kept, 0, at, piece.numel);
}

double ZeroRedundancyOptimizer::clip_grad_norm(double max_norm) {
  MT_CHECK(max_norm >= 0, "ZeroRedundancyOptimizer::clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> counted, all;
  for (const ZeroPiece& piece : pieces_) {
    all.push_back(piece_grad(piece));
    const bool tail = piece.bucket_offset >= buckets_[piece.bucket].split.body;
    if (!tail || pg_->rank() == 0) counted.push_back(all.back());
  }
  double squares = 0;  // this rank's part of the sum of squares, in double like clip_grad_norm_
  for (const Tensor& g : counted) squares += raw::sum(raw::unary(UnaryOp::Pow, raw::cast(g, kFloat64), 2.0)).item();
  Tensor sum = full({1}, squares, {.dtype = kFloat64, .device = pg_->device()});
  pg_->allreduce(sum, ReduceOp::Sum)->wait();
  const double total = std::sqrt(sum.to(kCPU).item());
  const double coef = max_norm / (total + 1e-6);  // as clip_grad_norm_
  if (!(coef >= 1))
    for (const Tensor& g : all) raw::unary_(UnaryOp::MulScalar, g, coef);
  return total;
}

std::vector<Tensor> ZeroRedundancyOptimizer::step_gradients() const {
  std::vector<Tensor> grads;
  for (const ZeroPiece& piece : pieces_) grads.push_back(piece_grad(piece));
  return grads;
}

const std::vector<Tensor>& ZeroRedundancyOptimizer::params(size_t group) const {
  MT_CHECK(group < groups_.size(), "ZeroRedundancyOptimizer: no param group ", group, " (there are ",
           groups_.size(), ")");
  return groups_[group];
}

// The inner step updates this rank's pieces in place (they are views of the parameters). Then each
// bucket's body carries the parameters: this rank's shard is copied in, all-gathered in place, and
// every parameter copies its part back out (Note [Where ZeRO's memory goes]). The all-gathers are
// issued in bucket order on every rank: stage 1's all together, into the buckets; stage 2's into
// buffers of the step's own, the next one issued before this one is waited for, so at most two live.
void ZeroRedundancyOptimizer::step() {
  inner_->step();
  NoGradGuard no_grad;
  const int rank = pg_->rank();
  const size_t n = buckets_.size(), ahead = stage_ == 1 ? n : 1;
  std::vector<Tensor> bodies(n);
  std::vector<std::shared_ptr<Work>> works(n);
  const auto issue = [&](size_t b) {
    const Bucket& bucket = buckets_[b];
    if (bucket.split.shard == 0) return;
    const Tensor& param = all_[bucket.params.front()];
    MemoryKindGuard kind(MemoryKind::kParameters);  // parameters on their way round (Note [Memory kinds])
    bodies[b] = stage_ == 1 ? raw::narrow(bucket.buffer, 0, 0, bucket.split.body)
                            : empty({bucket.split.body}, {.dtype = param.dtype(), .device = param.device()});
    for (const ZeroPiece& piece : pieces_)  // the shard's pieces into the shard (tails stay where they are)
      if (piece.bucket == b && piece.bucket_offset < bucket.split.body)
        raw::copy_(raw::narrow(bodies[b], 0, piece.bucket_offset, piece.numel),
                   raw::narrow(flat_[piece.param], 0, piece.param_offset, piece.numel));
    const Tensor mine = raw::narrow(bodies[b], 0, rank * bucket.split.shard, bucket.split.shard);
    works[b] = pg_->allgather_into(bodies[b], mine);
  };
  size_t issued = 0;
  for (size_t b = 0; b < n; ++b) {
    for (; issued < n && issued <= b + ahead; ++issued) issue(issued);
    if (works[b]) works[b]->wait();
    gather_parameters(b, bodies[b]);
    bodies[b] = Tensor();  // stage 2: its buffer goes back to the allocator
  }
}

// Every parameter of bucket b copies its part of the all-gathered body (undefined: no body, the
// bucket is all tail) back; stage 1's bucket is then zeroed (the gradients are spent, and what is
// left there are parameters).
void ZeroRedundancyOptimizer::gather_parameters(size_t b, Tensor& body) {
  Bucket& bucket = buckets_[b];
  for (size_t k = 0; k < bucket.params.size() && body.defined(); ++k) {
    const int64_t begin = bucket.offsets[k];
    const int64_t count = std::min(flat_[bucket.params[k]].numel(), bucket.split.body - begin);
    if (count > 0) raw::copy_(raw::narrow(flat_[bucket.params[k]], 0, 0, count), raw::narrow(body, 0, begin, count));
  }
  if (stage_ == 1) raw::fill_(bucket.buffer, 0.0);
}

}  // namespace mt::dist
