// Sequential: a chain of one-input modules; forward feeds each one's output to the next.
// Children are named by position, "0", "1", ..., so parameters get names like "0.weight", and a
// Sequential nested as "layers" inside a model gives "layers.0.weight".
//
//   auto mlp = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 256),
//                                               std::make_shared<nn::ReLU>(),
//                                               std::make_shared<nn::Linear>(256, 10));
//   nn::Sequential block{std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::Tanh>()};
//   auto head = mlp->push_back(std::make_shared<nn::Linear>(10, 10));  // typed: shared_ptr<Linear>
//
// Every element must have a one-input forward (Module::forward); putting a loss in a Sequential
// fails at the first forward with the loss's name.
#pragma once

#include <initializer_list>

#include "nn/module.h"

namespace mt::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
    for (const auto& m : modules) push_back(m);
  }
  // The same from separate arguments, so that std::make_shared<Sequential>(a, b, c) works.
  template <std::derived_from<Module>... Ms>
  explicit Sequential(std::shared_ptr<Ms>... modules) {
    (push_back(std::move(modules)), ...);
  }

  // Appends `module` as child str(size()) and returns it with its own type.
  template <std::derived_from<Module> M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(modules_.size()), module);
    modules_.push_back(module);
    return module;
  }

  Tensor forward(const Tensor& x) override;

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  // The i-th module as type M; throws if it is something else.
  template <std::derived_from<Module> M>
  std::shared_ptr<M> at(size_t i) const {
    auto typed = std::dynamic_pointer_cast<M>((*this)[i]);
    MT_CHECK(typed != nullptr, "Sequential::at: module ", i, " is a ", (*this)[i]->name(), ", not the type asked for");
    return typed;
  }

 private:
  // The children again, in order, so forward and operator[] need no name lookup.
  std::vector<std::shared_ptr<Module>> modules_;
};

}  // namespace mt::nn
