// state_dict / load_state_dict: a round trip reproduces the model, through memory and through a
// safetensors file image; bad checkpoints fail with one message naming every bad key, and load nothing.
#include <doctest/doctest.h>

#include "minitrain.h"
#include "nn/nn.h"
#include "nn/safetensors.h"

using namespace mt;

namespace {

std::shared_ptr<nn::Sequential> mlp(int64_t hidden = 8) {
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, hidden), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(hidden, 3));
}

std::string load_error(nn::Module& m, const NamedTensors& dict, bool strict = true) {
  try {
    m.load_state_dict(dict, strict);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("state_dict: a round trip reproduces the model's outputs") {
  manual_seed(1);
  auto a = mlp();
  auto b = mlp();  // different initial values
  Generator gen(3);
  const Tensor x = rand({5, 4}, gen);
  REQUIRE(a->forward(x).to_vector<float>() != b->forward(x).to_vector<float>());

  b->load_state_dict(a->state_dict());
  CHECK(a->forward(x).to_vector<float>() == b->forward(x).to_vector<float>());
  // Loading copies values: the models share no storage afterwards.
  CHECK(a->parameters()[0].storage() != b->parameters()[0].storage());
  CHECK(b->parameters()[0].requires_grad());
}

TEST_CASE("state_dict: entries are detached views of the module's tensors") {
  nn::Linear lin(2, 2);
  const NamedTensors sd = lin.state_dict();
  CHECK_FALSE(sd[0].second.requires_grad());
  CHECK(sd[0].second.storage() == lin.weight.storage());  // no copy: clone() for a snapshot
  {
    NoGradGuard no_grad;
    lin.weight.fill_(7.0);
  }
  CHECK(sd[0].second.to_vector<float>() == std::vector<float>(4, 7.0f));
}

TEST_CASE("state_dict: through a safetensors file image, and with a dtype cast") {
  manual_seed(2);
  auto a = mlp();
  auto b = mlp();
  const std::string bytes = encode_safetensors(a->state_dict());
  const SafetensorsFile loaded =
      decode_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "<memory>");
  b->load_state_dict(loaded.tensors);
  Generator gen(4);
  const Tensor x = rand({2, 4}, gen);
  CHECK(a->forward(x).to_vector<float>() == b->forward(x).to_vector<float>());

  // A float64 checkpoint loads into a float32 model (values are cast, as in PyTorch).
  NamedTensors as_double;
  for (const auto& [name, t] : a->state_dict()) as_double.emplace_back(name, t.to(kFloat64));
  b->load_state_dict(as_double);
  CHECK(b->parameters()[0].dtype() == kFloat32);
  CHECK(a->forward(x).to_vector<float>() == b->forward(x).to_vector<float>());
}

TEST_CASE("load_state_dict: strict errors list missing, unexpected and mis-shaped keys in one message") {
  auto model = mlp();
  const std::vector<float> before = model->parameters()[0].to_vector<float>();

  NamedTensors dict = mlp(/*hidden=*/5)->state_dict();  // 0.* and 2.weight have the wrong shapes
  dict.erase(dict.begin() + 3);                         // drop "2.bias"
  dict.emplace_back("2.scale", zeros({3}));
  const std::string msg = load_error(*model, dict);
  const size_t npos = std::string::npos;
  INFO(msg);
  CHECK(msg.find("into Sequential; nothing was loaded") != std::string::npos);
  CHECK(msg.find("missing keys: \"2.bias\"") != std::string::npos);
  CHECK(msg.find("unexpected keys: \"2.scale\"") != std::string::npos);
  CHECK(msg.find("size mismatch for \"0.weight\": the checkpoint has [5, 4], the module has [8, 4]") != npos);
  CHECK(msg.find("size mismatch for \"0.bias\": the checkpoint has [5], the module has [8]") != npos);
  CHECK(msg.find("size mismatch for \"2.weight\": the checkpoint has [3, 5], the module has [3, 8]") != npos);
  CHECK(model->parameters()[0].to_vector<float>() == before);  // nothing was copied

  NamedTensors twice = model->state_dict();
  twice.push_back(twice[0]);
  CHECK(load_error(*model, twice).find("keys given more than once: \"0.weight\"") != std::string::npos);
}

TEST_CASE("load_state_dict: non-strict skips missing and unexpected keys, but never a wrong shape") {
  auto model = mlp();
  NamedTensors dict = mlp()->state_dict();
  const Tensor new_bias = dict[1].second;
  dict.erase(dict.begin() + 2, dict.end());  // keep layer 0 only
  dict.emplace_back("extra", zeros({1}));

  const nn::LoadStateDictResult r = model->load_state_dict(dict, /*strict=*/false);
  CHECK(r.missing_keys == std::vector<std::string>{"2.weight", "2.bias"});
  CHECK(r.unexpected_keys == std::vector<std::string>{"extra"});
  CHECK(model->state_dict()[1].second.to_vector<float>() == new_bias.to_vector<float>());

  dict[0].second = zeros({1, 1});
  CHECK(load_error(*model, dict, /*strict=*/false).find("size mismatch for \"0.weight\"") != std::string::npos);
}
