// Using a model that mini_train saved, from C++: nn::load_model rebuilds the network its file names
// (linear, MLP, CNN or GPT), loads the weights and prepares inputs as training did (flattened rows,
// standardised when the file says so). No command line of the training run is needed.
//
//   build/example_load_model MODEL.safetensors X.npy OUT.npy
//       a classifier: each row's class probabilities, (n, classes) float32; a regression: its
//       values, (n, outputs); what `mini_train predict --probabilities` writes
//   build/example_load_model MODEL.safetensors --greedy PROMPT TOKENS
//       a GPT: PROMPT continued by TOKENS bytes, each the most likely one (what `mini_train
//       generate --temperature 0` prints)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "minitrain.h"

using namespace mt;

// The most likely next byte after `text`, again and again: the window is the last `context` bytes.
std::string continue_greedily(const nn::LoadedModel& gpt, std::string text, int64_t tokens) {
  const int64_t context = gpt.info.gpt.context;
  for (int64_t n = 0; n < tokens; ++n) {
    std::vector<int64_t> window;
    for (size_t i = text.size() - std::min<size_t>(text.size(), context); i < text.size(); ++i)
      window.push_back(static_cast<unsigned char>(text[i]));
    const int64_t t = static_cast<int64_t>(window.size());
    const Tensor logits = gpt.forward(from_vector(window, {t}));      // (1, t, 256)
    const Tensor last = logits.reshape({t, -1}).narrow(0, t - 1, 1);  // (1, 256)
    text.push_back(static_cast<char>(last.argmax(1).item()));
  }
  return text;
}

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: %s MODEL X.npy OUT.npy | MODEL --greedy PROMPT TOKENS\n", argv[0]);
    return 2;
  }
  try {
    const nn::LoadedModel model = nn::load_model(argv[1]);
    NoGradGuard no_grad;
    if (std::string(argv[2]) == "--greedy") {
      std::printf("%s\n", continue_greedily(model, argv[3], std::atoll(argv[4])).c_str());
      return 0;
    }
    const Tensor x = data::read_npy(argv[2]);
    data::write_npy(argv[3], model.info.classification ? model.probabilities(x) : model.forward(x));
    std::printf("%s (%s): %lld rows\n", argv[1], model.info.signature.c_str(), static_cast<long long>(x.size(0)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "example_load_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
