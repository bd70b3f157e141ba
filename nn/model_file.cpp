// Model files: reading the metadata, rebuilding the network, preparing its inputs (see model_file.h).
#include "nn/model_file.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "autograd/ops.h"
#include "nn/networks.h"
#include "tensor/raw_ops.h"

namespace mt::nn {

namespace {

// The widths of a signature's tail, "784-512-10" -> {784, 512, 10}; empty when one is not a number
// or is past kMaxWidth (networks.h).
std::vector<int64_t> widths_of(const std::string& tail) {
  std::vector<int64_t> widths;
  std::stringstream ss(tail);
  for (std::string part; std::getline(ss, part, '-');) {
    char* end = nullptr;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 1 || v > kMaxWidth) return {};
    widths.push_back(v);
  }
  return widths;
}

// A GPT's shape from the metadata keys "layers", "heads", "dim", "context", "vocab".
GPTOptions read_gpt_shape(const Metadata& m, const std::string& path) {
  const GPTOptions g{.vocab = metadata_count(m, "vocab", path, 1), .context = metadata_count(m, "context", path, 1),
                     .dim = metadata_count(m, "dim", path, 1), .layers = metadata_count(m, "layers", path, 1),
                     .heads = metadata_count(m, "heads", path, 1)};
  MT_CHECK(g.dim % g.heads == 0, path, ": metadata dim ", g.dim, " is not a multiple of heads ", g.heads);
  return g;
}

// The network `info` names, with fresh weights.
std::shared_ptr<Module> build_network(const ModelInfo& info) {
  if (info.kind == "gpt") return std::make_shared<GPT>(info.gpt);
  if (info.kind == "cnn") return make_image_cnn(info.out_features);
  return make_mlp(info.in_features, info.hidden, info.out_features);
}

// The first few names of a list, for one-line messages.
std::string some_names(const std::set<std::string>& names) {
  std::string out;
  size_t i = 0;
  for (auto it = names.begin(); it != names.end() && i < 6; ++it, ++i) out += (i ? ", " : "") + *it;
  if (names.size() > 6) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out.empty() ? "none" : out;
}

// The file's tensors into `module`: the same names and shapes, or one line naming the difference.
void load_weights(Module& module, const NamedTensors& tensors, const ModelInfo& info, const std::string& path) {
  const NamedTensors own = module.state_dict();
  std::set<std::string> want, got;
  for (const auto& [name, t] : own) want.insert(name);
  for (const auto& [name, t] : tensors) got.insert(name);
  MT_CHECK(want == got, path, ": the file's tensors (", some_names(got), ") are not those of its model '",
           info.signature, "' (", some_names(want), ")");
  NamedTensors weights = tensors;
  for (auto& [name, t] : weights) {
    const Tensor& dst = std::find_if(own.begin(), own.end(), [&](const auto& p) { return p.first == name; })->second;
    MT_CHECK(t.sizes() == dst.sizes(), path, ": '", name, "' is ", t.sizes(), " in the file but ", dst.sizes(),
             " in its model '", info.signature, "'");
    if (t.dtype() != dst.dtype()) t = raw::cast(t, dst.dtype());  // F64 or widened F16/BF16 weights
  }
  module.load_state_dict(weights);
}

}  // namespace

int64_t metadata_count(const Metadata& m, const std::string& key, const std::string& path, int64_t min) {
  const auto it = m.find(key);
  MT_CHECK(it != m.end(), path, ": the metadata has no '", key, "' (a model file has)");
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  MT_CHECK(!it->second.empty() && *end == '\0' && errno == 0 && v >= min, path, ": metadata '", key, "' is '",
           it->second, "', not a whole number >= ", min);
  return v;
}

