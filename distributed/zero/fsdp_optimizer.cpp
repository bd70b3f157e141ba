// FsdpOptimizer (see fsdp.h): `full` rebuilt over this rank's pieces of the units' shards; the step,
// the clip over the shards, and the consolidated state dicts (Note [Consolidated ZeRO state]).
#include <algorithm>
#include <cmath>
#include <set>

#include "autograd/grad_mode.h"
#include "distributed/zero/detail/state_keys.h"
#include "distributed/zero/fsdp.h"
#include "tensor/raw_ops.h"

namespace mt::dist {

namespace {

using detail::is_count_key;
using detail::split_state_key;
const std::string& kState = detail::kStateKey;

size_t group_of_key(const std::string& key) { return detail::group_of_key(key, "FsdpOptimizer"); }

}  // namespace

FsdpOptimizer::FsdpOptimizer(std::shared_ptr<FullyShardedDataParallel> fsdp, std::unique_ptr<optim::Optimizer> full,
                             ZeroFactory make)
    : fsdp_(std::move(fsdp)) {
  MT_CHECK(fsdp_ != nullptr && full != nullptr, "FsdpOptimizer: needs a FullyShardedDataParallel model and an optimizer");
  pg_ = fsdp_->process_group();
  const NamedTensors& sharded = fsdp_->sharded_parameters();
  std::vector<size_t> group_of;
  std::vector<size_t> index_of(sharded.size(), SIZE_MAX);  // fsdp index -> full numbering
  for (size_t g = 0; g < full->num_param_groups(); ++g) {
    groups_.push_back(full->params(g));
    for (const Tensor& p : full->params(g)) {
      const auto at = std::find_if(sharded.begin(), sharded.end(), [&](const auto& np) { return np.second.is_same(p); });
      MT_CHECK(at != sharded.end(), "FsdpOptimizer: the optimizer's parameter ", group_of.size(), " is not a parameter "
               "of the FullyShardedDataParallel model");
      index_of[static_cast<size_t>(at - sharded.begin())] = group_of.size();
      group_of.push_back(g);
    }
  }
  for (size_t i = 0; i < sharded.size(); ++i)
    MT_CHECK(index_of[i] != SIZE_MAX, "FsdpOptimizer: parameter '", sharded[i].first, "' is not in the optimizer; give "
             "it every parameter of the model");
  build_pieces(index_of);
  std::vector<std::vector<Tensor>> inner_groups(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t j = 0; j < pieces_.size(); ++j) {
      if (group_of[pieces_[j].param] != g) continue;
      inner_groups[g].push_back(raw::narrow(fsdp_->shard(pieces_[j].unit), 0, pieces_[j].shard_offset, pieces_[j].numel));
      inner_params_.push_back(inner_groups[g].back());
      inner_piece_.push_back(static_cast<int64_t>(j));
    }
    if (inner_groups[g].empty()) {  // no piece of this group on this rank: a placeholder without gradient
      const Tensor& any = groups_[g].front();
      inner_groups[g].push_back(empty({0}, {.dtype = any.dtype(), .device = any.device()}));
      inner_params_.push_back(inner_groups[g].back());
      inner_piece_.push_back(-1);
    }
    inner_group_size_.push_back(inner_groups[g].size());
  }
  inner_ = make ? make(inner_groups) : detail::make_like(*full, inner_groups);
  MT_CHECK(inner_->num_param_groups() == groups_.size(), "FsdpOptimizer: the factory made ", inner_->num_param_groups(),
           " param groups, expected ", groups_.size());
  load_state_dict(full->state_dict());
}

// Each parameter's overlap with this rank's shard of its unit (Note [FSDP shard layout]).
void FsdpOptimizer::build_pieces(const std::vector<size_t>& index_of) {
  const NamedTensors& sharded = fsdp_->sharded_parameters();
  const int64_t rank = pg_->rank();
  for (size_t u = 0; u < fsdp_->units().size(); ++u) {
    const FullyShardedDataParallel::UnitLayout& layout = fsdp_->units()[u];
    const int64_t lo = rank * layout.shard, hi = lo + layout.shard;
    for (size_t k = 0; k < layout.params.size(); ++k) {
      const int64_t begin = layout.offsets[k], end = begin + sharded[layout.params[k]].second.numel();
      const int64_t a = std::max(begin, lo), z = std::min(end, hi);
      if (a < z)
        pieces_.push_back({.param = index_of[layout.params[k]], .unit = u, .param_offset = a - begin,
                           .shard_offset = a - lo, .numel = z - a});
    }
  }
}

