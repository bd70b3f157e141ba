// The SIGINT/SIGTERM line (see interrupt.h).
//
// Note [Interrupt line]: the line is written by the signal handler itself, so it must not allocate
// or lock (the signal may arrive inside malloc, on any thread). So the handler only reads what the
// trainer published beforehand and formats it into a fixed buffer: epoch and step are atomics
// stored once per step; the newest checkpoint's path is copied into one of two fixed buffers, the
// one not being read, and then published by an atomic index. (A handler racing two checkpoint
// writes in a row could read a buffer being rewritten; checkpoints are at least one step apart, and
// the handler's write takes microseconds.) After writing, the handler returns with the signal's
// default action restored (SA_RESETHAND) and raises it again, so the process still dies by the
// signal and its exit status says so, as it did without a handler. A signal the process inherited
// as ignored (nohup, a non-interactive shell's background job for SIGINT) is left ignored.
#include "apps/mini_train/interrupt.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>

#include "nn/checkpoint.h"

namespace mt::app {
namespace {

constexpr size_t kPathMax = 4096;

// A line assembled without allocating: usable in a signal handler.
struct Line {
  char text[3 * kPathMax];
  size_t n = 0;
  void add(const char* s) {
    while (*s != '\0' && n + 1 < sizeof text) text[n++] = *s++;
  }
  void add(int64_t v) {
    char digits[24];
    int k = 0;
    uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    do {
      digits[k++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0);
    if (v < 0) add("-");
    while (k > 0 && n + 1 < sizeof text) text[n++] = digits[--k];
  }
};

// What a resume would start from: the newest checkpoint, or why there is none.
void fill_saved(Line& l, const char* dir, const char* newest) {
  if (*dir == '\0') {
    l.add("nothing saved (no --checkpoint-dir)");
  } else if (*newest == '\0') {
    l.add("nothing saved yet (no checkpoint in ");
    l.add(dir);
    l.add(")");
  } else {
    l.add("checkpoint ");
    l.add(newest);
    l.add(" is the newest; resume with --resume auto");
  }
}

// epoch > 0: where training is; 0: before the first step.
void fill(Line& l, int sig, const char* dir, const char* newest, int64_t epoch, int64_t step) {
  l.add("mini_train: interrupted (");
  l.add(sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal");
  l.add(")");
  if (epoch > 0) {
    l.add(" in epoch ");
    l.add(epoch);
    l.add(" after step ");
    l.add(step);
  } else {
    l.add(" before the first step");
  }
  l.add(": ");
  fill_saved(l, dir, newest);
}


// What the handler reads (Note [Interrupt line]).
char g_dir[kPathMax];
char g_newest[2][kPathMax];
std::atomic<int> g_current{0};
std::atomic<int64_t> g_epoch{0}, g_step{0};

void copy_bounded(char* to, const std::string& from) {
  const size_t n = std::min(from.size(), kPathMax - 1);
  std::memcpy(to, from.data(), n);
  to[n] = '\0';
}

void on_signal(int sig) {
  Line l;
  fill(l, sig, g_dir, g_newest[g_current.load()], g_epoch.load(), g_step.load());
  l.add("\n");
  const ssize_t ignored = ::write(STDERR_FILENO, l.text, l.n);
  (void)ignored;  // nothing to do if stderr is gone
  std::raise(sig);  // delivered when the handler returns, with the default action (SA_RESETHAND)
}

}  // namespace

void install_interrupt_line(const std::string& checkpoint_dir) {
  copy_bounded(g_dir, checkpoint_dir);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);  // one line even when both arrive together
  sigaddset(&sa.sa_mask, SIGTERM);
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    // An ignored signal stays ignored: nohup, or a shell's background job, asked for that.
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
}

void note_progress(int64_t epoch, int64_t step) {
  g_epoch.store(epoch, std::memory_order_relaxed);
  g_step.store(step, std::memory_order_relaxed);
}

void note_checkpoint(const std::string& path) {
  const int next = 1 - g_current.load();
  copy_bounded(g_newest[next], path);
  g_current.store(next);
}

std::string what_is_saved(const std::string& checkpoint_dir) {
  Line l;
  fill_saved(l, checkpoint_dir.c_str(), checkpoint_dir.empty() ? "" : latest_checkpoint(checkpoint_dir).c_str());
  return std::string(l.text, l.n);
}

}  // namespace mt::app
