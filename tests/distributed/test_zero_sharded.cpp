// Sharded checkpoints of ZeRO (nn/sharded_checkpoint.h, Note [Sharded checkpoints]): the pieces a
// rank holds (ZeroRedundancyOptimizer::local_state) are exactly its ranges of the consolidated state;
// shard files written by 2 and 3 ranks, under stages 1 and 2, read back as that state, bit for bit;
// and a missing, damaged or mismatched shard, or an element no shard holds, is one clear error.
// Not "DDP: " cases: the ranks are forked here and share files through the temporary folder.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "distributed/ddp/ddp.h"
#include "distributed/store/tcp_store.h"
#include "distributed/zero/zero.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "nn/sharded_checkpoint.h"
#include "optim/adam.h"
#include "tensor/generator.h"
#include "tensor/raw_ops.h"

using namespace mt;
using namespace mt::dist;

namespace {

const bool kNoBackend = !test::group_backend_available();

// About 300 bytes per bucket: shards cut through parameters, and at 3 ranks buckets have tails.
constexpr DDPOptions kSmallBuckets{.bucket_cap_mb = 300.0 / (1024 * 1024), .first_bucket_cap_mb = 300.0 / (1024 * 1024)};

std::shared_ptr<nn::Sequential> make_mlp() {
  manual_seed(1);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(16, 3));
}

