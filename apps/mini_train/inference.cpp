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
#include "apps/mini_train/progress.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "data/csv.h"
#include "data/npy.h"
#include "nn/model_file.h"
#include "tensor/raw_ops.h"

namespace mt::app {

namespace {

// The model's inputs as it saw them in training (nn::LoadedModel::prepare), with the rows' width
// checked here first, so that an error names the file (`what`) they came from.
Tensor prepare_inputs(const Tensor& x, const nn::LoadedModel& m, const std::string& what) {
  MT_CHECK(x.dim() >= 1, what, " holds a single number, not rows of inputs");
  const int64_t width = x.dim() == 1 ? 1 : x.numel() / std::max<int64_t>(x.size(0), 1);
  MT_CHECK(x.size(0) == 0 || width == m.info.in_features, what, " has ", width, " values per row, but the model '",
           m.info.signature, "' takes ", m.info.in_features);
  return m.prepare(x);
}

std::shared_ptr<data::TensorDataset> prepared(const std::shared_ptr<data::TensorDataset>& set, const nn::LoadedModel& m,
                                              const std::string& what) {
  return std::make_shared<data::TensorDataset>(prepare_inputs(set->inputs(), m, what), set->targets());
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
  const nn::LoadedModel m = load_saved_model(path);  // a model file or a checkpoint (model_file.h)
  if (m.info.kind == "gpt") {  // model_gpt.h
    const double nats = evaluate_saved_gpt(m, path, o.text).value;
    std::printf("Test loss: %.6f nats per byte (%.4f bits per byte)\n", nats, nats / std::log(2.0));
    return 0;
  }
  MT_CHECK(o.text.empty(), "mini_train eval: --text applies to a GPT; ", path, " holds another model");
  MT_CHECK(o.inputs.empty() == o.targets.empty(), "--inputs and --targets go together: give both files");

  const nn::Metadata& meta = m.info.metadata;
  const std::string trained_on = meta.count("dataset") ? meta.at("dataset") : "";
  o.dataset = !o.inputs.empty() ? "files" : !e.dataset.empty() ? e.dataset : trained_on;
  MT_CHECK(o.dataset != "files" || !o.inputs.empty(), "mini_train eval: ", path, " was trained on files; give the "
           "data to score with --inputs and --targets");
  MT_CHECK(o.dataset == "synthetic" || o.dataset == "fashion-mnist" || o.dataset == "files", "mini_train eval: ",
           path, " does not say which data it was trained on; give --dataset or --inputs/--targets");
  if (o.dataset == "synthetic") {  // the same generator and seed regenerate the same test split
    o.seed = static_cast<uint64_t>(nn::metadata_count(meta, "seed", path, 0));
    o.samples = nn::metadata_count(meta, "samples", path, 1);
    o.features = nn::metadata_count(meta, "features", path, 1);
  }
  o.task = m.info.classification ? "classification" : "regression";
  o.standardize = false;  // the model file's own statistics, not fresh ones from this data
  const Data d = load_data(o);
  const auto set = prepared(d.test ? d.test : d.train, m, d.test ? "the test split" : o.inputs);
  ProgressBar bar(true, d.test ? "Evaluating test" : "Evaluating", set->size());  // in a terminal only
  const Score s = evaluate(*m.module, *set, m.info.classification, kCPU, &bar);
  bar.clear();
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
  check_distinct({{"--output", output}}, {{"--init", path}, {"--inputs", inputs}});  // outputs.h
  MT_CHECK(!output.ends_with(".csv"), "--output ", output, ": predict writes an NPY file; give a name ending in .npy");

  const nn::LoadedModel m = load_saved_model(path);  // a model file or a checkpoint (model_file.h)
  MT_CHECK(m.info.kind != "gpt", "mini_train predict: ", path, " holds a GPT; mini_train generate continues a prompt");
  MT_CHECK(!p.probabilities || m.info.classification, "--probabilities: ", path, " holds a regression model ('",
           m.info.signature, "'), whose outputs are values, not classes");
  const bool csv = inputs.size() >= 4 && inputs.compare(inputs.size() - 4, 4, ".csv") == 0;
  const Tensor x = prepare_inputs(csv ? data::read_csv(inputs).values : data::read_npy(inputs), m, inputs);
  const int64_t n = x.size(0), classes = m.info.out_features;
  const bool indices = m.info.classification && !p.probabilities;
  check_output_file("--output", output, n * 8 * classes + 4096);
  NoGradGuard no_grad;
  // y: (n) class indices, or (n, classes) probabilities, or (n, outputs) values; 4096 rows at a time.
  Tensor y = indices ? empty({n}, {.dtype = kInt64}) : empty({n, classes});
  for (int64_t start = 0; start < n; start += 4096) {
    const int64_t len = std::min<int64_t>(4096, n - start);
    const Tensor out = m.module->forward(raw::narrow(x, 0, start, len));
    raw::narrow(y, 0, start, len).copy_(indices ? raw::argmax(out, 1) : p.probabilities ? mt::softmax(out, 1) : out);
  }
  data::write_npy(output, y);
  const char* what = indices ? "class indices (int64)" : p.probabilities ? "class probabilities (float32)"
                                                                         : "predictions (float32)";
  std::printf("wrote %s: %lld %s, shape %s\n", output.c_str(), static_cast<long long>(n), what,
              y.sizes().str().c_str());
  return 0;
}

}  // namespace mt::app
