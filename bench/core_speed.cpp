// core_speed: is a slow seed-step reading the machine or minitrain? (bench/README.md, "The seed
// step's two speeds"). The seed step (bench_core's seed_step_us) reads either about 1.6 or about
// 2.2 µs from run to run on this project's 2-vCPU machine, with the same binary and one thread.
// This program times it in short rounds, and between them a loop that touches no memory and no
// minitrain code: a chain of dependent integer adds, one per cycle on an idle core. If the two
// slow down together, what changed is the core the guest was given, not the code. The add loop is
// timed on the wall clock and on the thread's CPU-time clock: when both slow down alike, the guest
// counted the thread as running all along, so bench/timing.h's CPU-time figures cannot filter it
// out either. The guest sees no hardware counters (no `cpu` PMU under /sys/bus/event_source), so
// what takes the core away is not visible from inside: a hyperthread sibling busy on the host, host
// preemption the guest is not told of (top shows 0 % steal), or a lower clock.
//
// Output: one line per round, then the seed step's median over the rounds where the add loop ran
// within 15 % of its fastest reading and over those where it ran 1.5× slower or more, and the
// correlation of the two timings over all rounds. One thread (MT_NUM_THREADS=1 recommended).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <vector>

#include "minitrain.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// n dependent adds; the empty asm keeps v in a register and the loop from being folded.
__attribute__((noinline)) uint64_t add_chain(uint64_t n, uint64_t v) {
  for (uint64_t i = 0; i < n; ++i) {
    v += i;
    asm volatile("" : "+r"(v));
  }
  return v;
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double correlation(const std::vector<double>& a, const std::vector<double>& b) {
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += a[i] / a.size(), mb += b[i] / b.size();
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += (a[i] - ma) * (b[i] - mb), aa += (a[i] - ma) * (a[i] - ma), bb += (b[i] - mb) * (b[i] - mb);
  }
  return ab / std::sqrt(aa * bb);
}

// kRounds rounds: kSteps seed steps, then kAdds dependent adds; each round's times, one line each.
template <typename Step>
void measure(const Step& step, std::vector<double>& step_us, std::vector<double>& add_ns) {
  constexpr int kRounds = 40, kSteps = 100000;  // about 0.2 s of steps per round
  constexpr uint64_t kAdds = 200000000;         // 0.05-0.1 s of adds
  for (int i = 0; i < kSteps; ++i) step();      // warm-up
  for (int r = 0; r < kRounds; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < kSteps; ++i) step();
    step_us.push_back(seconds_since(t0) / kSteps * 1e6);
    t0 = Clock::now();
    const double c0 = thread_cpu_seconds();
    add_chain(kAdds, r);  // its asm volatile keeps the call
    const double add_cpu_ns = (thread_cpu_seconds() - c0) / kAdds * 1e9;
    add_ns.push_back(seconds_since(t0) / kAdds * 1e9);
    std::printf("round %2d  seed step %.3f us  add %.3f ns wall, %.3f ns CPU time (%.2f G adds/s)\n", r,
                step_us.back(), add_ns.back(), add_cpu_ns, 1 / add_ns.back());
  }
}

void summarize(const std::vector<double>& step_us, const std::vector<double>& add_ns) {
  const double fastest = *std::min_element(add_ns.begin(), add_ns.end());
  std::vector<double> full, slowed;
  for (size_t r = 0; r < add_ns.size(); ++r) {
    if (add_ns[r] <= 1.15 * fastest) full.push_back(step_us[r]);
    if (add_ns[r] >= 1.5 * fastest) slowed.push_back(step_us[r]);
  }
  std::printf("seed step, add loop at full rate: %.2f us (%zu rounds); at 1.5x slower or more: %.2f us (%zu rounds)\n",
              median(full), full.size(), median(slowed), slowed.size());
  std::printf("correlation of seed step and add time over %zu rounds: %.2f\n", add_ns.size(),
              correlation(step_us, add_ns));
}

}  // namespace

int main() {
  namespace nn = mt::nn;
  mt::Generator gen(4);
  mt::manual_seed(4);
  const mt::Tensor x = mt::randn({32, 10}, gen), y = mt::randn({32, 1}, gen);  // bench_core's seed_step
  nn::Linear model(10, 1);
  mt::optim::SGD opt(model.parameters(), {.lr = 0.01});
  nn::MSELoss loss_fn;
  const auto step = [&] {
    opt.zero_grad();
    const mt::Tensor loss = loss_fn(model.forward(x), y);
    loss.backward();
    opt.step();
  };
  std::vector<double> step_us, add_ns;
  measure(step, step_us, add_ns);
  summarize(step_us, add_ns);
  return 0;
}
