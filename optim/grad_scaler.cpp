// GradScaler (see grad_scaler.h): the scale, the fused unscale-and-check pass, the skip, the update
// rule, and the state dict.
//
// Note [Loss scaling]: float16 keeps 5 exponent bits. Its normal numbers end at 2^-14 (about 6e-5)
// and its subnormals at 2^-24 (about 6e-8); many gradients of a network in training are smaller
// than that, and a float16 backward flushes them to zero: the update silently loses them. Backward
// is linear in the loss, so multiplying the loss by S multiplies every gradient, and every
// intermediate of backward, by S, which lifts the small ones into range. Before the update the
// float32 gradients (of float32 master weights) are divided by S again: the update sees the true
// gradient. Too large an S overflows instead, somewhere in backward, and the gradients come out
// inf or NaN. Then this step's gradients are garbage, so the step is skipped (parameters and
// optimizer state, Adam's moments and step count included, stay as they were) and S is halved.
// After growth_interval clean steps in a row S doubles, to probe for headroom again: S settles
// just below where backward overflows, and a skipped step costs one batch about every
// growth_interval steps. This is PyTorch's dynamic loss scaling (Micikevicius et al., "Mixed
// Precision Training", ICLR 2018), with its rule and defaults (detail::update_scale).
//
// The unscale must read and write every gradient element anyway; the inf/NaN test reads the same
// element, so both are one pass (a second pass would double the memory traffic of the step's
// largest tensors). The test looks at the exponent bits as an integer: all ones is inf or NaN, and
// OR-ing those answers over a chunk is an integer reduction the compiler vectorises (a float sum
// would not be, as reordering it changes the result). As in PyTorch, each element is tested before
// the multiply.
#include "optim/grad_scaler.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "tensor/parallel.h"
#include "tensor/raw_ops.h"

namespace mt::optim {

namespace {

constexpr int64_t kUnscaleGrain = 1 << 15;  // elements per chunk: memory-bound, like the optimizers' loops

void check_options(const GradScalerOptions& o) {
  MT_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0, "GradScaler: init_scale must be a positive "
           "finite number, got ", o.init_scale);
  MT_CHECK(o.growth_factor > 1 && std::isfinite(o.growth_factor), "GradScaler: growth_factor must be > 1, got ",
           o.growth_factor);
  MT_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, "GradScaler: backoff_factor must be in (0, 1), got ",
           o.backoff_factor);
  MT_CHECK(o.growth_interval >= 1, "GradScaler: growth_interval must be >= 1, got ", o.growth_interval);
}

// One contiguous run: x *= inv, and whether any x was inf or NaN before. Bits is the unsigned
// integer of T's width; kExponent its exponent mask.
template <typename T, typename Bits, Bits kExponent>
bool unscale_run(T* x, int64_t n, T inv) {
  Bits bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    bad |= static_cast<Bits>((std::bit_cast<Bits>(x[i]) & kExponent) == kExponent);
    x[i] *= inv;
  }
  return bad != 0;
}

bool unscale_contiguous(const Tensor& g, float inv_scale) {
  std::atomic<bool> found{false};
  auto run = [&]<typename T, typename Bits, Bits kExponent>(T* x) {
    parallel_for(g.numel(), kUnscaleGrain, [&](int64_t lo, int64_t hi) {
      if (unscale_run<T, Bits, kExponent>(x + lo, hi - lo, static_cast<T>(inv_scale)))
        found.store(true, std::memory_order_relaxed);
    });
  };
  if (g.dtype() == kFloat32) {
    run.template operator()<float, uint32_t, 0x7F800000u>(g.data_ptr<float>());
  } else {
    run.template operator()<double, uint64_t, 0x7FF0000000000000ull>(g.data_ptr<double>());
  }
  return found.load();
}

}  // namespace

