// ModuleList: modules held in a list and registered as children named by position, "0", "1", ...,
// as PyTorch's nn.ModuleList. Holding layers in a std::vector hides them from parameters(), to(),
// state_dict() and DDP; holding them here shows them to all of those, under names like
// "blocks.0.weight". It has no forward: the parent's forward iterates over it.
//
//   blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
//   for (int i = 0; i < 4; ++i) blocks->push_back(std::make_shared<nn::Linear>(64, 64));
//   for (const auto& block : *blocks) h = (*block)(h);
//
// Sequential (nn/sequential.h) is a ModuleList whose forward chains the elements.
#pragma once

#include <initializer_list>

#include "nn/module.h"

namespace mt::nn {

class ModuleList : public Module {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
    for (const auto& m : modules) push_back(m);
  }
  // The same from separate arguments, so that std::make_shared<ModuleList>(a, b, c) works.
  template <std::derived_from<Module>... Ms>
  explicit ModuleList(std::shared_ptr<Ms>... modules) {
    (push_back(std::move(modules)), ...);
  }

  // Appends `module` as child str(size()) and returns it with its own type.
  template <std::derived_from<Module> M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(modules_.size()), module);
    modules_.push_back(module);
    return module;
  }
  void extend(const std::vector<std::shared_ptr<Module>>& modules) {
    for (const auto& m : modules) push_back(m);
  }

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  // The i-th module as type M; throws if it is something else.
  template <std::derived_from<Module> M>
  std::shared_ptr<M> at(size_t i) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[i]);
    MT_CHECK(typed != nullptr, name(), "::at: module ", i, " is a ", (*this)[i]->name(), ", not the type asked for");
    return typed;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  // The children again, in order, so iteration and operator[] need no name lookup.
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace mt::nn
