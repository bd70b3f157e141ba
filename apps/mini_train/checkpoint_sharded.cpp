// Sharded checkpoints for --zero 1|2|3 (see checkpoint_sharded.h).
#include "apps/mini_train/checkpoint_sharded.h"

#include <algorithm>
#include <map>
#include <vector>

#include "distributed/zero/fsdp.h"
#include "distributed/zero/zero.h"
#include "nn/sharded_checkpoint.h"
#include "tensor/raw_ops.h"

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

// Every name the model's state_dict() gives each parameter, by the parameter's first name (that of
// named_parameters, which FSDP's pieces carry): a tied weight has two. And the buffers, by name.
struct ModelNames {
  std::map<std::string, std::vector<std::string>> of_param;
  NamedTensors buffers;
};

ModelNames model_names(const nn::Module& model) {
  std::map<const TensorImpl*, std::string> first;
  for (const auto& [name, p] : model.named_parameters()) first.emplace(p.unsafe_impl(), name);
  ModelNames out;
  for (const auto& [path, m] : model.named_modules()) {
    const std::string prefix = path.empty() ? "" : path + ".";
    for (const auto& [name, p] : m->named_parameters(/*recurse=*/false))
      out.of_param[first.at(p.unsafe_impl())].push_back(prefix + name);
    for (const auto& [name, b] : m->named_buffers(/*recurse=*/false)) out.buffers.emplace_back(prefix + name, b);
  }
  return out;
}

// --zero 3: this rank's pieces of the parameters (FSDP's shards, under every name of each) and of the
// optimizer state, none gathered (not a collective). Scalars and param_groups.* entries come whole
// from every rank, alike (Note [Sharded checkpoints] takes any one copy).
std::vector<ShardPiece> fsdp_pieces(const Run& r) {
  const ModelNames names = model_names(*r.model);
  std::vector<ShardPiece> pieces;
  for (const ShardPiece& s : r.fsdp->local_state_dict()) {
    const auto named = names.of_param.find(s.name);
    MT_CHECK(named != names.of_param.end(), "--checkpoint-format sharded: FSDP's parameter '", s.name,
             "' is not one of the model's");
    for (const std::string& name : named->second)
      pieces.push_back({.name = "model/" + name, .shape = s.shape, .offset = s.offset, .data = s.data});
  }
  const auto* opt = dynamic_cast<const dist::FsdpOptimizer*>(r.opt.get());
  MT_CHECK(opt != nullptr, "--checkpoint-format sharded: this --zero 3 run's optimizer is not FSDP's");
  for (const ShardPiece& s : opt->local_state_dict()) {
    const bool state = s.name.rfind("state.", 0) == 0;  // a piece of a parameter's state, else whole
    pieces.push_back({.name = "optimizer/" + s.name, .shape = state ? s.shape : s.data.sizes(), .offset = s.offset,
                      .data = raw::reshape(s.data, {s.data.numel()})});
  }
  return pieces;
}

}  // namespace

bool sharded_checkpoints(const Run& r) { return r.o.checkpoint_format == "sharded"; }

const dist::ZeroRedundancyOptimizer& zero_optimizer(const Run& r) {
  const auto* zero = dynamic_cast<const dist::ZeroRedundancyOptimizer*>(r.opt.get());
  MT_CHECK(zero != nullptr, "--checkpoint-format sharded: this run's optimizer is not sharded (--zero 1|2)");
  return *zero;
}

void save_sharded(const Run& r, const std::string& path, const Checkpoint& c) {
  std::vector<ShardPiece> pieces;
  int stage = 3;
  if (r.fsdp) {  // --zero 3: every rank its pieces of the weights and of the optimizer state
    if (r.lead) {  // what every rank holds alike: the buffers, the counters, the scheduler, the progress
      Checkpoint whole = c;
      whole.model = model_names(*r.model).buffers;
      pieces = whole_pieces(whole);
    }
    for (ShardPiece& p : fsdp_pieces(r)) pieces.push_back(std::move(p));
  } else {  // --zero 1|2: the weights once, from rank 0, and every rank's optimizer pieces
    const dist::ZeroRedundancyOptimizer& zero = zero_optimizer(r);
    stage = zero.stage();
    LocalShard local = zero.local_state();  // not a collective
    if (r.lead) {
      Checkpoint whole = c;
      whole.optimizer = std::move(local.replicated);
      pieces = whole_pieces(whole);
    }
    for (ShardPiece& p : local.pieces) pieces.push_back({.name = "optimizer/" + p.name, .shape = p.shape,
                                                         .offset = p.offset, .data = std::move(p.data)});
  }
  const std::string table = save_checkpoint_shard(path, r.rank, r.world, pieces);  // (1) all ranks at once
  const std::vector<std::string> tables = gather_strings(*r.pg, table);           // (2) every shard written
  if (r.lead) save_sharded_index(path, c, stage, tables);                          // (3) the index
}

}  // namespace mt::app
