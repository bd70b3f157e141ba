// `mini_train eval` and `mini_train predict` (see inference.h).
#include "apps/mini_train/inference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "apps/mini_train/evaluate.h"
#include "apps/mini_train/job.h"
#include "apps/mini_train/model_file.h"
#include "apps/mini_train/model_gpt.h"
#include "apps/mini_train/options.h"
#include "apps/mini_train/outputs.h"
#include "autograd/grad_mode.h"
#include "data/csv.h"
#include "data/npy.h"
#include "tensor/raw_ops.h"

namespace mt::app {

namespace {

// A saved model, rebuilt from its metadata and loaded with its weights.
struct SavedModel {
  ModelInfo info;
  std::shared_ptr<nn::Module> module;
};

SavedModel load_saved_model(const std::string& path) {
  const SafetensorsFile file = load_safetensors(path);
  SavedModel m{.info = read_model_info(file.metadata, path), .module = nullptr};
  Options o;
  o.model = m.info.model, o.hidden = m.info.hidden;
  Data shape;
  shape.in_features = m.info.in_features, shape.out_features = m.info.out_features;
  m.module = build_model(o, shape);
  load_weights(*m.module, file.tensors, path, "");
  m.module->eval();
  return m;
}

// The model's inputs as it saw them in training: flattened rows, float32, standardised.
Tensor prepare_inputs(const Tensor& x, const ModelInfo& info, const std::string& what) {
  Tensor rows = raw::contiguous(raw::cast(x.dim() == 1 ? raw::unsqueeze(x, 1) : raw::flatten(x, 1, -1), kFloat32));
  MT_CHECK(rows.size(1) == info.in_features, what, " has ", rows.size(1), " values per row, but the model '",
           info.signature, "' takes ", info.in_features);
  return info.standardized ? standardize_with(rows, info.mean, info.std) : rows;
}

std::shared_ptr<data::TensorDataset> prepared(const std::shared_ptr<data::TensorDataset>& set, const ModelInfo& info,
                                              const std::string& what) {
  return std::make_shared<data::TensorDataset>(prepare_inputs(set->inputs(), info, what), set->targets());
}

}  // namespace

int run_eval(int argc, char** argv) {
  EvalOptions e;
  int exit_code = 0;
  if (!parse_eval_options(argc, argv, e, &exit_code)) return exit_code;  // options.h
  const std::string& path = e.init;
  Options o;
  o.data_dir = e.data_dir;
  o.inputs = e.inputs, o.targets = e.targets, o.text = e.text;
  if (const SafetensorsFile file = load_safetensors(path); holds_gpt(file.metadata)) {  // model_gpt.h
    const double nats = evaluate_saved_gpt(file, path, o.text).value;
    std::printf("Test loss: %.6f nats per byte (%.4f bits per byte)\n", nats, nats / std::log(2.0));
    return 0;
  }
  MT_CHECK(o.text.empty(), "mini_train eval: --text applies to a GPT; ", path, " holds another model");
  MT_CHECK(o.inputs.empty() == o.targets.empty(), "--inputs and --targets go together: give both files");

  const SavedModel m = load_saved_model(path);
  const Metadata& meta = m.info.metadata;
  const std::string trained_on = meta.count("dataset") ? meta.at("dataset") : "";
  o.dataset = !o.inputs.empty() ? "files" : !e.dataset.empty() ? e.dataset : trained_on;
  MT_CHECK(o.dataset != "files" || !o.inputs.empty(), "mini_train eval: ", path, " was trained on files; give the "
           "data to score with --inputs and --targets");
  MT_CHECK(o.dataset == "synthetic" || o.dataset == "fashion-mnist" || o.dataset == "files", "mini_train eval: ",
           path, " does not say which data it was trained on; give --dataset or --inputs/--targets");
  if (o.dataset == "synthetic") {  // the same generator and seed regenerate the same test split
    o.seed = static_cast<uint64_t>(metadata_count(meta, "seed", path, 0));
    o.samples = metadata_count(meta, "samples", path, 1);
    o.features = metadata_count(meta, "features", path, 1);
  }
  o.task = m.info.classification ? "classification" : "regression";
  o.standardize = false;  // the model file's own statistics, not fresh ones from this data
  const Data d = load_data(o);
  const auto set = prepared(d.test ? d.test : d.train, m.info, d.test ? "the test split" : o.inputs);
  const Score s = evaluate(*m.module, *set, m.info.classification, kCPU);
  const char* split = d.test ? "Test" : "Data";
  if (s.classification) std::printf("%s accuracy: %.4f\n", split, s.value);
  else std::printf("%s loss: %.6f\n", split, s.value);
  return 0;
}

int run_predict(int argc, char** argv) {
  PredictOptions p;
  int exit_code = 0;
  if (!parse_predict_options(argc, argv, p, &exit_code)) return exit_code;  // options.h
  const std::string &path = p.init, &inputs = p.inputs, &output = p.output;

  const SavedModel m = load_saved_model(path);
  const bool csv = inputs.size() >= 4 && inputs.compare(inputs.size() - 4, 4, ".csv") == 0;
  const Tensor x = prepare_inputs(csv ? data::read_csv(inputs).values : data::read_npy(inputs), m.info, inputs);
  const int64_t n = x.size(0);
  check_output_file("--output", output, n * 8 * m.info.out_features + 4096);
  NoGradGuard no_grad;
  // y: (n) class indices, or (n, outputs) values; filled 4096 rows at a time.
  Tensor y = m.info.classification ? empty({n}, {.dtype = kInt64}) : empty({n, m.info.out_features});
  for (int64_t start = 0; start < n; start += 4096) {
    const int64_t len = std::min<int64_t>(4096, n - start);
    const Tensor out = m.module->forward(raw::narrow(x, 0, start, len));
    raw::narrow(y, 0, start, len).copy_(m.info.classification ? raw::argmax(out, 1) : out);
  }
  data::write_npy(output, y);
  std::printf("wrote %s: %lld %s, shape %s\n", output.c_str(), static_cast<long long>(n),
              m.info.classification ? "class indices (int64)" : "predictions (float32)", y.sizes().str().c_str());
  return 0;
}

}  // namespace mt::app