void train_step(DistributedDataParallel& ddp, optim::Optimizer& opt, int64_t step, int rank, int world) {
  Generator gen(100 + static_cast<uint64_t>(step));
  const Tensor x = randn({4 * world, 6}, gen), y = randn({4 * world, 3}, gen);
  opt.zero_grad();
  nn::F::mse_loss(ddp.forward(x.narrow(0, 4 * rank, 4)), y.narrow(0, 4 * rank, 4)).backward();
  opt.step();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.sizes() == y.sizes() && x.dtype() == y.dtype() &&
         std::memcmp(x.raw_data(), y.raw_data(), x.numel() * element_size(x.dtype())) == 0;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The error load_checkpoint(path) throws, or "" when it loads.
std::string load_error(const std::string& path) {
  try {
    load_checkpoint(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Rank 0, after the round trip: each kind of bad shard is one error naming it.
void check_bad_shards(const std::string& index, const std::string& dir, int world, int stage, const Checkpoint& c,
                      const std::vector<std::string>& tables) {
  namespace fs = std::filesystem;
  const std::string shard1 = shard_path(index, 1, world), saved = dir + "/saved-shard";
  fs::copy_file(shard1, saved, fs::copy_options::overwrite_existing);
  {  // damaged: one byte of the data flipped, the file's own checksum catches it
    std::fstream f(shard1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-2, std::ios::end);
    const char b = static_cast<char>(f.get() ^ 0x55);
    f.seekp(-2, std::ios::end);
    f.put(b);
  }
  std::string e = load_error(index);
  MT_CHECK(e.find("shard-00001-of-0000") != std::string::npos && e.find("checksum") != std::string::npos,
           "a damaged shard: ", e);
  fs::remove(shard1);
  e = load_error(index);
  MT_CHECK(e.find("shard file") != std::string::npos && e.find("is missing") != std::string::npos, "a missing shard: ", e);
  // Another save's shard: a whole, valid file whose pieces are not the ones the index describes.
  save_checkpoint_shard(index, 1, world, {{.name = "optimizer/state.0.exp_avg", .shape = {16, 6}, .offset = 0,
                                           .data = ones({96})}});
  e = load_error(index);
  MT_CHECK(e.find("does not match the index") != std::string::npos, "a mismatched shard: ", e);
  fs::copy_file(saved, shard1, fs::copy_options::overwrite_existing);
  MT_CHECK(load_error(index).empty(), "the restored shard loads: ", load_error(index));
  // An index whose shards leave elements out: shard 1 (and its table) empty.
  const std::string holes = dir + "/holes.safetensors";
  std::vector<std::string> partial = tables;
  for (int r = 0; r < world; ++r)
    if (r != 0) partial[static_cast<size_t>(r)] = save_checkpoint_shard(holes, r, world, {});
  fs::create_directories(shards_folder(holes));
  fs::copy_file(shard_path(index, 0, world), shard_path(holes, 0, world), fs::copy_options::overwrite_existing);
  save_sharded_index(holes, c, stage, partial);
  e = load_error(holes);
  MT_CHECK(e.find("is in none of the") != std::string::npos, "an element no shard holds: ", e);
}

}  // namespace

TEST_CASE("ZeRO sharded checkpoint: each rank's pieces are its ranges of the consolidated state, and shards "
          "written at 2 and 3 ranks under stages 1 and 2 read back as that state" * doctest::skip(kNoBackend)) {
  for (const int world : {2, 3})
    for (const int stage : {1, 2}) {
      CAPTURE(world);
      CAPTURE(stage);
      const std::string dir = std::filesystem::temp_directory_path() /
                              ("mt-zero-sharded-" + std::to_string(::getpid()) + "-" + std::to_string(world) +
                               "-" + std::to_string(stage));
      std::filesystem::create_directories(dir);
      const std::string index = dir + "/checkpoint-epoch-000001.safetensors";
      const int port = find_free_port();
      test::run_ranks(world, [&](int rank) {
        auto pg = test::join_group(rank, world, port);
        auto model = make_mlp();
        auto ddp = std::make_shared<DistributedDataParallel>(model, pg, kSmallBuckets);
        ZeroRedundancyOptimizer opt(ddp, std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 0.01}),
                                    {.stage = stage});
        for (int64_t step = 0; step < 2; ++step) train_step(*ddp, opt, step, rank, world);
        const LocalShard local = opt.local_state();  // not a collective
        const optim::StateDict whole = opt.state_dict();  // a collective
        int64_t held = 0, total = 0;
        for (const ShardPiece& p : local.pieces) {
          const auto it = whole.find(p.name);
          MT_CHECK(it != whole.end() && it->second.sizes() == p.shape && p.data.dim() == 1, "piece '", p.name, "'");
          const Tensor want = raw::narrow(raw::reshape(it->second, {it->second.numel()}), 0, p.offset, p.data.numel());
          MT_CHECK(same_bits(p.data, want), "rank ", rank, ": piece '", p.name, "' at ", p.offset, " is not its range");
          if (p.name.find("exp_avg_sq") != std::string::npos) held += p.data.numel();
        }
        for (const auto& [key, value] : whole)
          if (key.find("exp_avg_sq") != std::string::npos) total += value.numel();
        // About 1/N of each field per rank, plus the tails (fewer than N elements per bucket).
        MT_CHECK(held > 0 && held <= total / world + 40, "rank ", rank, " holds ", held, " of ", total, " moments");
        for (const auto& [key, value] : local.replicated)
          MT_CHECK(key.rfind("param_groups.", 0) == 0 && same_bits(value, whole.at(key)), "replicated '", key, "'");

        // Writing: (1) every rank its shard, (2) the tables to rank 0 (here through files), (3) the index.
        Checkpoint c;
        c.epoch = 1, c.step = 2, c.loss = 0.5;
        c.model = model->state_dict();
        std::vector<ShardPiece> pieces;
        if (rank == 0) {
          Checkpoint w = c;
          w.optimizer = local.replicated;
          pieces = whole_pieces(w);
        }
        for (const ShardPiece& p : local.pieces)
          pieces.push_back({.name = "optimizer/" + p.name, .shape = p.shape, .offset = p.offset, .data = p.data});
        std::ofstream(dir + "/table-" + std::to_string(rank)) << save_checkpoint_shard(index, rank, world, pieces);
        pg->barrier()->wait();
        std::vector<std::string> tables;
        for (int r = 0; r < world; ++r) tables.push_back(read_text(dir + "/table-" + std::to_string(r)));
        if (rank == 0) save_sharded_index(index, c, stage, tables);
        pg->barrier()->wait();

        const Checkpoint back = load_checkpoint(index);  // every rank reads every shard
        MT_CHECK(back.epoch == 1 && back.step == 2 && back.loss == 0.5, "the counters come back");
        MT_CHECK(back.optimizer.size() == whole.size(), back.optimizer.size(), " optimizer entries, expected ", whole.size());
        for (const auto& [key, value] : whole)
          MT_CHECK(back.optimizer.count(key) && same_bits(back.optimizer.at(key), value), "'", key, "' read back differs");
        MT_CHECK(back.model.size() == c.model.size(), "the model's tensors");
        for (size_t i = 0; i < c.model.size(); ++i)
          MT_CHECK(back.model[i].first == c.model[i].first && same_bits(back.model[i].second, c.model[i].second),
                   "model tensor ", c.model[i].first, " read back differs (or out of order)");
        pg->barrier()->wait();  // every rank has read the shards
        if (rank == 0) check_bad_shards(index, dir, world, stage, c, tables);
      }, std::chrono::seconds(60));
      std::filesystem::remove_all(dir);
    }
}
