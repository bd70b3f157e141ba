// ZeroRedundancyOptimizer's state dicts (see zero.h): consolidating the shards into the state a plain
// optimizer would have, and cutting this rank's pieces out of such a state.
//
// Note [Consolidated ZeRO state]: the inner optimizer numbers its parameters by piece; the
// consolidated dict numbers them like `full` (state.<i>.<field>, shaped like parameter i). For
// every bucket and every tensor field (in name order, the same on every rank), a bucket-sized flat
// buffer gets this rank's pieces' values, its body is all-gathered in place (each rank contributes
// its shard; the tail is the same on every rank), and each parameter's part is copied out. Scalar
// fields (Adam's step) are the same for every piece of a parameter; a parameter with no piece on
// this rank takes the value of one in the same bucket (every parameter of a DDP bucket steps
// together). Every rank ends with the whole state, so any rank can save it; it costs the whole
// state's memory for the moment of the checkpoint.
#include <set>
#include <string>

#include "distributed/zero/detail/state_keys.h"
#include "distributed/zero/zero.h"
#include "tensor/raw_ops.h"

namespace mt::dist {

namespace {

using detail::is_count_key;
using detail::split_state_key;
const std::string& kState = detail::kStateKey;

size_t group_of_key(const std::string& key) { return detail::group_of_key(key, "ZeroRedundancyOptimizer"); }

// Every rank must gather the same fields (a rank with state and one without would not pair up).
void check_same_fields(ProcessGroup& pg, const std::set<std::string>& tensor_fields) {
  const auto n = static_cast<int64_t>(tensor_fields.size());
  Tensor counts = from_vector(std::vector<int64_t>{n, -n}, {2}).to(pg.device());
  pg.allreduce(counts, ReduceOp::Max)->wait();
  const std::vector<int64_t> c = counts.to(kCPU).to_vector<int64_t>();
  MT_CHECK(c[0] == -c[1], "ZeroRedundancyOptimizer::state_dict on rank ", pg.rank(), ": the ranks hold state "
           "for different numbers of fields (", -c[1], " to ", c[0], "); every rank must have stepped alike");
}

}  // namespace

ZeroRedundancyOptimizer::StateFields ZeroRedundancyOptimizer::state_fields(const optim::StateDict& inner, optim::StateDict& out) const {
  StateFields fields;
  for (const auto& [key, value] : inner) {
    size_t j = 0;
    std::string field;
    if (!split_state_key(key, j, field)) {
      // param_groups.<g>.<name>: the hyperparameters as they are, the counts as `full` counts.
      const bool count = is_count_key(key);
      out[key] = count ? optim::detail::scalar_entry(static_cast<double>(groups_.at(group_of_key(key)).size())) : value;
      continue;
    }
    (value.dim() == 0 ? fields.scalars : fields.tensors).insert(field);
  }
  return fields;
}

// Note [Consolidated ZeRO state], step by step: per bucket, each tensor field is laid out flat like
// the bucket, this rank fills its pieces, and one all-gather of the shards completes it on every rank
// (the tails are alike everywhere); each scalar field (a step count) is the same for every piece of
// a bucket, so any piece's value stands for the parameters this rank holds no piece of.
optim::StateDict ZeroRedundancyOptimizer::state_dict() const {
  const optim::StateDict inner = inner_->state_dict();
  optim::StateDict out;
  const StateFields fields = state_fields(inner, out);
  check_same_fields(*pg_, fields.tensors);
  std::vector<size_t> inner_of(pieces_.size());  // inner index of each piece, to find its entries
  for (size_t j = 0; j < inner_piece_.size(); ++j)
    if (inner_piece_[j] >= 0) inner_of[static_cast<size_t>(inner_piece_[j])] = j;
  const PieceEntry entry = [&](size_t piece, const std::string& field) -> const Tensor* {
    const auto it = inner.find(kState + std::to_string(inner_of[piece]) + "." + field);
    return it == inner.end() ? nullptr : &it->second;
  };
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (const std::string& field : fields.tensors) consolidate_tensor_field(b, field, entry, out);
    for (const std::string& field : fields.scalars) consolidate_scalar_field(b, field, entry, out);
  }
  return out;
}

void ZeroRedundancyOptimizer::consolidate_tensor_field(size_t b, const std::string& field, const PieceEntry& entry,
                                                       optim::StateDict& out) const {
  const Bucket& bucket = buckets_[b];
  const Tensor& param = all_[bucket.params.front()];
  Tensor flat = zeros({bucket.split.numel}, {.dtype = param.dtype(), .device = param.device()});
  for (size_t p = 0; p < pieces_.size(); ++p) {
    if (pieces_[p].bucket != b) continue;
    const Tensor* value = entry(p, field);
    MT_CHECK(value != nullptr, "ZeroRedundancyOptimizer::state_dict: piece ", p, " has no '", field, "'");
    raw::copy_(raw::narrow(flat, 0, pieces_[p].bucket_offset, pieces_[p].numel), *value);
  }
  if (bucket.split.shard > 0) {
    Tensor body = raw::narrow(flat, 0, 0, bucket.split.body);
    const Tensor mine = raw::narrow(body, 0, pg_->rank() * bucket.split.shard, bucket.split.shard);
    pg_->allgather_into(body, mine)->wait();
  }
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    const size_t i = bucket.params[k];
    const Tensor part = raw::narrow(flat, 0, bucket.offsets[k], flat_[i].numel());
    out[kState + std::to_string(i) + "." + field] = raw::clone(raw::view(part, all_[i].sizes()));
  }
}