// The pieces' gradients are views of their units' reduced shard gradients; a unit with none (no
// synced backward since the last step) leaves its pieces without, so the inner step skips them.
void FsdpOptimizer::step() {
  for (size_t j = 0; j < inner_params_.size(); ++j) {
    if (inner_piece_[j] < 0) continue;
    const Piece& piece = pieces_[static_cast<size_t>(inner_piece_[j])];
    const Tensor& g = fsdp_->shard_grad(piece.unit);
    inner_params_[j].set_grad(g.defined() ? raw::narrow(g, 0, piece.shard_offset, piece.numel) : Tensor());
  }
  inner_->step();
  for (Tensor& p : inner_params_) p.set_grad(Tensor());
  fsdp_->release_gradients();
}

double FsdpOptimizer::clip_grad_norm(double max_norm) {
  MT_CHECK(max_norm >= 0, "FsdpOptimizer::clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  double squares = 0;  // this rank's shards (the padding holds zeros), in double like clip_grad_norm_
  for (size_t u = 0; u < fsdp_->units().size(); ++u) {
    const Tensor& g = fsdp_->shard_grad(u);
    if (g.defined()) squares += raw::sum(raw::unary(UnaryOp::Pow, raw::cast(g, kFloat64), 2.0)).item();
  }
  Tensor sum = full({1}, squares, {.dtype = kFloat64, .device = pg_->device()});
  pg_->allreduce(sum, ReduceOp::Sum)->wait();
  const double total = std::sqrt(sum.to(kCPU).item());
  const double coef = max_norm / (total + 1e-6);  // as clip_grad_norm_
  if (!(coef >= 1))
    for (size_t u = 0; u < fsdp_->units().size(); ++u)
      if (fsdp_->shard_grad(u).defined()) raw::unary_(UnaryOp::MulScalar, fsdp_->shard_grad(u), coef);
  return total;
}

std::vector<Tensor> FsdpOptimizer::step_gradients() const {
  std::vector<Tensor> grads;
  for (size_t u = 0; u < fsdp_->units().size(); ++u)
    if (fsdp_->shard_grad(u).defined()) grads.push_back(fsdp_->shard_grad(u));
  return grads;
}

const std::vector<Tensor>& FsdpOptimizer::params(size_t group) const {
  MT_CHECK(group < groups_.size(), "FsdpOptimizer: no param group ", group, " (there are ", groups_.size(), ")");
  return groups_[group];
}

// Note [Consolidated ZeRO state] for units: per unit and tensor field (in name order, alike on
// every rank), a unit-sized flat buffer gets this rank's pieces in its shard, one all-gather fills
// the rest, and each parameter's part is cut out. Scalar fields (a step count) are alike for every
// piece, since every shard steps every time: any piece's value stands for all.
optim::StateDict FsdpOptimizer::state_dict() const {
  const optim::StateDict inner = inner_->state_dict();
  optim::StateDict out;
  std::set<std::string> tensors, scalars;
  for (const auto& [key, value] : inner) {
    size_t j = 0;
    std::string field;
    if (!split_state_key(key, j, field)) {
      out[key] = is_count_key(key) ? optim::detail::scalar_entry(static_cast<double>(groups_.at(group_of_key(key)).size()))
                               : value;
      continue;
    }
    (value.dim() == 0 ? scalars : tensors).insert(field);
  }
  Tensor fields = from_vector(std::vector<int64_t>{static_cast<int64_t>(tensors.size())}, {1}).to(pg_->device());
  Tensor lowest = fields.clone();
  pg_->allreduce(fields, ReduceOp::Max)->wait();
  MT_CHECK(fields.to(kCPU).item() == lowest.to(kCPU).item(), "FsdpOptimizer::state_dict on rank ", pg_->rank(),
           ": the ranks hold state for different fields; every rank must have stepped alike");
  const auto entry = [&](size_t piece, const std::string& field) -> const Tensor* {
    for (size_t j = 0; j < inner_piece_.size(); ++j)
      if (inner_piece_[j] == static_cast<int64_t>(piece)) {
        const auto it = inner.find(kState + std::to_string(j) + "." + field);
        return it == inner.end() ? nullptr : &it->second;
      }
    return nullptr;
  };
  const NamedTensors& sharded = fsdp_->sharded_parameters();
  const int64_t rank = pg_->rank();
  std::vector<size_t> full_index(sharded.size());  // fsdp index -> full numbering, from the pieces' owners
  for (size_t g = 0, i = 0; g < groups_.size(); ++g)
    for (const Tensor& p : groups_[g]) {
      for (size_t s = 0; s < sharded.size(); ++s)
        if (sharded[s].second.is_same(p)) full_index[s] = i;
      ++i;
    }
  for (size_t u = 0; u < fsdp_->units().size(); ++u) {
    const FullyShardedDataParallel::UnitLayout& layout = fsdp_->units()[u];
    if (layout.numel == 0) continue;
    const Tensor& shard = fsdp_->shard(u);
    for (const std::string& field : tensors) {
      Tensor flat = zeros({layout.shard * pg_->size()}, {.dtype = shard.dtype(), .device = shard.device()});
      for (size_t p = 0; p < pieces_.size(); ++p) {
        if (pieces_[p].unit != u) continue;
        const Tensor* value = entry(p, field);
        MT_CHECK(value != nullptr, "FsdpOptimizer::state_dict: piece ", p, " has no '", field, "'");
        raw::copy_(raw::narrow(flat, 0, rank * layout.shard + pieces_[p].shard_offset, pieces_[p].numel), *value);
      }
      Tensor mine = raw::narrow(flat, 0, rank * layout.shard, layout.shard);
      pg_->allgather_into(flat, mine)->wait();
      for (size_t k = 0; k < layout.params.size(); ++k) {
        const Tensor& param = sharded[layout.params[k]].second;
        out[kState + std::to_string(full_index[layout.params[k]]) + "." + field] =
            raw::clone(raw::view(raw::narrow(flat, 0, layout.offsets[k], param.numel()), param.sizes()));
      }
    }
  }
  for (const std::string& field : scalars) {
    const Tensor* any = nullptr;
    for (size_t p = 0; p < pieces_.size() && !any; ++p) any = entry(p, field);
    if (!any) continue;
    for (size_t s = 0; s < sharded.size(); ++s) out[kState + std::to_string(full_index[s]) + "." + field] = raw::clone(*any);
  }
  return out;
}

std::vector<ShardPiece> FsdpOptimizer::local_state_dict() const {
  const optim::StateDict inner = inner_->state_dict();
  std::vector<ShardPiece> out;
  std::vector<Shape> shapes;  // by full index
  for (const auto& group : groups_)
    for (const Tensor& p : group) shapes.push_back(p.sizes());
  for (const auto& [key, value] : inner) {
    size_t j = 0;
    std::string field;
    if (!split_state_key(key, j, field)) {
      const bool count = is_count_key(key);
      out.push_back({.name = key, .shape = {}, .offset = 0,
                     .data = count ? optim::detail::scalar_entry(static_cast<double>(groups_.at(group_of_key(key)).size()))
                                     : value});
      continue;
    }
    const Piece& piece = pieces_[static_cast<size_t>(inner_piece_[j])];
    const std::string name = kState + std::to_string(piece.param) + "." + field;
    if (value.dim() == 0) out.push_back({.name = name, .shape = {}, .offset = 0, .data = value});
    else out.push_back({.name = name, .shape = shapes[piece.param], .offset = piece.param_offset, .data = value});
  }
  return out;
}

// This rank's pieces out of a consolidated (or plain) state dict of any world size.
void FsdpOptimizer::load_state_dict(const optim::StateDict& state) {
  optim::StateDict inner;
  size_t total = 0;
  for (const auto& g : groups_) total += g.size();
  for (const auto& [key, value] : state) {
    size_t i = 0;
    std::string field;
    if (split_state_key(key, i, field)) {
      MT_CHECK(i < total, "FsdpOptimizer::load_state_dict: '", key, "' is for parameter ", i, ", the optimizer has ", total);
      continue;
    }
    if (!is_count_key(key)) {
      inner[key] = value;
      continue;
    }
    const size_t g = group_of_key(key);
    MT_CHECK(g < groups_.size(), "FsdpOptimizer::load_state_dict: '", key, "': there are ", groups_.size(), " param groups");
    MT_CHECK(value.item() == static_cast<double>(groups_[g].size()), "FsdpOptimizer::load_state_dict: param group ", g,
             " has ", value.item(), " parameters in the state dict, ", groups_[g].size(), " here");
    inner[key] = optim::detail::scalar_entry(static_cast<double>(inner_group_size_[g]));
  }
  for (size_t j = 0; j < inner_piece_.size(); ++j) {
    if (inner_piece_[j] < 0) continue;
    const Piece& piece = pieces_[static_cast<size_t>(inner_piece_[j])];
    const std::string from = kState + std::to_string(piece.param) + ".";
    for (auto it = state.lower_bound(from); it != state.end() && it->first.rfind(from, 0) == 0; ++it) {
      const std::string to = kState + std::to_string(j) + "." + it->first.substr(from.size());
      const Tensor& value = it->second;
      inner[to] = value.dim() == 0 ? value
                                   : raw::clone(raw::narrow(raw::reshape(value, {value.numel()}), 0, piece.param_offset,
                                                            piece.numel));
    }
  }
  inner_->load_state_dict(inner);  // strict: shapes and counts checked there
}

}  // namespace mt::dist
