// --early-stop: the best epoch's score and weights, and when to stop (see early_stop.h).
#include "apps/mini_train/early_stop.h"

#include <cstdio>

namespace mt::app {

bool EarlyStop::update(int64_t epoch, const Score& s, const nn::Module& model) {
  const bool better = best_epoch_ == 0 || (s.classification ? s.value > best_.value : s.value < best_.value);
  if (!better) return ++since_best_ >= patience_;
  best_ = s, best_epoch_ = epoch, since_best_ = 0;
  best_weights_ = model.state_dict();
  for (auto& [name, t] : best_weights_) t = t.detach().to(kCPU).clone();  // a copy: training changes the weights
  return false;
}

std::string EarlyStop::restore_best(nn::Module& model, const char* split, int64_t stopped_after) {
  if (best_epoch_ == 0) return "";
  model.load_state_dict(best_weights_);  // onto the parameters' device
  char line[256];
  if (stopped_after > 0)
    std::snprintf(line, sizeof line, "early stop after epoch %lld: the %s %s has not improved for %lld epochs; "
                  "the saved model is epoch %lld's (%s %s %.4f)", static_cast<long long>(stopped_after), split,
                  best_.metric(), static_cast<long long>(patience_), static_cast<long long>(best_epoch_), split,
                  best_.metric(), best_.value);
  else
    std::snprintf(line, sizeof line, "--early-stop: the saved model is epoch %lld's, the best %s %s (%.4f)",
                  static_cast<long long>(best_epoch_), split, best_.metric(), best_.value);
  return line;
}

}  // namespace mt::app
