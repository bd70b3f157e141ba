// Checkpoints of a model trained on a GPU (what mini_train --gpus --checkpoint-dir/--resume does):
// the file is written from device memory, read on the host, and loaded into a fresh model and
// optimizer on the GPU; from there both runs take the same steps and end at the same bits.
// Needs a GPU, or the CUDA emulator (tests/cuda_emu; tests/cuda/main.cpp skips otherwise).
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "minitrain.h"
#include "nn/checkpoint.h"
#include "cuda_test_util.h"

using namespace mt;

namespace {

using test::kGpu;
using test::sample;

// An MLP on the GPU, initialised from `seed`, and its Adam (whose state lives on the GPU too).
struct Trainee {
  std::shared_ptr<nn::Sequential> net = std::make_shared<nn::Sequential>();
  std::unique_ptr<optim::Adam> opt;
  explicit Trainee(uint64_t seed) {
    manual_seed(seed);
    net->push_back(std::make_shared<nn::Linear>(6, 5));
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::Linear>(5, 2));
    net->to(kGpu);
    opt = std::make_unique<optim::Adam>(net->parameters(), optim::AdamOptions{.lr = 0.05});
  }
  // One step on batch k:  x: (8, 6)  y: (8, 2), the same for the same k.
  void step(int k) {
    const Tensor x = sample({8, 6}, kFloat32, 100 + k).to(kGpu), y = sample({8, 2}, kFloat32, 200 + k).to(kGpu);
    const Tensor loss = nn::MSELoss()(net->forward(x), y);
    opt->zero_grad();
    loss.backward();
    opt->step();
  }
  std::vector<float> weights() const {
    std::vector<float> all;
    for (const Tensor& p : net->parameters()) {
      const std::vector<float> v = p.detach().to(kCPU).to_vector<float>();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }
};

}  // namespace

TEST_CASE("a GPU model and its optimizer checkpoint to a file and resume on the GPU, bit for bit") {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("mt-gpu-checkpoint-" + std::to_string(::getpid()) + ".safetensors")).string();
  Trainee first(1);
  for (int k = 0; k < 3; ++k) first.step(k);
  Checkpoint c;
  c.model = first.net->state_dict();
  c.optimizer = first.opt->state_dict();
  c.epoch = 1, c.step = 3;
  REQUIRE(c.model.front().second.device() == kGpu);  // written straight from device memory
  save_checkpoint(path, c);

  // A fresh process would build the model from another seed, then load: the GPU holds the checkpoint.
  Trainee resumed(2);
  const Checkpoint back = load_checkpoint(path);
  std::filesystem::remove(path);
  CHECK(back.model.front().second.device() == kCPU);
  resumed.net->load_state_dict(back.model);
  resumed.opt->load_state_dict(back.optimizer);
  for (const Tensor& p : resumed.net->parameters()) CHECK(p.device() == kGpu);
  CHECK(resumed.weights() == first.weights());
  // Adam's moments and step count came back too: the next steps agree exactly.
  for (int k = 3; k < 6; ++k) first.step(k), resumed.step(k);
  CHECK(resumed.weights() == first.weights());
  Trainee fresh_optimizer(2);
  fresh_optimizer.net->load_state_dict(back.model);
  for (int k = 3; k < 6; ++k) fresh_optimizer.step(k);
  CHECK(fresh_optimizer.weights() != first.weights());  // the optimizer state is what made them agree
}