void ZeroRedundancyOptimizer::consolidate_scalar_field(size_t b, const std::string& field, const PieceEntry& entry,
                                                       optim::StateDict& out) const {
  const Bucket& bucket = buckets_[b];
  const Tensor* any = nullptr;  // a value of this bucket's pieces on this rank
  for (size_t p = 0; p < pieces_.size() && !any; ++p)
    if (pieces_[p].bucket == b) any = entry(p, field);
  if (!any) return;
  for (size_t k = 0; k < bucket.params.size(); ++k) {
    const Tensor* own = nullptr;
    for (size_t p = 0; p < pieces_.size() && !own; ++p)
      if (pieces_[p].param == bucket.params[k]) own = entry(p, field);
    out[kState + std::to_string(bucket.params[k]) + "." + field] = raw::clone(own ? *own : *any);
  }
}

// The inner optimizer's entries of piece p, renamed to `full`'s parameter: the tensor fields as the
// piece's range of the parameter, the scalar ones (the same for every piece of a parameter) once.
LocalShard ZeroRedundancyOptimizer::local_state() const {
  const optim::StateDict inner = inner_->state_dict();
  LocalShard out;
  state_fields(inner, out.replicated);
  std::set<std::string> scalars;  // the scalar entries already taken
  for (size_t j = 0; j < inner_piece_.size(); ++j) {
    if (inner_piece_[j] < 0) continue;
    const ZeroPiece& piece = pieces_[static_cast<size_t>(inner_piece_[j])];
    const std::string from = kState + std::to_string(j) + ".";
    for (auto it = inner.lower_bound(from); it != inner.end() && it->first.rfind(from, 0) == 0; ++it) {
      const std::string name = kState + std::to_string(piece.param) + "." + it->first.substr(from.size());
      const Tensor& value = it->second;
      if (value.dim() == 0) {
        if (scalars.insert(name).second) out.pieces.push_back({.name = name, .shape = {}, .offset = 0,
                                                                .data = raw::reshape(value, {1})});
        continue;
      }
      out.pieces.push_back({.name = name, .shape = all_[piece.param].sizes(), .offset = piece.param_offset,
                            .data = raw::reshape(value, {value.numel()})});
    }
  }
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const optim::StateDict& state) {
  optim::StateDict inner;
  size_t total = 0;
  for (const auto& g : groups_) total += g.size();
  for (const auto& [key, value] : state) {
    size_t i = 0;
    std::string field;
    if (split_state_key(key, i, field)) {
      MT_CHECK(i < total, "ZeroRedundancyOptimizer::load_state_dict: '", key, "' is for parameter ", i,
               ", the optimizer has ", total);
      continue;
    }
    if (!is_count_key(key)) {
      inner[key] = value;
      continue;
    }
    const size_t g = group_of_key(key);
    MT_CHECK(g < groups_.size(), "ZeroRedundancyOptimizer::load_state_dict: '", key, "': there are ", groups_.size(),
             " param groups");
    MT_CHECK(value.item() == static_cast<double>(groups_[g].size()), "ZeroRedundancyOptimizer::load_state_dict: "
             "param group ", g, " has ", value.item(), " parameters in the state dict, ", groups_[g].size(), " here");
    inner[key] = optim::detail::scalar_entry(static_cast<double>(inner_group_size_[g]));
  }
  for (size_t j = 0; j < inner_piece_.size(); ++j) {
    if (inner_piece_[j] < 0) continue;
    const ZeroPiece& piece = pieces_[static_cast<size_t>(inner_piece_[j])];
    const std::string from = kState + std::to_string(piece.param) + ".";
    for (auto it = state.lower_bound(from); it != state.end() && it->first.rfind(from, 0) == 0; ++it) {
      const std::string to = kState + std::to_string(j) + "." + it->first.substr(from.size());
      const Tensor& value = it->second;
      if (value.dim() == 0) {
        inner[to] = value;
        continue;
      }
      MT_CHECK(value.numel() == flat_[piece.param].numel(), "ZeroRedundancyOptimizer::load_state_dict: '", it->first,
               "' has ", value.numel(), " elements, parameter ", piece.param, " has ", flat_[piece.param].numel());
      inner[to] = raw::clone(raw::narrow(raw::reshape(value, {value.numel()}), 0, piece.param_offset, piece.numel));
    }
  }
  inner_->load_state_dict(inner);  // strict: shapes and counts checked there
}

}  // namespace mt::dist
