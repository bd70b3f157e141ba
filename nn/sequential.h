// Sequential: a chain of one-input modules; forward feeds each one's output to the next. It is a
// ModuleList (nn/module_list.h) with that forward: children are named by position, "0", "1", ...,
// so parameters get names like "0.weight", and a Sequential nested as "layers" inside a model gives
// "layers.0.weight".
//
//   auto mlp = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 256),
//                                               std::make_shared<nn::ReLU>(),
//                                               std::make_shared<nn::Linear>(256, 10));
//   nn::Sequential block{std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::Tanh>()};
//   auto head = mlp->push_back(std::make_shared<nn::Linear>(10, 10));  // typed: shared_ptr<Linear>
//
// Every element must have a one-input forward (Module::forward); putting a loss in a Sequential
// fails at the first forward with the loss's name. Elements are called as `module(x)`, so their
// hooks run (Note [Hooks run in operator()]). A run BatchNorm2d, ReLU (, MaxPool2d) without hooks is
// called as one fused op with the same results (Note [Fused runs in Sequential], sequential.cpp).
#pragma once

#include "nn/module_list.h"

namespace mt::nn {

class Sequential : public ModuleList {
 public:
  using ModuleList::ModuleList;

  Tensor forward(const Tensor& x) override;
};

}  // namespace mt::nn
