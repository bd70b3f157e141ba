// A one-line progress bar for the steps of an epoch, drawn only when stdout is a terminal (so logs
// and pipes never see carriage returns), and at most ten times a second. mpirun gives its ranks a
// terminal of its own even when its output goes to a file, so the launcher sets MT_NO_PROGRESS=1
// for them when its own stdout is not a terminal (launcher.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace mt::app {

class ProgressBar {
 public:
  ProgressBar(bool enabled, int64_t epoch, int64_t epochs, int64_t total)
      : enabled_(enabled && isatty(STDOUT_FILENO) && !std::getenv("MT_NO_PROGRESS")), epoch_(epoch), epochs_(epochs), total_(total) {}
  ~ProgressBar() { clear(); }

  void update(int64_t done, double loss) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr int kWidth = 30;
    const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
    std::printf("\rEpoch %lld/%lld [", static_cast<long long>(epoch_), static_cast<long long>(epochs_));
    for (int i = 0; i < kWidth; ++i) std::putchar(i < filled ? '=' : (i == filled ? '>' : ' '));
    std::printf("] %lld/%lld loss %.4f ", static_cast<long long>(done), static_cast<long long>(total_), loss);
    std::fflush(stdout);
    drawn_ = true;
  }

  void clear() {
    if (!drawn_) return;
    std::printf("\r%*s\r", 80, "");
    std::fflush(stdout);
    drawn_ = false;
  }

 private:
  bool enabled_;
  int64_t epoch_, epochs_, total_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace mt::app
