// Grad mode: whether differentiable ops record history. Thread-local (each thread decides for
// itself, like PyTorch), switched by RAII guards so it is restored on every exit path.
#pragma once

namespace mt {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Disables recording for its scope: optimizer steps, evaluation, gradient accumulation.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace mt
