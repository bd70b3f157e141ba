// The Tensor methods declared in tensor/tensor.h that involve autograd: gradient access, backward,
// hooks, and the method forms of the differentiable ops (x.sum() is mt::sum(x)).
#include "autograd/accumulate_grad.h"
#include "autograd/autograd_meta.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "tensor/raw_ops.h"

namespace mt {

// ---- autograd ---------------------------------------------------------------------------------

bool Tensor::requires_grad() const { return detail::requires_grad(*this); }

Tensor& Tensor::requires_grad_(bool on) {
  AutogradMeta* m = detail::autograd_meta_or_null(*this);
  MT_CHECK(!(m && m->grad_fn), "requires_grad_: only leaf tensors can change requires_grad; this one was "
           "computed by ", m ? m->grad_fn->name() : "", " (use detach() to make a leaf)");
  if (!on && !m) return *this;
  MT_CHECK(!on || is_floating(dtype()), "requires_grad_: only floating-point tensors can require "
           "gradients, this one is ", dtype());
  detail::autograd_meta(*this).requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = detail::autograd_meta_or_null(*this);
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined()) {
    MT_CHECK(g.sizes() == sizes() && g.dtype() == dtype(), "set_grad: gradient ", g.sizes(), " ",
             g.dtype(), " does not match the tensor ", sizes(), " ", dtype());
  }
  detail::autograd_meta(*this).grad = g;
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  Engine::backward({this, 1}, {&grad, 1}, {.retain_graph = retain_graph});
}

Tensor Tensor::detach() const { return raw::as_strided(*this, sizes(), strides(), storage_offset()); }

std::shared_ptr<Node> Tensor::grad_fn() const {
  const AutogradMeta* m = detail::autograd_meta_or_null(*this);
  return m ? m->grad_fn : nullptr;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  AutogradMeta& m = detail::autograd_meta(*this);
  MT_CHECK(m.requires_grad && !m.grad_fn, "register_post_accumulate_grad_hook: only leaf tensors that "
           "require grad accumulate gradients");
  m.post_accumulate_grad_hooks.push_back(std::move(hook));
}

// ---- views ------------------------------------------------------------------------------------

Tensor Tensor::view(const Shape& shape) const { return mt::view(*this, shape); }
Tensor Tensor::reshape(const Shape& shape) const { return mt::reshape(*this, shape); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return mt::transpose(*this, d0, d1); }
Tensor Tensor::t() const {
  MT_CHECK(dim() <= 2, "t: expects a tensor of at most 2 dims, got ", sizes(), "; use transpose");
  return dim() < 2 ? *this : mt::transpose(*this, 0, 1);
}
Tensor Tensor::permute(const Shape& order) const { return mt::permute(*this, order); }
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const { return mt::narrow(*this, d, start, length); }
Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  return mt::slice(*this, d, start, end, step);
}
Tensor Tensor::expand(const Shape& shape) const { return mt::expand(*this, shape); }
Tensor Tensor::squeeze() const { return mt::squeeze(*this); }
Tensor Tensor::squeeze(int64_t d) const { return mt::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int64_t d) const { return mt::unsqueeze(*this, d); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return mt::flatten(*this, s, e); }
Tensor Tensor::contiguous() const { return mt::contiguous(*this); }

// ---- math -------------------------------------------------------------------------------------

