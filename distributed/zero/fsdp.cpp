// FullyShardedDataParallel (see fsdp.h): construct (choose the units, flatten and shard them), the
// forward with each unit gathered and freed around its own, summon_full_params and the state dicts.
// The backward half (pre-backward gather, reduce-scatter, finalize, no_sync) is fsdp_backward.cpp.
#include "distributed/zero/fsdp.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "autograd/grad_mode.h"
#include "distributed/ddp/detail/buffer_sync.h"
#include "distributed/ddp/detail/ddp_fingerprint.h"
#include "distributed/zero/detail/fsdp_unit.h"
#include "nn/module_dict.h"
#include "nn/module_list.h"
#include "nn/transformer.h"
#include "tensor/backend.h"
#include "tensor/memory.h"
#include "tensor/raw_ops.h"
#include "trace/tracer.h"

namespace mt::dist {

namespace {

// A flat tensor whose storage comes from the device's allocator (never a small tensor's inline
// bytes), so that its bytes can be released and taken (Note [Storage that lets go of its bytes]).
Tensor allocator_flat(int64_t numel, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(numel) * element_size(dtype), device,
                                            backend(device).allocator());
  impl->sizes = Shape{numel};
  impl->strides = Shape{1};
  impl->dtype = dtype;
  return Tensor(impl);
}

// The whole flat vector of a gathered unit, over its own storage.
Tensor flat_of(const std::shared_ptr<Storage>& flat, int64_t numel, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = flat;
  impl->sizes = Shape{numel};
  impl->strides = Shape{1};
  impl->dtype = dtype;
  return Tensor(impl);
}

bool is_container(const nn::Module& m) {
  return dynamic_cast<const nn::ModuleList*>(&m) != nullptr || dynamic_cast<const nn::ModuleDict*>(&m) != nullptr;
}

}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<nn::Module> module,
                                                   std::shared_ptr<ProcessGroup> process_group, FSDPOptions options)
    : module_(std::move(module)), pg_(std::move(process_group)), prefetch_(options.prefetch) {
  MT_CHECK(module_ != nullptr && pg_ != nullptr, "FullyShardedDataParallel: needs a module and a process group");
  register_module("module", module_);
  params_ = module_->named_parameters();
  check_same_parameters(*pg_, params_);  // the same names and shapes everywhere, or a clear error
  const NamedTensors buffers = module_->named_buffers();
  if (!buffers.empty()) broadcast_buffers(*pg_, buffers);
  build_units(options);
  MemoryKindGuard kind(MemoryKind::kParameters);  // the shards this rank keeps (Note [Memory kinds])
  for (size_t u = 0; u < units_.size(); ++u) flatten_unit(u);
  stats_.units = static_cast<int64_t>(units_.size());
}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  for (nn::HookHandle& h : hooks_) h.remove();
  *alive_ = nullptr;  // the parameters' gradient hooks outlive this object (fsdp_backward.cpp)
}

