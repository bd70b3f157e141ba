// The non-template part of Optimizer: zero_grad, clipping, the parameter and gradient lists, and the checks on new groups.
#include "optim/optimizer.h"

#include <algorithm>

#include "autograd/node.h"
#include "optim/clip_grad.h"
#include "tensor/raw_ops.h"

namespace mt::optim {

void Optimizer::zero_grad(bool set_to_none) {
  for (size_t g = 0; g < num_param_groups(); ++g) {
    for (const Tensor& p : params(g)) {
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        raw::fill_(grad, 0.0);  // gradients carry no history (the engine runs under no-grad)
      }
    }
  }
}

double Optimizer::clip_grad_norm(double max_norm) { return clip_grad_norm_(parameters(), max_norm); }

std::vector<Tensor> Optimizer::step_gradients() const {
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> all;
  for (size_t g = 0; g < num_param_groups(); ++g) all.insert(all.end(), params(g).begin(), params(g).end());
  return all;
}

namespace detail {

void check_new_params(const char* optimizer, size_t group, const std::vector<Tensor>& params,
                      const std::vector<Tensor>& existing) {
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor& p = params[k];
    MT_CHECK(p.defined(), optimizer, ": parameter ", k, " of param group ", group, " is an undefined tensor");
    MT_CHECK(is_floating(p.dtype()), optimizer, ": parameter ", k, " of param group ", group, " is ",
             p.dtype(), "; only floating-point tensors can be optimized");
    MT_CHECK(p.is_leaf(), optimizer, ": parameter ", k, " of param group ", group, " (shape ", p.sizes(),
             ") was computed by ", p.is_leaf() ? "" : p.grad_fn()->name(),
             "; only leaf tensors can be optimized (optimize the leaves it came from, or a detach()ed copy)");
    auto same = [&](const Tensor& q) { return q.is_same(p); };
    MT_CHECK(std::none_of(existing.begin(), existing.end(), same), optimizer, ": parameter ", k,
             " of param group ", group, " (shape ", p.sizes(), ") is already in another param group");
    MT_CHECK(std::none_of(params.begin(), params.begin() + k, same), optimizer, ": parameter ", k,
             " of param group ", group, " (shape ", p.sizes(), ") appears twice in the group");
  }
}

bool fusable_param(const Tensor& p) {
  return p.device().is_cpu() && (p.dtype() == kFloat32 || p.dtype() == kFloat64) && p.is_contiguous();
}

bool fusable_with(const Tensor& p, const Tensor& other) {
  return !other.defined() || (other.device().is_cpu() && other.dtype() == p.dtype() && other.is_contiguous());
}

std::string group_prefix(size_t group) { return "param_groups." + std::to_string(group) + "."; }
std::string state_prefix(size_t param) { return "state." + std::to_string(param) + "."; }

}  // namespace detail
}  // namespace mt::optim
