// ModuleDict: modules held by key and registered as children under those keys, in insertion order,
// as PyTorch's nn.ModuleDict: parameters(), to(), state_dict() and DDP see them, under names like
// "heads.cls.weight". Keys follow the child-name rules (non-empty, no '.', unique); inserting a key
// twice is an error, as libtorch's ModuleDict::insert. It has no forward: the parent's picks.
//
//   heads = register_module("heads", std::make_shared<nn::ModuleDict>(nn::NamedModules{
//       {"cls", std::make_shared<nn::Linear>(64, 10)}, {"reg", std::make_shared<nn::Linear>(64, 1)}}));
//   Tensor logits = (*(*heads)["cls"])(h);
//   for (const auto& [key, module] : *heads) ...
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"

namespace mt::nn {

class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  explicit ModuleDict(const NamedModules& items) {
    for (const auto& [key, module] : items) insert(key, module);
  }

  // Adds `module` under `key` and returns it with its own type.
  template <std::derived_from<Module> M>
  std::shared_ptr<M> insert(const std::string& key, std::shared_ptr<M> module) {
    return register_module(key, std::move(module));
  }

  size_t size() const { return named_children().size(); }
  bool empty() const { return named_children().empty(); }
  bool contains(const std::string& key) const;
  // The module under `key`; throws naming the key and the keys there are.
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  template <std::derived_from<Module> M>
  std::shared_ptr<M> at(const std::string& key) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[key]);
    MT_CHECK(typed != nullptr, "ModuleDict::at: '", key, "' is a ", (*this)[key]->name(), ", not the type asked for");
    return typed;
  }
  std::vector<std::string> keys() const;
  // (key, module) pairs in insertion order.
  auto begin() const { return named_children().begin(); }
  auto end() const { return named_children().end(); }
};

}  // namespace mt::nn
