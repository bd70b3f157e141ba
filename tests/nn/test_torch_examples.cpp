// The model of examples/padded_sequences.cpp (examples/padded_sequences.h) trained beside PyTorch's:
// three SGD steps from PyTorch's starting weights on its padded batches, float64. Each step's loss
// (cross-entropy with ignore_index and label smoothing over a key-padding-masked attention model) and
// the final weights agree to 1e-9 relative. The reference run is in tests/nn/fixtures/examples.safetensors,
// written by tests/nn/make_example_fixtures.py.
#include <doctest/doctest.h>

#include <string>

#include "examples/padded_sequences.h"
#include "minitrain.h"
#include "torch_fixtures.h"

using namespace mt;

TEST_CASE("examples/padded_sequences.h's model trains as PyTorch's does: three SGD steps, losses and weights") {
  const test::TorchFixtures fx("examples.safetensors");
  padded_sequences::Classifier model;
  model.to(kFloat64);
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : model.named_parameters()) p.copy_(fx("init." + name));
  }
  optim::SGD opt(model.parameters(), {.lr = 0.5});
  nn::CrossEntropyLoss loss_fn({.ignore_index = -100, .label_smoothing = 0.1});
  for (int step = 0; step < 3; ++step) {
    const std::string at = "step" + std::to_string(step) + ".";
    const Tensor loss = loss_fn(model.forward(fx(at + "tokens"), fx(at + "padding")), fx(at + "labels"));
    test::check_close_to_torch(loss, fx(at + "loss"), at + "loss");
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  for (auto& [name, p] : model.named_parameters()) test::check_close_to_torch(p, fx("final." + name), name);
}
