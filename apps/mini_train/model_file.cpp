// mini_train's model-file metadata and --init loading (see model_file.h).
#include "apps/mini_train/model_file.h"
#include "apps/mini_train/model_gpt.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "nn/sharded_checkpoint.h"
#include "tensor/raw_ops.h"

namespace mt::app {

namespace {

// A double as a string that reads back as the same double.
std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The first few names of a list, for one-line messages.
std::string some_names(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 6; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 6) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out.empty() ? "none" : out;
}

// "OLD=NEW" applied to one name.
std::string mapped(const std::string& name, const std::string& from, const std::string& to) {
  return name.rfind(from, 0) == 0 ? to + name.substr(from.size()) : name;
}

std::vector<std::string> names_of(const NamedTensors& tensors) {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors) out.push_back(name);
  return out;
}

// An --init-prefix that turns the file's names into exactly the model's, or "" when none does.
// Candidates: for each file name f, split f and the model's first name m at the same trailing
// components (f = OLD + rest, m = NEW + rest) and try OLD=NEW on every name.
std::string suggest_prefix(const std::vector<std::string>& model_names, const std::vector<std::string>& file_names) {
  if (model_names.empty() || file_names.empty()) return "";
  const std::set<std::string> want(model_names.begin(), model_names.end());
  const std::string& m = model_names.front();
  for (const std::string& f : file_names) {
    std::vector<size_t> cuts{0};  // where a component of f starts
    for (size_t i = 0; i < f.size(); ++i)
      if (f[i] == '.') cuts.push_back(i + 1);
    for (size_t cut : cuts) {
      const std::string rest = f.substr(cut);
      if (rest.empty() || m.size() < rest.size() || m.compare(m.size() - rest.size(), rest.size(), rest) != 0)
        continue;
      const std::string from = f.substr(0, cut), to = m.substr(0, m.size() - rest.size());
      std::set<std::string> got;
      for (const std::string& name : file_names) got.insert(mapped(name, from, to));
      if (got == want) return from + "=" + to;
    }
  }
  return "";
}

}  // namespace

Metadata model_metadata(const Options& o, const Data& d, const std::string& signature) {
  Metadata m = {{"format", nn::kModelFormat},
                {"model", signature},
                {"task", d.classification ? "classification" : "regression"},
                {d.classification ? "classes" : "outputs", std::to_string(d.out_features)},
                {"inputs", std::to_string(d.in_features)},
                {"dataset", o.dataset},
                {"precision", o.precision}};  // what the weights were trained in; they are float32
  if (d.standardized) {
    m["standardize_mean"] = exact(d.input_mean);
    m["standardize_std"] = exact(d.input_std);
  }
  if (o.dataset == "synthetic") {
    m["seed"] = std::to_string(o.seed);
    m["samples"] = std::to_string(o.samples);
    m["features"] = std::to_string(o.features);
  }
  if (o.model == "gpt") add_gpt_metadata(m, o);
  return m;
}

SafetensorsFile model_file_of(const Checkpoint& c, const std::string& path) {
  SafetensorsFile file;
  file.tensors = c.model;
  const std::string prefix = kModelFileInfo;
  for (const auto& [key, value] : c.info)
    if (key.rfind(prefix, 0) == 0) file.metadata[key.substr(prefix.size())] = value;
  MT_CHECK(!file.metadata.empty(), path, ": this checkpoint does not describe its model (it predates model files "
           "in checkpoints); resume training from it, or use the model file of --save");
  return file;
}

nn::LoadedModel load_saved_model(const std::string& path) {
  const SafetensorsFile file = load_safetensors(path);
  const auto format = file.metadata.find("format");
  const bool checkpoint = format != file.metadata.end() &&
                          (format->second == kCheckpointFormat || format->second == kShardedFormat);
  if (!checkpoint) return nn::load_model(file, path);
  return nn::load_model(model_file_of(load_checkpoint(file, path), path), path);
}

void load_init(nn::Module& model, const std::string& path, const std::string& prefix) {
  const NamedTensors tensors = load_safetensors(path).tensors;
  const size_t eq = prefix.find('=');
  MT_CHECK(prefix.empty() || eq != std::string::npos, "--init-prefix '", prefix, "': expected OLD=NEW, e.g. "
           "net.=0. (OLD may be empty: =0. turns 'weight' into '0.weight')");
  const std::string from = prefix.empty() ? "" : prefix.substr(0, eq), to = prefix.empty() ? "" : prefix.substr(eq + 1);
  NamedTensors weights;
  for (const auto& [name, t] : tensors) weights.emplace_back(mapped(name, from, to), t);

  const NamedTensors own = model.state_dict();
  const std::vector<std::string> model_names = names_of(own), file_names = names_of(weights);
  if (std::set<std::string>(model_names.begin(), model_names.end()) !=
      std::set<std::string>(file_names.begin(), file_names.end())) {
    const std::string hint = suggest_prefix(model_names, names_of(tensors));
    MT_FAIL("--init ", path, ": the file's tensors (", some_names(file_names), ") are not the model's (",
            some_names(model_names), "); ",
            hint.empty() ? "give the --model/--hidden the weights were trained with, or map the names with "
                           "--init-prefix OLD=NEW"
                         : "map the names with --init-prefix " + hint);
  }
  for (auto& [name, t] : weights) {
    const Tensor& dst = std::find_if(own.begin(), own.end(), [&](const auto& p) { return p.first == name; })->second;
    MT_CHECK(t.sizes() == dst.sizes(), "--init ", path, ": '", name, "' is ", t.sizes(), " in the file but ",
             dst.sizes(), " in the model; give the --model/--hidden and data the weights were trained with");
    if (t.dtype() != dst.dtype()) t = raw::cast(t, dst.dtype());  // F64, F16 or BF16 weights
  }
  model.load_state_dict(weights);
}

}  // namespace mt::app
