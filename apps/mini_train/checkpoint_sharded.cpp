// Sharded checkpoints for --zero 1|2 (see checkpoint_sharded.h).
#include "apps/mini_train/checkpoint_sharded.h"

#include <algorithm>
#include <vector>

#include "distributed/zero/zero.h"
#include "nn/sharded_checkpoint.h"

namespace mt::app {

namespace {

// Every rank's `mine`, on every rank: one all-gather of the lengths, one of the padded bytes (as
// int64 values, a dtype every backend gathers). It is also step (2) of Note [Sharded checkpoints]:
// no rank returns before every rank has called it, that is, written its shard.
std::vector<std::string> gather_strings(dist::ProcessGroup& pg, const std::string& mine) {
  std::vector<Tensor> lengths;
  pg.allgather(lengths, from_vector(std::vector<int64_t>{static_cast<int64_t>(mine.size())}, {1}).to(pg.device()))->wait();
  int64_t longest = 0;
  for (const Tensor& n : lengths) longest = std::max(longest, n.to(kCPU).to_vector<int64_t>()[0]);
  std::vector<int64_t> padded(static_cast<size_t>(std::max<int64_t>(longest, 1)), 0);
  std::copy(mine.begin(), mine.end(), padded.begin());
  std::vector<Tensor> all;
  pg.allgather(all, from_vector(padded, {static_cast<int64_t>(padded.size())}).to(pg.device()))->wait();
  std::vector<std::string> out;
  for (size_t r = 0; r < all.size(); ++r) {
    const std::vector<int64_t> chars = all[r].to(kCPU).to_vector<int64_t>();
    const auto n = static_cast<size_t>(lengths[r].to(kCPU).to_vector<int64_t>()[0]);
    out.emplace_back(chars.begin(), chars.begin() + static_cast<std::ptrdiff_t>(n));
  }
  return out;
}

}  // namespace

bool sharded_checkpoints(const Run& r) { return r.o.checkpoint_format == "sharded"; }

const dist::ZeroRedundancyOptimizer& zero_optimizer(const Run& r) {
  const auto* zero = dynamic_cast<const dist::ZeroRedundancyOptimizer*>(r.opt.get());
  MT_CHECK(zero != nullptr, "--checkpoint-format sharded: this run's optimizer is not sharded (--zero 1|2)");
  return *zero;
}

void save_sharded(const Run& r, const std::string& path, const Checkpoint& c) {
  const dist::ZeroRedundancyOptimizer& zero = zero_optimizer(r);
  LocalShard local = zero.local_state();  // not a collective
  std::vector<ShardPiece> pieces;
  if (r.lead) {  // the weights once, and what every rank holds alike
    Checkpoint whole = c;
    whole.optimizer = std::move(local.replicated);
    pieces = whole_pieces(whole);
  }
  for (ShardPiece& p : local.pieces) pieces.push_back({.name = "optimizer/" + p.name, .shape = p.shape,
                                                       .offset = p.offset, .data = std::move(p.data)});
  const std::string table = save_checkpoint_shard(path, r.rank, r.world, pieces);  // (1) all ranks at once
  const std::vector<std::string> tables = gather_strings(*r.pg, table);           // (2) every shard written
  if (r.lead) save_sharded_index(path, c, zero.stage(), tables);                   // (3) the index
}

}  // namespace mt::app
