// bench_trace: what tracing costs (trace/tracer.h, Note [Free when off]). The seed step and the MLP
// step of bench_core (Linear(10, 1), batch 32, SGD, MSE; 784-256-10 ReLU, batch 128, SGD momentum,
// cross-entropy), each timed with no tracer and with a tracer recording every step, in interleaved
// rounds on one thread, in CPU time of the thread (steadier than wall time on a loaded machine).
// Output: `<metric> <value>` lines, medians over the rounds, and the ratio on/off. Tracing off
// against a build without the tracer at all is measured across two builds (bench/README.md, Tracing).
//
//   bench_trace [ROUNDS]     (default 5)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "autograd/detail/node_trace.h"
#include "bench/timing.h"
#include "minitrain.h"
#include "trace/tracer.h"

namespace {

using mt::Tensor;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `step` per call with tracing off, then on (a tracer recording, as inside --trace-steps).
// The tracer is made fresh per round so that its memory stays bounded.
template <typename Step>
void compare(const char* name, double scale, const char* unit, int rounds, const mt::nn::Module& model, Step step) {
  std::vector<double> off, on;
  for (int r = 0; r < rounds; ++r) {
    off.push_back(bench::time_per_call(step, 0.1, 3).cpu_median_s);
    mt::trace::Tracer tracer({.first_step = 1, .last_step = 1, .max_events = size_t{1} << 22});
    mt::trace_parameter_names(tracer, model.named_parameters());
    tracer.begin_step(1);
    on.push_back(bench::time_per_call(step, 0.1, 3).cpu_median_s);
    tracer.stop();
  }
  const double a = median(off), b = median(on);
  std::printf("%s_off_%s %.3f\n%s_on_%s %.3f\n%s_on_over_off %.3f\n", name, unit, a * scale, name, unit, b * scale,
              name, b / a);
  std::fflush(stdout);
}

template <typename Loss>
auto train_step(mt::nn::Module& model, mt::optim::Optimizer& opt, Loss& loss_fn, const Tensor& x, const Tensor& y) {
  return [&] {
    opt.zero_grad();
    const Tensor loss = loss_fn(model.forward(x), y);
    loss.backward();
    opt.step();
  };
}

}  // namespace

int main(int argc, char** argv) {
  try {
    namespace nn = mt::nn;
    const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
    mt::Generator gen(4);
    mt::manual_seed(4);
    {  // x: (32, 10)  y: (32, 1)
      const Tensor x = mt::randn({32, 10}, gen), y = mt::randn({32, 1}, gen);
      nn::Linear model(10, 1);
      mt::optim::SGD opt(model.parameters(), {.lr = 0.01});
      nn::MSELoss loss_fn;
      compare("seed_step", 1e6, "us", rounds, model, train_step(model, opt, loss_fn, x, y));
    }
    {  // x: (128, 784)  labels: (128) int64
      const Tensor x = mt::randn({128, 784}, gen);
      const Tensor y = mt::from_vector(std::vector<int64_t>(128, 0), {128});
      for (int64_t i = 0; i < 128; ++i) y.data_ptr<int64_t>()[i] = i % 10;
      nn::Sequential model(std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
                           std::make_shared<nn::Linear>(256, 10));
      mt::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
      nn::CrossEntropyLoss loss_fn;
      compare("mlp_step", 1e3, "ms", rounds, model, train_step(model, opt, loss_fn, x, y));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_trace: %s\n", e.what());
    return 1;
  }
}