// The default wrap policy (FSDPOptions::wrap), then each parameter to the one unit that holds it; a
// parameter held by two units (a tied weight) or by a module outside every unit goes to the root
// unit, which is gathered for the whole forward and backward.
void FullyShardedDataParallel::build_units(const FSDPOptions& options) {
  const nn::NamedModules all = module_->named_modules();  // all[0] is the model itself, ""
  std::map<std::string, const nn::Module*> by_name;
  bool any_block = false;
  for (const auto& [name, m] : all) {
    by_name[name] = m.get();
    any_block = any_block || dynamic_cast<const nn::TransformerBlock*>(m.get()) != nullptr;
  }
  const auto default_wrap = [&](const std::string& name, const nn::Module& m) {
    if (m.parameters().empty()) return false;
    if (any_block) return dynamic_cast<const nn::TransformerBlock*>(&m) != nullptr;
    const size_t dot = name.find('.');
    if (dot == std::string::npos) return !is_container(m);
    return name.find('.', dot + 1) == std::string::npos && is_container(*by_name.at(name.substr(0, dot)));
  };
  const auto wrap = options.wrap ? options.wrap : std::function<bool(const std::string&, const nn::Module&)>(default_wrap);
  std::vector<std::pair<std::string, nn::Module*>> chosen;
  const auto inside = [&](const std::string& name) {
    for (const auto& c : chosen)
      if (name.rfind(c.first + ".", 0) == 0) return true;
    return false;
  };
  for (size_t i = 1; i < all.size(); ++i)
    if (!inside(all[i].first) && wrap(all[i].first, *all[i].second)) chosen.emplace_back(all[i].first, all[i].second.get());

  constexpr int kRoot = -1, kNone = -2;
  std::map<const TensorImpl*, int> owner;
  for (const auto& [name, p] : params_) owner[p.unsafe_impl()] = kNone;
  for (size_t u = 0; u < chosen.size(); ++u)
    for (const Tensor& p : chosen[u].second->parameters()) {
      int& o = owner[p.unsafe_impl()];
      o = o == kNone ? static_cast<int>(u) : (o == static_cast<int>(u) ? o : kRoot);
    }
  for (const auto& [name, m] : all) {  // parameters of modules outside every unit
    if (inside(name) || std::any_of(chosen.begin(), chosen.end(), [&](const auto& c) { return c.first == name; })) continue;
    for (const auto& [pname, p] : m->named_parameters(/*recurse=*/false)) owner[p.unsafe_impl()] = kRoot;
  }
  for (size_t u = 0; u <= chosen.size(); ++u) {  // the last: the root unit
    const int id = u < chosen.size() ? static_cast<int>(u) : kRoot;
    UnitLayout layout{.name = u < chosen.size() ? chosen[u].first : "", .params = {}, .offsets = {}};
    auto unit = std::make_unique<Unit>();
    for (size_t i = 0; i < params_.size(); ++i) {
      const int o = owner[params_[i].second.unsafe_impl()];
      if (o != id && !(id == kRoot && o == kNone)) continue;
      layout.params.push_back(i);
      layout.offsets.push_back(layout.numel);
      layout.numel += params_[i].second.numel();
      unit->params.push_back(params_[i].second);
    }
    if (layout.params.empty() && id != kRoot) continue;  // a unit whose parameters all went to the root
    unit->module = id == kRoot ? nullptr : chosen[u].second;
    layout.shard = (layout.numel + pg_->size() - 1) / pg_->size();
    layouts_.push_back(std::move(layout));
    units_.push_back(std::move(unit));
  }
  for (size_t u = 0; u + 1 < units_.size(); ++u) {
    hooks_.push_back(units_[u]->module->register_forward_pre_hook([this, u](nn::Module&, const Tensor&) {
      before_unit_forward(u);
      return std::optional<Tensor>();
    }));
    hooks_.push_back(units_[u]->module->register_forward_hook(
        [this, u](nn::Module&, const Tensor&, const Tensor& out) { return std::optional<Tensor>(after_unit_forward(u, out)); }));
  }
  register_gradient_hooks();
}

// Note [FSDP shard layout], made: rank 0's values (broadcast, DDP's rule) laid out flat, this rank's
// shard cloned out, every parameter re-pointed into the flat storage (same tensor, same autograd
// leaf; its old bytes go when nothing else holds them), and the flat storage released.
void FullyShardedDataParallel::flatten_unit(size_t u) {
  Unit& unit = *units_[u];
  const UnitLayout& layout = layouts_[u];
  if (layout.numel == 0) return;
  const Tensor& first = unit.params.front();
  const int64_t padded = layout.shard * pg_->size();
  Tensor whole = allocator_flat(padded, first.dtype(), first.device());
  raw::fill_(whole, 0.0);
  for (size_t k = 0; k < unit.params.size(); ++k) {
    const Tensor& p = unit.params[k];
    MT_CHECK(p.is_contiguous() && p.dtype() == first.dtype() && p.device() == first.device(),
             "FullyShardedDataParallel: parameter '", params_[layout.params[k]].first, "' must be contiguous, with the "
             "dtype and device of the unit's others (", first.dtype(), " on ", first.device(), ")");
    raw::copy_(raw::narrow(whole, 0, layout.offsets[k], p.numel()), raw::reshape(p, {p.numel()}));
  }
  pg_->broadcast(whole, 0)->wait();
  unit.shard = raw::clone(raw::narrow(whole, 0, pg_->rank() * layout.shard, layout.shard));
  unit.flat = whole.storage();
  for (size_t k = 0; k < unit.params.size(); ++k) {
    TensorImpl* impl = unit.params[k].unsafe_impl();
    impl->storage = unit.flat;
    impl->offset = layout.offsets[k];
  }
  unit.flat->release();
}

// ---- gather and free ------------------------------------------------------------------------------

