// Checkpoint files and folders (nn/checkpoint.h): a mid-epoch checkpoint's extra fields round-trip,
// and Note [Checkpoint names]: epoch and step checkpoints order by training progress, and pruning
// keeps the newest epoch checkpoints and only the step checkpoints newer than all of them.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <unistd.h>

#include "nn/checkpoint.h"
#include "optim/grad_scaler.h"
#include "tensor/raw_ops.h"

using namespace mt;
namespace fs = std::filesystem;

namespace {

// A fresh folder under the system's temp dir, removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() : path(fs::temp_directory_path() / ("mt-ckpt-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

Checkpoint small(int64_t epoch, int64_t step) {
  Checkpoint c;
  c.model = {{"w", from_vector(std::vector<float>{1.5f, -2.0f}, {2})}};
  c.epoch = epoch, c.step = step, c.loss = 0.25;
  return c;
}

std::set<std::string> names(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

}  // namespace

TEST_CASE("a mid-epoch checkpoint keeps its place in the epoch and its progress tensors") {
  TempDir dir;
  Checkpoint c = small(2, 21);
  c.epoch_batches = 5;
  c.progress["loss_sums"] = from_vector(std::vector<double>{1.0 / 3, 7, 2.5e-17, 9}, {2, 2});
  const std::string path = step_checkpoint_path(dir.path.string(), 3, 21);
  CHECK(fs::path(path).filename() == "checkpoint-epoch-000003-step-000000021.safetensors");
  save_checkpoint(path, c);
  const Checkpoint back = load_checkpoint(path);
  CHECK(back.epoch == 2);
  CHECK(back.step == 21);
  CHECK(back.epoch_batches == 5);
  REQUIRE(back.progress.count("loss_sums") == 1);
  CHECK(back.progress.at("loss_sums").to_vector<double>() == std::vector<double>{1.0 / 3, 7, 2.5e-17, 9});
  // An epoch checkpoint has no place in an epoch (and files from before the field read as 0).
  save_checkpoint(checkpoint_path(dir.path.string(), 2), small(2, 16));
  CHECK(load_checkpoint(checkpoint_path(dir.path.string(), 2)).epoch_batches == 0);
}

TEST_CASE("a checkpoint carries a GradScaler's state, and a scaler loaded from it scales on bit for bit") {
  TempDir dir;
  optim::GradScaler scaler({.init_scale = 1000.3, .growth_factor = 3.0, .backoff_factor = 0.3, .growth_interval = 5});
  scaler.update(777.7);  // a scale that is not a power of two: its float32 value must survive exactly
  Checkpoint c = small(1, 8);
  c.grad_scaler = scaler.state_dict();
  const std::string path = checkpoint_path(dir.path.string(), 1);
  save_checkpoint(path, c);
  const Checkpoint back = load_checkpoint(path);
  CHECK(back.grad_scaler.size() == 5);
  optim::GradScaler resumed;
  resumed.load_state_dict(back.grad_scaler);
  CHECK(resumed.get_scale() == scaler.get_scale());
  CHECK(resumed.options().growth_interval == 5);
  CHECK(resumed.options().backoff_factor == 0.3);
  CHECK(load_checkpoint(checkpoint_path(dir.path.string(), 1)).grad_scaler.count("_growth_tracker") == 1);
}

TEST_CASE("Note [Checkpoint names]: the newest is the furthest point of training, and pruning keeps what resumes") {
  TempDir dir;
  const std::string d = dir.path.string();
  const auto touch = [&](const std::string& path) { save_checkpoint(path, small(0, 0)); };
  touch(step_checkpoint_path(d, 1, 7));
  touch(step_checkpoint_path(d, 1, 14));
  touch(checkpoint_path(d, 1));
  CHECK(latest_checkpoint(d) == checkpoint_path(d, 1));  // an epoch's own checkpoint comes after its steps
  touch(step_checkpoint_path(d, 2, 21));
  CHECK(latest_checkpoint(d) == step_checkpoint_path(d, 2, 21));
  touch(step_checkpoint_path(d, 2, 28));
  std::ofstream(d + "/checkpoint-epoch-000002-step-000000035.safetensors.tmp.99") << "cut short";
  CHECK(latest_checkpoint(d) == step_checkpoint_path(d, 2, 28));  // a temp file is not a checkpoint

  // keep 1: epoch 1's step checkpoints are older than its epoch checkpoint, so they go; of epoch
  // 2's, the newest one stays. Other files are left alone.
  prune_checkpoints(d, 1);
  CHECK(names(dir.path) == std::set<std::string>{"checkpoint-epoch-000001.safetensors",
                                                 "checkpoint-epoch-000002-step-000000028.safetensors",
                                                 "checkpoint-epoch-000002-step-000000035.safetensors.tmp.99"});
  touch(checkpoint_path(d, 2));
  touch(checkpoint_path(d, 3));
  prune_checkpoints(d, 2);
  CHECK(names(dir.path) == std::set<std::string>{"checkpoint-epoch-000002.safetensors",
                                                 "checkpoint-epoch-000003.safetensors",
                                                 "checkpoint-epoch-000002-step-000000035.safetensors.tmp.99"});
}

TEST_CASE("Note [Damaged checkpoints]: a checkpoint whose bytes changed is refused, and the newest intact one is taken") {
  TempDir dir;
  const std::string d = dir.path.string();
  for (int64_t epoch = 1; epoch <= 3; ++epoch) save_checkpoint(checkpoint_path(d, epoch), small(epoch, 10 * epoch));
  // small()'s only tensor, model/w (2 floats), is the whole data section: the file's last 8 bytes.
  const auto flip_last_byte = [](const std::string& path) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char byte = static_cast<char>(f.get() ^ 0x04);
    f.seekp(-1, std::ios::end);
    f.put(byte);
  };
  flip_last_byte(checkpoint_path(d, 3));

  const std::string named = checkpoint_path(d, 3) + ": tensor 'model/w' fails its checksum";
  CHECK_THROWS_WITH_AS(load_checkpoint(checkpoint_path(d, 3)), doctest::Contains(named.c_str()), Error);

  NewestIntact newest = load_newest_intact_checkpoint(d);
  CHECK(newest.path == checkpoint_path(d, 2));
  CHECK(newest.checkpoint.epoch == 2);
  REQUIRE(newest.skipped.size() == 1);
  CHECK(newest.skipped[0].find(named) != std::string::npos);

  // None intact: an error, not a fresh start; none at all: nothing to resume, no error.
  flip_last_byte(checkpoint_path(d, 1));
  flip_last_byte(checkpoint_path(d, 2));
  CHECK_THROWS_WITH_AS(load_newest_intact_checkpoint(d), doctest::Contains("none of the 3 checkpoints in"), Error);
  CHECK(load_newest_intact_checkpoint((dir.path / "empty").string()).path.empty());
}
