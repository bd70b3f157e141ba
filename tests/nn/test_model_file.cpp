// Model files (nn/model_file.h): a network saved with its metadata comes back from load_model as the
// same function, with its input preparation; metadata that names no network this library builds,
// or tensors that are not the named network's, are one-line errors naming the file. (mini_train's
// own files against `mini_train predict`: tests/apps/trainer_test.sh, case load_model.)
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "autograd/grad_mode.h"
#include "nn/model_file.h"
#include "nn/networks.h"
#include "tensor/generator.h"
#include "tensor/raw_ops.h"

using namespace mt;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("mt-model-" + std::to_string(::getpid()) + "-" + name)).string();
}

// `net`'s weights in a file with `metadata`; returns its path.
std::string save(const nn::Module& net, const nn::Metadata& metadata, const std::string& name) {
  const std::string path = temp_path(name);
  save_safetensors(path, net.state_dict(), metadata);
  return path;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return raw::max(raw::unary(UnaryOp::Abs, raw::binary(BinaryOp::Sub, a, b))).item();
}

}  // namespace

TEST_CASE("load_model: an MLP classifier comes back with its standardisation") {
  manual_seed(3);
  const std::shared_ptr<nn::Module> net = nn::make_mlp(4, {8, 6}, 3);
  const std::string path = save(*net, {{"format", nn::kModelFormat}, {"model", "mlp:4-8-6-3"},
                                       {"task", "classification"}, {"classes", "3"}, {"inputs", "4"},
                                       {"standardize_mean", "2.5"}, {"standardize_std", "0.5"}}, "mlp");
  const nn::LoadedModel m = nn::load_model(path);
  std::filesystem::remove(path);
  CHECK(m.info.kind == "mlp");
  CHECK(m.info.hidden == std::vector<int64_t>{8, 6});
  Generator gen(1);
  const Tensor x = randn({5, 2, 2}, gen);  // rows of 4 values, as (5, 2, 2): flattened by prepare
  NoGradGuard no_grad;
  const Tensor want = net->forward(raw::unary(UnaryOp::MulScalar, raw::unary(UnaryOp::AddScalar,
                                                                             raw::flatten(x, 1, -1), -2.5), 2.0));
  CHECK(max_abs_diff(m.forward(x), want) == 0);
  const Tensor p = m.probabilities(x);  // (5, 3), rows sum to 1
  CHECK(p.sizes() == Shape{5, 3});
  CHECK(max_abs_diff(raw::sum(p, {1}), full({5}, 1.0)) < 1e-6);
  CHECK_THROWS_WITH_AS(m.forward(randn({5, 3}, gen)), doctest::Contains("has 3 values per row, but the model "
                                                                        "'mlp:4-8-6-3' takes 4"), Error);
}

TEST_CASE("load_model: the CNN and a linear regression") {
  manual_seed(4);
  const std::shared_ptr<nn::Module> cnn = nn::make_image_cnn(10);
  const std::string path = save(*cnn, {{"format", nn::kModelFormat}, {"model", "cnn:784-10"},
                                       {"task", "classification"}, {"classes", "10"}, {"inputs", "784"}}, "cnn");
  const nn::LoadedModel m = nn::load_model(path);
  std::filesystem::remove(path);
  Generator gen(2);
  const Tensor images = randn({2, 28, 28}, gen);
  NoGradGuard no_grad;
  cnn->eval();
  CHECK(max_abs_diff(m.forward(images), cnn->forward(raw::flatten(images, 1, -1))) == 0);

  const std::shared_ptr<nn::Module> linear = nn::make_mlp(3, {}, 2);
  const std::string lpath = save(*linear, {{"format", nn::kModelFormat}, {"model", "linear:3-2"},
                                           {"task", "regression"}, {"outputs", "2"}, {"inputs", "3"}}, "linear");
  const nn::LoadedModel l = nn::load_model(lpath);
  std::filesystem::remove(lpath);
  const Tensor x = randn({4, 3}, gen);
  CHECK(max_abs_diff(l.forward(x), linear->forward(x)) == 0);
  CHECK_THROWS_WITH_AS(l.probabilities(x), doctest::Contains("is a regression"), Error);
}

TEST_CASE("load_model: files that are not model files, or not their network's, are refused naming them") {
  manual_seed(5);
  const std::shared_ptr<nn::Module> net = nn::make_mlp(4, {}, 1);
  const nn::Metadata ok = {{"format", nn::kModelFormat}, {"model", "linear:4-1"}, {"task", "regression"},
                           {"outputs", "1"}, {"inputs", "4"}};
  const auto refused = [&](nn::Metadata metadata, const std::string& want) {
    const std::string path = save(*net, metadata, "bad");
    CHECK_THROWS_WITH_AS(nn::load_model(path), doctest::Contains((path + ": " + want).c_str()), Error);
    std::filesystem::remove(path);
  };
  refused({}, "not a model file saved by mini_train");
  nn::Metadata m = ok;
  m["model"] = "rnn:4-1";
  refused(m, "metadata 'model' is 'rnn:4-1', not a network this library builds");
  m = ok;
  m["inputs"] = "5";
  refused(m, "the metadata's widths disagree with its model 'linear:4-1'");
  m = ok;
  m["model"] = "mlp:4-3-1";
  refused(m, "the file's tensors (0.bias, 0.weight) are not those of its model 'mlp:4-3-1'");
  m = ok;
  m["model"] = "linear:2-2", m["inputs"] = "2", m["outputs"] = "2";
  refused(m, "'0.weight' is [1, 4] in the file but [2, 2] in its model 'linear:2-2'");
  m = ok;
  m["standardize_mean"] = "0", m["standardize_std"] = "-1";
  refused(m, "standardize_mean/std are not usable numbers");
}