// Note [Gather, then free]: a unit's parameters are views of its flat storage, whose bytes exist
// only while the unit is Gathered. gather() copies this rank's shard into its place in a fresh
// flat buffer and issues the all-gather in place (the other ranks' shards fill the rest); wait()
// waits for it and hands the buffer's bytes to the flat storage (Storage::take_bytes), so every
// parameter, and every tensor autograd saved of one, reads the gathered values; free() releases
// them again. Releasing, not dropping, is the point: the backward graph holds the parameters
// (and the flat storage through them) from the forward to the backward, and only the bytes can
// go in between (Note [Storage that lets go of its bytes]). A unit is gathered at most once at a
// time: gather() of a unit that is Gathering or Gathered does nothing.
void FullyShardedDataParallel::gather(size_t u) {
  Unit& unit = *units_[u];
  const UnitLayout& layout = layouts_[u];
  if (layout.numel == 0 || unit.state != Unit::State::Free) return;
  log_collective(Collective::Gather, u);
  MemoryKindGuard kind(MemoryKind::kParameters);  // the gathered unit (Note [Memory kinds])
  Tensor out = allocator_flat(layout.shard * pg_->size(), unit.shard.dtype(), unit.shard.device());
  Tensor mine = raw::narrow(out, 0, pg_->rank() * layout.shard, layout.shard);
  raw::copy_(mine, unit.shard);
  unit.gather_issued_ns = trace_issue_ns();
  unit.gather_work = pg_->allgather_into(out, mine);
  unit.gathering = out;
  unit.state = Unit::State::Gathering;
  ++stats_.allgathers;
}

void FullyShardedDataParallel::wait(size_t u) {
  Unit& unit = *units_[u];
  if (unit.state != Unit::State::Gathering) return;
  const auto start = std::chrono::steady_clock::now();
  unit.gather_work->wait();
  stats_.allgather_wait_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  trace_collective(u, "all-gather", unit.gather_issued_ns);
  unit.flat->take_bytes(*unit.gathering.storage());
  unit.gathering = Tensor();
  unit.gather_work.reset();
  unit.state = Unit::State::Gathered;
}

void FullyShardedDataParallel::free(size_t u) {
  Unit& unit = *units_[u];
  wait(u);
  if (unit.state != Unit::State::Gathered) return;
  unit.flat->release();
  unit.state = Unit::State::Free;
}

// Note [FSDP prefetch]: the all-gather of the unit that runs next is issued before waiting for this
// one's, so it travels while this unit computes: in forward the next unit in the order the first
// forward ran them (order_), in backward the one before (backward runs the units in reverse). Every
// rank runs the same units in the same order, so the collectives pair up; at most two units are
// whole at a time (this one and the next), plus the root unit.
void FullyShardedDataParallel::prefetch_after(size_t u, bool backward) {
  if (!prefetch_ || !forwarded_) return;
  const auto at = std::find(order_.begin(), order_.end(), u);
  if (at == order_.end()) return;
  if (!backward && at + 1 != order_.end()) gather(*(at + 1));
  if (backward && at != order_.begin()) gather(*(at - 1));
}

void trace_collective(size_t unit, const char* what, int64_t issued_ns) {
  trace::Tracer* t = trace::active();
  if (t == nullptr || issued_ns == 0) return;
  constexpr int kFirstTrack = 1000;  // clear of DDP's bucket tracks (a run has one or the other)
  const int track = kFirstTrack + static_cast<int>(unit);
  const int64_t now = trace::now_ns();
  const std::string name = std::string(what) + " unit " + std::to_string(unit);
  t->name_track(track, "fsdp unit " + std::to_string(unit));
  t->complete(track, name, issued_ns, now);
  t->flow(name + " done", track, now, 0, now);
}

// ---- forward --------------------------------------------------------------------------------------

// The root unit is gathered for the whole forward and backward (it holds what no single unit
// owns, the tied embedding for one); under no_grad it is freed right after.
Tensor FullyShardedDataParallel::forward(const Tensor& input) {
  if (summoned_) return (*module_)(input);  // whole already; nothing to gather or free
  if (module_->is_training()) {
    const NamedTensors buffers = module_->named_buffers();
    if (!buffers.empty()) {
      log_collective(Collective::Buffers, 0);
      broadcast_buffers(*pg_, buffers);  // DDP's rule (Note [Buffer broadcast])
    }
  }
  const size_t root = units_.size() - 1;
  gather(root);
  if (prefetch_ && !order_.empty()) gather(order_.front());  // Note [FSDP prefetch]
  wait(root);
  Tensor out = (*module_)(input);
  if (!forwarded_) {
    forwarded_ = true;
    rs_order_.assign(order_.rbegin(), order_.rend());
    for (size_t u = 0; u < root; ++u)  // units no forward ran reduce their (zero) gradients last
      if (std::find(order_.begin(), order_.end(), u) == order_.end()) rs_order_.push_back(u);
    rs_order_.push_back(root);
  }
  if (!GradMode::is_enabled()) free(root);
  return out;
}

