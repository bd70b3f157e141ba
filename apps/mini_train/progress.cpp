// The progress bar of mini_train's epochs and evaluations (see progress.h).
#include "apps/mini_train/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace mt::app {

namespace {

// The terminal's width: the tty's own, else $COLUMNS, else 80.
int terminal_columns() {
  struct winsize ws {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* c = std::getenv("COLUMNS"); c && std::atoi(c) > 0) return std::atoi(c);
  return 80;
}

// 61234 -> "61k", 1234567 -> "1.2M": the rate's width stays small.
std::string short_count(double v) {
  char buf[32];
  if (v >= 1e6) std::snprintf(buf, sizeof buf, "%.1fM", v / 1e6);
  else if (v >= 1e4) std::snprintf(buf, sizeof buf, "%.0fk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::string clock_time(double s) {
  const long long t = static_cast<long long>(std::max(s, 0.0) + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", t / 60, t % 60);
  return buf;
}

}  // namespace

bool progress_wanted() {
  if (!::isatty(STDOUT_FILENO) || std::getenv("MT_NO_PROGRESS")) return false;
  // Started by mpirun (OpenMPI, MPICH/PMI, PMIx) or srun: not the user's terminal.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"})
    if (std::getenv(v)) return false;
  return true;
}

ProgressBar::ProgressBar(bool enabled, std::string head, int64_t total)
    : enabled_(enabled && progress_wanted()), head_(std::move(head)), total_(total),
      start_(std::chrono::steady_clock::now()) {}

std::string ProgressBar::line(const std::string& head, int64_t done, int64_t total, double loss, double samples_per_s,
                              double eta_s, int columns) {
  const int room = columns - 1;  // never the last column: writing there wraps some terminals
  char tail[160], shown_loss[32] = "";
  if (!std::isnan(loss)) std::snprintf(shown_loss, sizeof shown_loss, " loss %.4f", loss);
  // What gives way when the terminal is narrow, in order: the bar, then the word "samples".
  for (const char* unit : {" samples/s", "/s"}) {
    std::snprintf(tail, sizeof tail, "%lld/%lld%s %s%s ETA %s", static_cast<long long>(done),
                  static_cast<long long>(total), shown_loss, short_count(samples_per_s).c_str(), unit,
                  clock_time(eta_s).c_str());
    if (static_cast<int>(head.size() + 1 + std::strlen(tail)) <= room) break;
  }
  std::string out = head + " ";
  const int bar = std::min<int>(30, room - static_cast<int>(out.size() + std::strlen(tail)) - 3);
  if (bar >= 5) {  // the bar only where it fits; the numbers matter more
    const int filled = total > 0 ? static_cast<int>(bar * done / total) : bar;
    out += '[';
    for (int i = 0; i < bar; ++i) out += i < filled ? '=' : (i == filled ? '>' : ' ');
    out += "] ";
  }
  out += tail;
  if (static_cast<int>(out.size()) > room) out.resize(static_cast<size_t>(std::max(room, 0)));
  return out;
}

void ProgressBar::update(int64_t done, int64_t samples, double running_loss) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = samples / std::max(elapsed, 1e-9);
  const double eta = done > 0 ? elapsed / static_cast<double>(done) * static_cast<double>(total_ - done) : 0;
  const std::string text = line(head_, done, total_, running_loss, rate, eta, terminal_columns());
  // Pad over what the previous, possibly longer, line left.
  std::printf("\r%s%*s", text.c_str(), std::max(drawn_width_ - static_cast<int>(text.size()), 0), "");
  std::fflush(stdout);
  drawn_width_ = std::max(drawn_width_, static_cast<int>(text.size()));
}

void ProgressBar::clear() {
  if (drawn_width_ == 0) return;
  std::printf("\r%*s\r", drawn_width_, "");
  std::fflush(stdout);
  drawn_width_ = 0;
}

}  // namespace mt::app
