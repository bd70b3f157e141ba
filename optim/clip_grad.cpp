// Gradient-norm clipping (see clip_grad.h): one pass to measure, one pass to scale. The norm is
// accumulated in double whatever the gradients' dtype, so it does not lose small terms in float32
// (Note [Lanes for the norm]).
#include "optim/clip_grad.h"

#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "tensor/parallel.h"
#include "tensor/raw_ops.h"

namespace mt::optim {

namespace {

// Note [Lanes for the norm]: Σ|g|² in one running double is a chain of dependent adds: the loop
// cannot be vectorised (reordering the adds would change the result, and the compiler may not) and
// runs at one add per add-latency, ~4 cycles an element. So each chunk of a gradient keeps kLanes
// independent double sums, lane l taking the elements j ≡ l (mod kLanes); that inner loop is the
// same arithmetic in every lane, which the compiler turns into SIMD adds, and the lanes are added
// pairwise at the chunk's end. The chunks are parallel_for's fixed chunks of kNormGrain elements
// (Note [Fixed chunks]) and their sums are added in chunk order, so the norm is the same bits at any
// thread count. Each square is exact in double for float32 input, and the sum's relative error
// stays near n·2⁻⁵³ — far below PyTorch's own float32 accumulation, so the two agree to float32
// rounding. The 1-norm and ∞-norm take the same lanes; other p stay a plain loop (a pow each).
constexpr int kLanes = 8;
constexpr int64_t kNormGrain = 65536;  // a chunk of the 2-norm is ~10 µs: larger than the pool's hand-off

// Σ f(x[j]) over [0, n) in kLanes double lanes (combine = +), or the max with NaN kept (combine = max).
template <typename T, typename F, typename Combine>
double lane_reduce(const T* x, int64_t n, F f, Combine combine) {
  double lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] = combine(lane[l], f(static_cast<double>(x[j + l])));
  }
  for (int l = 0; j < n; ++j, ++l) lane[l] = combine(lane[l], f(static_cast<double>(x[j])));
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lane[l] = combine(lane[l], lane[l + width]);
  }
  return lane[0];
}

// Σ |g|^p over one gradient (max |g| when p is infinite).
double partial_norm(const Tensor& g, double p) {
  const bool inf = std::isinf(p);
  if (g.device().is_cpu() && g.is_contiguous() && (g.dtype() == kFloat32 || g.dtype() == kFloat64)) {
    return MT_DISPATCH_FLOAT(g.dtype(), "clip_grad_norm_", [&]<typename T>() {
      const T* x = g.data_ptr<T>();
      const int64_t n = g.numel();
      const auto add = [](double a, double b) { return a + b; };
      const auto max_nan = [](double a, double b) { return (b != b || b > a) ? b : a; };  // keeps a NaN, like torch.max
      const auto chunk = [&](int64_t begin, int64_t end) {
        const T* c = x + begin;
        const int64_t m = end - begin;
        if (inf) return lane_reduce(c, m, [](double a) { return std::abs(a); }, max_nan);
        if (p == 2) return lane_reduce(c, m, [](double a) { return a * a; }, add);
        if (p == 1) return lane_reduce(c, m, [](double a) { return std::abs(a); }, add);
        double acc = 0;
        for (int64_t j = 0; j < m; ++j) acc += std::pow(std::abs(static_cast<double>(c[j])), p);
        return acc;
      };
      std::vector<double> parts((n + kNormGrain - 1) / kNormGrain);
      parallel_for(n, kNormGrain, [&](int64_t begin, int64_t end) { parts[begin / kNormGrain] = chunk(begin, end); });
      double acc = 0;
      for (double part : parts) acc = inf ? max_nan(acc, part) : acc + part;  // in chunk order
      return acc;
    });
  }
  // Any other device or layout: the same sum in raw ops, in double.
  const Tensor a = raw::unary(UnaryOp::Abs, raw::cast(g, kFloat64));
  if (inf) return raw::max(a).item();
  return raw::sum(raw::unary(UnaryOp::Pow, a, p)).item();
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  MT_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be > 0 (or kInfNorm), got ", norm_type);
  MT_CHECK(max_norm >= 0, "clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return 0.0;

  double total = 0;
  for (const Tensor& g : grads) {
    const double part = partial_norm(g, norm_type);
    total = std::isinf(norm_type) ? ((std::isnan(part) || part > total) ? part : total) : total + part;
  }
  if (!std::isinf(norm_type)) total = norm_type == 2 ? std::sqrt(total) : std::pow(total, 1 / norm_type);

  // PyTorch multiplies by min(coef, 1) unconditionally; multiplying by 1 changes nothing, so skip
  // it. A NaN coefficient (NaN norm) is applied, as in PyTorch: the gradients become NaN.
  const double coef = max_norm / (total + 1e-6);
  if (!(coef >= 1)) {
    for (const Tensor& g : grads) raw::unary_(UnaryOp::MulScalar, g, coef);
  }
  return total;
}

}  // namespace mt::optim