void FullyShardedDataParallel::before_unit_forward(size_t u) {
  if (summoned_) return;
  if (!forwarded_ && std::find(order_.begin(), order_.end(), u) == order_.end()) order_.push_back(u);
  gather(u);
  prefetch_after(u, false);
  wait(u);
}

Tensor FullyShardedDataParallel::after_unit_forward(size_t u, const Tensor& output) {
  if (summoned_) return output;
  const Tensor out = GradMode::is_enabled() ? with_pre_backward(u, output) : output;
  free(u);
  return out;
}

// ---- whole parameters -----------------------------------------------------------------------------

FullyShardedDataParallel::FullParams::FullParams(FullyShardedDataParallel* fsdp) : fsdp_(fsdp) {
  if (!fsdp_) return;
  MT_CHECK(!fsdp_->finalize_queued_ && !fsdp_->summoned_, "FullyShardedDataParallel::summon_full_params: not during "
           "a backward, nor inside another summon_full_params");
  for (size_t u = 0; u < fsdp_->units_.size(); ++u) fsdp_->gather(u);
  for (size_t u = 0; u < fsdp_->units_.size(); ++u) fsdp_->wait(u);
  fsdp_->summoned_ = true;
}

// What the parameters hold now goes back into the shards (a load_state_dict while summoned lands).
FullyShardedDataParallel::FullParams::~FullParams() {
  if (!fsdp_) return;
  fsdp_->summoned_ = false;
  const int64_t rank = fsdp_->pg_->rank();
  for (size_t u = 0; u < fsdp_->units_.size(); ++u) {
    Unit& unit = *fsdp_->units_[u];
    const UnitLayout& layout = fsdp_->layouts_[u];
    if (layout.numel == 0) continue;
    const Tensor whole = flat_of(unit.flat, layout.shard * fsdp_->pg_->size(), unit.shard.dtype());
    raw::copy_(unit.shard, raw::narrow(whole, 0, rank * layout.shard, layout.shard));
    fsdp_->free(u);
  }
}

FullyShardedDataParallel::FullParams FullyShardedDataParallel::summon_full_params() {
  return FullParams(this);
}

NamedTensors FullyShardedDataParallel::full_state_dict() {
  const FullParams whole = summon_full_params();
  NamedTensors out;
  for (const auto& [name, t] : module_->state_dict()) out.emplace_back(name, raw::clone(t));
  return out;
}

std::vector<ShardPiece> FullyShardedDataParallel::local_state_dict() const {
  std::vector<ShardPiece> out;
  const int64_t rank = pg_->rank();
  for (size_t u = 0; u < units_.size(); ++u) {
    const UnitLayout& layout = layouts_[u];
    const int64_t lo = rank * layout.shard, hi = lo + layout.shard;
    for (size_t k = 0; k < layout.params.size(); ++k) {
      const auto& [name, p] = params_[layout.params[k]];
      const int64_t begin = layout.offsets[k], a = std::max(begin, lo), z = std::min(begin + p.numel(), hi);
      if (a < z)
        out.push_back({.name = name, .shape = p.sizes(), .offset = a - begin,
                       .data = raw::narrow(units_[u]->shard, 0, a - lo, z - a)});
    }
  }
  return out;
}

const Tensor& FullyShardedDataParallel::shard(size_t u) const {
  MT_CHECK(u < units_.size(), "FullyShardedDataParallel: no unit ", u, " (there are ", units_.size(), ")");
  return units_[u]->shard;
}

const Tensor& FullyShardedDataParallel::shard_grad(size_t u) const {
  MT_CHECK(u < units_.size(), "FullyShardedDataParallel: no unit ", u, " (there are ", units_.size(), ")");
  return units_[u]->shard_grad;
}

void FullyShardedDataParallel::release_gradients() {
  for (auto& unit : units_) unit->shard_grad = Tensor();
}

}  // namespace mt::dist