ModelInfo read_model_info(const Metadata& m, const std::string& path) {
  const auto format = m.find("format");
  MT_CHECK(format != m.end() && format->second == kModelFormat, path, ": not a model file saved by mini_train "
           "(its metadata has no \"format\": \"", kModelFormat, "\"), so nothing says which network its tensors "
           "belong to");
  ModelInfo info;
  info.metadata = m;
  MT_CHECK(m.count("model"), path, ": the metadata has no 'model' (a model file has)");
  info.signature = m.at("model");
  const size_t colon = info.signature.find(':');
  info.kind = info.signature.substr(0, colon);
  MT_CHECK(m.count("task") && (m.at("task") == "classification" || m.at("task") == "regression"), path,
           ": metadata 'task' must be classification or regression");
  info.classification = m.at("task") == "classification";
  if (info.kind == "gpt") {
    info.gpt = read_gpt_shape(m, path);
    info.in_features = info.gpt.context, info.out_features = info.gpt.vocab;
    return info;
  }
  const std::vector<int64_t> widths = widths_of(colon == std::string::npos ? "" : info.signature.substr(colon + 1));
  MT_CHECK((info.kind == "linear" || info.kind == "mlp" || info.kind == "cnn") && widths.size() >= 2 &&
               (info.kind == "mlp" || widths.size() == 2),
           path, ": metadata 'model' is '", info.signature, "', not a network this library builds");
  info.in_features = widths.front(), info.out_features = widths.back();
  info.hidden.assign(widths.begin() + 1, widths.end() - 1);
  MT_CHECK(info.kind != "cnn" || info.in_features == kImageSide * kImageSide, path, ": a CNN takes rows of ",
           kImageSide * kImageSide, " values, the metadata says ", info.in_features);
  MT_CHECK(metadata_count(m, info.classification ? "classes" : "outputs", path, 1) == info.out_features &&
               metadata_count(m, "inputs", path, 1) == info.in_features,
           path, ": the metadata's widths disagree with its model '", info.signature, "'");
  info.standardized = m.count("standardize_mean") && m.count("standardize_std");
  if (info.standardized) {
    info.mean = std::strtod(m.at("standardize_mean").c_str(), nullptr);
    info.std = std::strtod(m.at("standardize_std").c_str(), nullptr);
    MT_CHECK(std::isfinite(info.mean) && std::isfinite(info.std) && info.std > 0, path,
             ": standardize_mean/std are not usable numbers");
  }
  return info;
}

Tensor standardize_with(const Tensor& x, double mean, double std) {
  return raw::unary(UnaryOp::MulScalar, raw::unary(UnaryOp::AddScalar, x, -mean), 1.0 / std);
}

Tensor LoadedModel::prepare(const Tensor& x) const {
  if (info.kind == "gpt") {
    MT_CHECK(x.dtype() == kInt64 && (x.dim() == 1 || x.dim() == 2) && x.size(-1) <= info.gpt.context,
             "the GPT '", info.signature, "' takes (B, T) or (T) int64 bytes with T <= ", info.gpt.context,
             ", got ", x.dtype(), " of shape ", x.sizes());
    return x.dim() == 1 ? raw::unsqueeze(x, 0) : x;
  }
  MT_CHECK(x.dim() >= 1 && (x.dtype() == kFloat32 || x.dtype() == kFloat64 || x.dtype() == kInt64),
           "the model '", info.signature, "' takes rows of numbers, got ", x.dtype(), " of shape ", x.sizes());
  const Tensor rows = raw::contiguous(raw::cast(x.dim() == 1 ? raw::unsqueeze(x, 1) : raw::flatten(x, 1, -1), kFloat32));
  MT_CHECK(rows.size(1) == info.in_features, "the input has ", rows.size(1), " values per row, but the model '",
           info.signature, "' takes ", info.in_features);
  return info.standardized ? standardize_with(rows, info.mean, info.std) : rows;
}

Tensor LoadedModel::forward(const Tensor& x) const { return module->forward(prepare(x)); }

Tensor LoadedModel::probabilities(const Tensor& x) const {
  MT_CHECK(info.classification, "the model '", info.signature, "' is a regression: it has values, not class "
           "probabilities");
  return mt::softmax(forward(x), -1);
}

LoadedModel load_model(const std::string& path) { return load_model(load_safetensors(path), path); }

LoadedModel load_model(const SafetensorsFile& file, const std::string& path) {
  LoadedModel m{.info = read_model_info(file.metadata, path), .module = nullptr};
  m.module = build_network(m.info);
  load_weights(*m.module, file.tensors, m.info, path);
  m.module->eval();
  return m;
}

}  // namespace mt::nn
