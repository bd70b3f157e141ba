// Module's forward hooks: registration, the handles that remove them, and the call that runs them
// around forward (Note [Hooks run in operator()] in module.h).
#include "nn/module.h"

#include <algorithm>

namespace mt::nn {

// One list per kind, in registration order. Each entry carries the id its handle names, so
// removing one hook leaves the others' handles valid.
struct ModuleHooks {
  std::vector<std::pair<uint64_t, Module::ForwardPreHook>> pre;
  std::vector<std::pair<uint64_t, Module::ForwardHook>> post;
  uint64_t next_id = 1;
};

namespace {
template <typename List>
void erase_id(List& list, uint64_t id) {
  std::erase_if(list, [id](const auto& entry) { return entry.first == id; });
}
}  // namespace

void HookHandle::remove() {
  if (auto hooks = hooks_.lock()) {
    erase_id(hooks->pre, id_);
    erase_id(hooks->post, id_);
  }
  hooks_.reset();
}

HookHandle Module::register_forward_pre_hook(ForwardPreHook hook) {
  MT_CHECK(hook != nullptr, name(), ".register_forward_pre_hook: the hook is empty");
  if (!hooks_) hooks_ = std::make_shared<ModuleHooks>();
  const uint64_t id = hooks_->next_id++;
  hooks_->pre.emplace_back(id, std::move(hook));
  return HookHandle(hooks_, id);
}

HookHandle Module::register_forward_hook(ForwardHook hook) {
  MT_CHECK(hook != nullptr, name(), ".register_forward_hook: the hook is empty");
  if (!hooks_) hooks_ = std::make_shared<ModuleHooks>();
  const uint64_t id = hooks_->next_id++;
  hooks_->post.emplace_back(id, std::move(hook));
  return HookHandle(hooks_, id);
}

// The lists are copied before they run, so a hook may remove itself (or add another, which runs
// from the next call on) without disturbing the loop, as in PyTorch.
Tensor Module::call_with_hooks(const Tensor& input) {
  Tensor x = input;
  const auto pre = hooks_->pre;
  for (const auto& [id, hook] : pre)
    if (std::optional<Tensor> replaced = hook(*this, x)) x = std::move(*replaced);
  Tensor y = forward(x);
  const auto post = hooks_->post;
  for (const auto& [id, hook] : post)
    if (std::optional<Tensor> replaced = hook(*this, x, y)) y = std::move(*replaced);
  return y;
}

}  // namespace mt::nn