Tensor Tensor::neg() const { return mt::neg(*this); }
Tensor Tensor::exp() const { return mt::exp(*this); }
Tensor Tensor::log() const { return mt::log(*this); }
Tensor Tensor::sqrt() const { return mt::sqrt(*this); }
Tensor Tensor::tanh() const { return mt::tanh(*this); }
Tensor Tensor::sigmoid() const { return mt::sigmoid(*this); }
Tensor Tensor::relu() const { return mt::relu(*this); }
Tensor Tensor::abs() const { return mt::abs(*this); }
Tensor Tensor::pow(double e) const { return mt::pow(*this, e); }
Tensor Tensor::sum() const { return mt::sum(*this); }
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const { return mt::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return mt::mean(*this); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const { return mt::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return mt::max(*this); }
Tensor Tensor::min() const { return mt::min(*this); }
std::tuple<Tensor, Tensor> Tensor::max(int64_t d, bool keepdim) const { return mt::max_dim(*this, d, keepdim); }
std::tuple<Tensor, Tensor> Tensor::min(int64_t d, bool keepdim) const { return mt::min_dim(*this, d, keepdim); }
Tensor Tensor::amax(const std::vector<int64_t>& dims, bool keepdim) const { return mt::max(*this, dims, keepdim); }
Tensor Tensor::amin(const std::vector<int64_t>& dims, bool keepdim) const { return mt::min(*this, dims, keepdim); }
Tensor Tensor::argmax(int64_t d, bool keepdim) const { return mt::argmax(*this, d, keepdim); }
Tensor Tensor::argmin(int64_t d, bool keepdim) const { return mt::argmin(*this, d, keepdim); }
Tensor Tensor::matmul(const Tensor& o) const { return mt::matmul(*this, o); }
Tensor Tensor::softmax(int64_t d) const { return mt::softmax(*this, d); }
Tensor Tensor::log_softmax(int64_t d) const { return mt::log_softmax(*this, d); }
Tensor Tensor::index_select(int64_t d, const Tensor& i) const { return mt::index_select(*this, d, i); }
Tensor Tensor::gather(int64_t d, const Tensor& i) const { return mt::gather(*this, d, i); }
Tensor Tensor::to(DType t) const { return mt::cast(*this, t); }
Tensor Tensor::clone() const { return mt::clone(*this); }
std::tuple<Tensor, Tensor> Tensor::sort(int64_t d, bool descending) const { return mt::sort(*this, d, descending); }
Tensor Tensor::argsort(int64_t d, bool descending) const { return mt::argsort(*this, d, descending); }
std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t d, bool largest) const {
  return mt::topk(*this, k, d, largest);
}
Tensor Tensor::repeat(const Shape& repeats) const { return mt::repeat(*this, repeats); }

Tensor Tensor::to(Device device) const {
  MT_CHECK(!requires_grad() || device == this->device(), "to(device): moving a tensor that requires grad "
           "between devices is not differentiable yet; move leaves before they require grad");
  return raw::to_device(*this, device);
}

// ---- in place ---------------------------------------------------------------------------------

namespace {
// In-place ops record no history, so they must not touch tensors autograd is tracking while grad
// mode is on (the gradient would silently ignore the change). Optimizers run under NoGradGuard.
void check_in_place(const Tensor& t, const char* op) {
  MT_CHECK(!(GradMode::is_enabled() && t.requires_grad()), op, ": in-place change of a tensor that "
           "requires grad (shape ", t.sizes(), "); do it under NoGradGuard, or on a detach()ed copy");
}
}  // namespace

Tensor& Tensor::zero_() { return fill_(0.0); }
Tensor& Tensor::fill_(double v) {
  check_in_place(*this, "fill_");
  raw::fill_(*this, v);
  return *this;
}
Tensor& Tensor::copy_(const Tensor& src) {
  check_in_place(*this, "copy_");
  raw::copy_(*this, src);
  return *this;
}
Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_in_place(*this, "add_");
  raw::binary_(BinaryOp::Add, *this, alpha == 1.0 ? other : raw::unary(UnaryOp::MulScalar, other, alpha));
  return *this;
}
Tensor& Tensor::mul_(const Tensor& other) {
  check_in_place(*this, "mul_");
  raw::binary_(BinaryOp::Mul, *this, other);
  return *this;
}
Tensor& Tensor::mul_(double v) {
  check_in_place(*this, "mul_");
  raw::unary_(UnaryOp::MulScalar, *this, v);
  return *this;
}
Tensor& Tensor::add_(double v) {
  check_in_place(*this, "add_");
  raw::unary_(UnaryOp::AddScalar, *this, v);
  return *this;
}

}  // namespace mt