namespace detail {

bool unscale_and_check(const std::vector<Tensor>& grads, float inv_scale) {
  NoGradGuard no_grad;
  bool found = false;
  std::vector<Tensor> device_sums;  // per device, the float32 sum of every x·0 (below) made there
  for (const Tensor& g : grads) {
    MT_CHECK(g.dtype() != kFloat16, "GradScaler: a gradient to unscale is float16; keep the parameters in "
             "float32 (master weights) and let autocast run the float16 ops");
    if (g.device().is_cpu() && g.is_contiguous() && (g.dtype() == kFloat32 || g.dtype() == kFloat64)) {
      found = unscale_contiguous(g, inv_scale) || found;
      continue;
    }
    // Any other device (a GPU's gradients), dtype or layout: the same in raw ops, two passes. x·0 is
    // 0 for finite x and NaN for inf or NaN, so the sum of x·0 is NaN exactly when some x was not
    // finite. The sums are added up on their device and read back once, after the last gradient:
    // a read per gradient would make the host wait for the GPU once per parameter.
    const Tensor bad = raw::cast(raw::sum(raw::unary(UnaryOp::MulScalar, g, 0.0)), kFloat32);
    const auto same = std::find_if(device_sums.begin(), device_sums.end(),
                                   [&](const Tensor& s) { return s.device() == g.device(); });
    if (same == device_sums.end()) {
      device_sums.push_back(bad);  // a fresh 0-dim tensor of its own: the later ones add into it
    } else {
      raw::binary_(BinaryOp::Add, *same, bad);
    }
    raw::unary_(UnaryOp::MulScalar, g, inv_scale);
  }
  for (const Tensor& s : device_sums) found = !std::isfinite(s.to(kCPU).item()) || found;
  return found;
}

// PyTorch's _amp_update_scale_ (aten/src/ATen/native/cuda/AmpKernels.cu, 1.13): the scale is a
// float32, each product is formed in double and rounded to float32 once; growth that would overflow
// float32 is not taken, but the count still restarts.
void update_scale(float& scale, int64_t& growth_tracker, bool found_inf, const GradScalerOptions& o) {
  if (found_inf) {
    scale = static_cast<float>(static_cast<double>(scale) * o.backoff_factor);
    growth_tracker = 0;
    return;
  }
  const int64_t successful = growth_tracker + 1;  // this step was clean
  if (successful == o.growth_interval) {
    const auto grown = static_cast<float>(static_cast<double>(scale) * o.growth_factor);
    if (std::isfinite(grown)) scale = grown;
    growth_tracker = 0;
  } else {
    growth_tracker = successful;
  }
}

}  // namespace detail

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), scale_(static_cast<float>(options.init_scale)) {
  if (options_.enabled) check_options(options_);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  MT_CHECK(loss.defined(), "GradScaler::scale: the loss is an undefined tensor");
  if (!options_.enabled) return loss;
  MT_CHECK(is_floating(loss.dtype()), "GradScaler::scale: the loss is ", loss.dtype(), ", not floating-point");
  const Tensor wide = is_low_precision(loss.dtype()) ? cast(loss, kFloat32) : loss;
  return mul(wide, static_cast<double>(scale_));
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!options_.enabled) return;
  const auto it = optimizers_.find(&opt);
  if (it != optimizers_.end()) {
    MT_CHECK(it->second.stage != Stage::Unscaled, "GradScaler::unscale_: already called on this optimizer since "
             "the last update()");
    MT_FAIL("GradScaler::unscale_: called after step(); unscale_ comes first, then step, then update()");
  }
  // The reciprocal in double, rounded once to float32, as PyTorch forms inv_scale: exact for the
  // powers of two the default factors keep the scale at.
  const auto inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  const bool found_here = detail::unscale_and_check(opt.step_gradients(), inv_scale);
  optimizers_[&opt] = {.stage = Stage::Unscaled, .found_inf = reduce_ ? reduce_(found_here) : found_here};
}

bool GradScaler::step(Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  auto it = optimizers_.find(&opt);
  MT_CHECK(it == optimizers_.end() || it->second.stage != Stage::Stepped,
           "GradScaler::step: already called on this optimizer since the last update()");
  if (it == optimizers_.end()) {
    unscale_(opt);
    it = optimizers_.find(&opt);
  }
  const bool clean = !it->second.found_inf;
  if (clean) opt.step();
  it->second.stage = Stage::Stepped;
  return clean;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  MT_CHECK(!optimizers_.empty(), "GradScaler::update: no optimizer was unscaled or stepped since the last "
           "update(); call step(opt) first");
  bool found_inf = false;
  for (const auto& [opt, state] : optimizers_) found_inf = found_inf || state.found_inf;
  detail::update_scale(scale_, growth_tracker_, found_inf, options_);
  optimizers_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  MT_CHECK(std::isfinite(new_scale) && new_scale > 0, "GradScaler::update: new_scale must be a positive finite "
           "number, got ", new_scale);
  scale_ = static_cast<float>(new_scale);
  optimizers_.clear();
}

StateDict GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scale", detail::scalar_entry(scale_)},
          {"growth_factor", detail::scalar_entry(options_.growth_factor)},
          {"backoff_factor", detail::scalar_entry(options_.backoff_factor)},
          {"growth_interval", detail::scalar_entry(static_cast<double>(options_.growth_interval))},
          {"_growth_tracker", detail::scalar_entry(static_cast<double>(growth_tracker_))}};
}

void GradScaler::load_state_dict(const StateDict& state) {
  if (!options_.enabled) return;
  MT_CHECK(!state.empty(), "GradScaler::load_state_dict: the state dict is empty; it was saved by a disabled "
           "GradScaler");
  detail::StateDictReader reader(state, "GradScaler");
  GradScalerOptions options = options_;
  const double scale = reader.scalar("scale");
  options.growth_factor = reader.scalar("growth_factor");
  options.backoff_factor = reader.scalar("backoff_factor");
  const double interval = reader.scalar("growth_interval");
  const double tracker = reader.scalar("_growth_tracker");
  reader.check_all_used();
  MT_CHECK(interval == std::floor(interval) && interval >= 1 && interval < 9.0e15, "GradScaler::load_state_dict: "
           "growth_interval must be a whole number >= 1, got ", interval);
  options.growth_interval = static_cast<int64_t>(interval);
  check_options(options);
  MT_CHECK(std::isfinite(scale) && scale > 0 && static_cast<double>(static_cast<float>(scale)) == scale,
           "GradScaler::load_state_dict: scale must be a positive finite float32 value, got ", scale);
  MT_CHECK(tracker == std::floor(tracker) && tracker >= 0 && tracker < interval, "GradScaler::load_state_dict: "
           "_growth_tracker must be a whole number in [0, growth_interval), got ", tracker);
  options_ = options;
  scale_ = static_cast<float>(scale);
  growth_tracker_ = static_cast<int64_t>(tracker);
  optimizers_.clear();
}

}  // namespace mt::optim
