// Builds mini_train's data, model, loss, optimizer and schedule from its options (see job.h).
#include "apps/mini_train/job.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "apps/mini_train/model_cnn.h"
#include "apps/mini_train/model_file.h"
#include "apps/mini_train/model_gpt.h"
#include "autograd/ops.h"
#include "data/csv.h"
#include "data/fashion_mnist.h"
#include "data/npy.h"
#include "data/sampler.h"
#include "data/standardize.h"
#include "nn/networks.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tensor/generator.h"
#include "tensor/raw_ops.h"
#include "tensor/storage.h"

namespace mt::app {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// An NPY or CSV file as a tensor; CSV targets are read as float unless asked for classes.
Tensor read_table(const std::string& path, const char* flag) {
  if (ends_with(path, ".npy")) return data::read_npy(path);
  if (ends_with(path, ".csv")) return data::read_csv(path).values;
  MT_FAIL(flag, " ", path, ": unknown file type (expected .npy or .csv)");
}

// The seed's synthetic regression: y = x·w* + 0.5 + noise with w* ~ N(0, 1). The targets are a
// noisy linear function of the inputs, so the loss has something to learn and a floor (the noise).
//   x: (n, features)  y: (n, 1)
void synthetic(Generator& gen, int64_t n, int64_t features, const Tensor& w_true, Tensor& x, Tensor& y) {
  x = randn({n, features}, gen);
  y = raw::linear(x, w_true, full({1}, 0.5));
  raw::binary_(BinaryOp::Add, y, raw::unary(UnaryOp::MulScalar, randn({n, 1}, gen), 0.1));
}

// Scales inputs by the training split's mean and standard deviation (one scalar each), in place
// (Note [One copy of a dataset] in data/standardize.h), and records both in `d`: the saved model
// carries them (model_file.h).
void standardize(const Tensor& train, const Tensor& test, Data& d) {
  const data::Standardization s = data::fit_standardization(train);
  data::standardize_(train, s);
  if (test.defined()) data::standardize_(test, s);
  d.standardized = true, d.input_mean = s.mean, d.input_std = s.std;
}

// --task auto on CSV targets (which have no integer dtype): one column of whole numbers in
// 0..kMaxAutoClasses-1 is read as class indices, and the config table says so. Larger whole
// numbers (prices, counts) stay a regression.
constexpr double kMaxAutoClasses = 1000;
bool class_index_column(const Tensor& y) {
  if (y.dim() > 2 || (y.dim() == 2 && y.size(1) != 1) || y.numel() == 0) return false;
  const Tensor v = raw::cast(y, kFloat64);
  const Tensor rounded = raw::cast(raw::cast(v, kInt64), kFloat64);
  return raw::sum(raw::binary(BinaryOp::Ne, rounded, v)).item() == 0 &&
         raw::max(raw::unary(UnaryOp::Neg, v)).item() <= 0 && raw::max(v).item() < kMaxAutoClasses;
}

}  // namespace

// The raw tables of --dataset synthetic, fashion-mnist or files (x_test, y_test undefined without a
// test split), and their description.
struct Tables {
  Tensor x_train, y_train, x_test, y_test;
};

Tables read_tables(const Options& o, Data& d) {
  Tables t;
  Tensor &x_train = t.x_train, &y_train = t.y_train, &x_test = t.x_test, &y_test = t.y_test;
  if (o.dataset == "synthetic") {
    Generator gen(o.seed);
    const Tensor w_true = randn({1, o.features}, gen);
    synthetic(gen, o.samples, o.features, w_true, x_train, y_train);
    synthetic(gen, std::max<int64_t>(o.samples / 5, 1), o.features, w_true, x_test, y_test);
    std::ostringstream os;
    os << "synthetic regression, " << o.samples << " x " << o.features << " (test " << x_test.size(0) << ")";
    d.description = os.str();
  } else if (o.dataset == "fashion-mnist") {
    const data::FashionMnist train = data::load_fashion_mnist(o.data_dir, data::Split::Train);
    const data::FashionMnist test = data::load_fashion_mnist(o.data_dir, data::Split::Test);
    x_train = raw::flatten(train.images, 1, -1), y_train = train.labels;
    x_test = raw::flatten(test.images, 1, -1), y_test = test.labels;
    d.description = "Fashion-MNIST " + o.data_dir + " (" + std::to_string(x_train.size(0)) + " train, " +
                    std::to_string(x_test.size(0)) + " test)";
  } else {
    x_train = read_table(o.inputs, "--inputs");
    y_train = read_table(o.targets, "--targets");
    MT_CHECK(x_train.dim() >= 1 && y_train.dim() >= 1 && x_train.size(0) == y_train.size(0), "--inputs ",
             o.inputs, " has shape ", x_train.sizes(), " but --targets ", o.targets, " has shape ", y_train.sizes(),
             ": they need the same number of rows");
    MT_CHECK(x_train.size(0) > 0, "--inputs ", o.inputs, " has no rows");
    x_train = x_train.dim() == 1 ? raw::unsqueeze(x_train, 1) : raw::flatten(x_train, 1, -1);
    MT_CHECK(x_train.size(1) > 0, "--inputs ", o.inputs, " has shape ", x_train.sizes(), ": no feature columns");
    d.description = o.inputs + " -> " + o.targets + " (" + std::to_string(x_train.size(0)) + " rows, no test split)";
  }

  return t;
}

// Classification when asked, or when the targets are integers (file data) or labels (Fashion-MNIST):
// the targets become class indices (int64) and out_features the class count; else float32 columns.
void shape_targets(const Options& o, Tables& t, Data& d) {
  Tensor &y_train = t.y_train, &y_test = t.y_test;
  d.classification = o.task == "classification" || (o.task == "auto" && y_train.dtype() == kInt64);
  if (o.task == "auto" && ends_with(o.targets, ".csv") && class_index_column(y_train)) {
    d.classification = true;
    d.task_reason = "--task auto: the CSV targets are whole numbers below 1000, read as class indices; "
                    "--task regression fits them as numbers";
  }
  if (d.classification) {
    if (y_train.dim() == 2 && y_train.size(1) == 1) y_train = raw::squeeze(y_train, 1);
    MT_CHECK(y_train.dim() == 1, "classification targets must be one class index per row, got shape ", y_train.sizes());
    const Tensor as_int = raw::cast(y_train, kInt64);
    const Tensor as_float = raw::cast(y_train, kFloat64);
    MT_CHECK(raw::sum(raw::binary(BinaryOp::Ne, raw::cast(as_int, kFloat64), as_float)).item() == 0,
             "classification targets must be whole numbers (class indices)");
    MT_CHECK(raw::max(raw::unary(UnaryOp::Neg, as_float)).item() <= 0, "classification targets must be >= 0");
    y_train = as_int;
    const double top = raw::max(as_float).item();
    MT_CHECK(top < nn::kMaxWidth, "--targets ", o.targets.empty() ? o.dataset : o.targets, ": class index ",
             static_cast<long long>(top), " makes more than ", nn::kMaxWidth, " classes (indices must be 0..N-1)");
    d.out_features = static_cast<int64_t>(top) + 1;
    if (y_test.defined()) y_test = raw::cast(y_test, kInt64);
  } else {
    y_train = raw::cast(y_train.dim() == 1 ? raw::unsqueeze(y_train, 1) : raw::flatten(y_train, 1, -1), kFloat32);
    if (y_test.defined()) y_test = raw::cast(y_test, kFloat32);
    d.out_features = y_train.size(1);
  }
}

// --val-split F: of the file's rows, round(F·n) are held out for validation, picked by a permutation
// from Generator(--seed) (the same rows for the same seed and data, whatever the number of ranks),
// and both parts keep the file's order. Before any standardisation: its statistics are the
// training rows' alone.
void hold_out_validation(const Options& o, Tables& t, Data& d) {
  const int64_t n = t.x_train.size(0), held = std::llround(o.val_split * static_cast<double>(n));
  MT_CHECK(held >= 1 && held < n, "--val-split ", o.val_split, " of ", n, " rows holds out ", held, " and trains on ",
           n - held, ": each part needs at least one row");
  Generator gen(o.seed);
  std::vector<int64_t> order = data::randperm(n, gen);
  std::sort(order.begin(), order.end() - held), std::sort(order.end() - held, order.end());
  const Tensor train_rows = from_vector(std::vector<int64_t>(order.begin(), order.end() - held), {n - held});
  const Tensor held_rows = from_vector(std::vector<int64_t>(order.end() - held, order.end()), {held});
  t.x_test = raw::index_select(t.x_train, 0, held_rows), t.y_test = raw::index_select(t.y_train, 0, held_rows);
  t.x_train = raw::index_select(t.x_train, 0, train_rows), t.y_train = raw::index_select(t.y_train, 0, train_rows);
  d.validation = true;
  std::ostringstream os;
  os << o.inputs << " -> " << o.targets << " (" << n << " rows: " << n - held << " train, " << held
     << " validation by --val-split " << o.val_split << " and --seed " << o.seed << ")";
  d.description = os.str();
}

Data load_data(const Options& o) {
  Data d;
  if (o.dataset == "text") {
    load_text_data(o, d);
    return d;
  }
  Tables t = read_tables(o, d);
  shape_targets(o, t, d);
  if (o.val_split > 0) hold_out_validation(o, t, d);
  Tensor &x_train = t.x_train, &y_train = t.y_train, &x_test = t.x_test, &y_test = t.y_test;
  x_train = raw::contiguous(raw::cast(x_train, kFloat32));
  if (x_test.defined()) x_test = raw::contiguous(raw::cast(x_test, kFloat32));
  if (o.standardize) standardize(x_train, x_test, d);
  d.in_features = x_train.size(1);
  d.train = std::make_shared<data::TensorDataset>(x_train, raw::contiguous(y_train));
  if (x_test.defined()) d.test = std::make_shared<data::TensorDataset>(x_test, raw::contiguous(y_test));
  cpu_empty_cache();  // what loading freed goes back to the system, not into the step's cache
  return d;
}

std::string model_signature(const Options& o, const Data& d) {
  if (o.model == "gpt") return gpt_signature(o);
  if (o.model == "cnn") return cnn_signature(d);
  std::ostringstream os;
  os << o.model << ':' << d.in_features;
  if (o.model == "mlp")
    for (int64_t h : o.hidden) os << '-' << h;
  os << '-' << d.out_features;
  return os.str();
}

std::shared_ptr<nn::Module> build_model(const Options& o, const Data& d) {
  manual_seed(o.seed);  // initial weights depend on --seed only
  if (o.model == "gpt") return build_gpt(o);
  if (o.model == "cnn") return build_cnn(d);  // model_cnn.h
  return nn::make_mlp(d.in_features, o.model == "mlp" ? o.hidden : std::vector<int64_t>{}, d.out_features);
}

std::shared_ptr<nn::Loss> build_loss(const Data& d) {
  if (d.text_train) return next_byte_loss();
  if (d.classification) return std::make_shared<nn::CrossEntropyLoss>();
  return std::make_shared<nn::MSELoss>();
}

std::unique_ptr<optim::Optimizer> build_optimizer(const Options& o, const nn::Module& model) {
  if (o.model == "gpt") return build_gpt_optimizer(o, model);
  if (o.optimizer == "sgd")
    return std::make_unique<optim::SGD>(model.parameters(),
                                        optim::SGDOptions{.lr = o.lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
  if (o.optimizer == "adam")
    return std::make_unique<optim::Adam>(model.parameters(), optim::AdamOptions{.lr = o.lr, .weight_decay = o.weight_decay});
  return std::make_unique<optim::AdamW>(model.parameters(), optim::AdamWOptions{.lr = o.lr, .weight_decay = o.weight_decay});
}

std::unique_ptr<optim::LRScheduler> build_scheduler(const Options& o, optim::Optimizer& opt, int64_t total_steps) {
  if (o.schedule != "cosine") return nullptr;
  if (o.model == "gpt") return build_gpt_scheduler(opt, total_steps);
  return std::make_unique<optim::CosineAnnealingLR>(
      opt, optim::CosineAnnealingLROptions{.t_max = std::max<int64_t>(total_steps, 1)});
}

std::string optimizer_description(const Options& o) {
  std::ostringstream os;
  os << o.optimizer << " lr=" << o.lr;
  if (o.optimizer == "sgd" && o.momentum > 0) os << " momentum=" << o.momentum;
  if (o.model == "gpt") os << " betas=(0.9, 0.95)";
  if (o.weight_decay > 0) os << " weight_decay=" << o.weight_decay << (o.model == "gpt" ? " (matrices only)" : "");
  if (o.schedule == "cosine" && o.model == "gpt")
    os << ", " << kWarmupSteps << " warm-up steps then cosine decay to " << o.lr * kFinalLrFactor;
  else if (o.schedule == "cosine") os << ", cosine decay per step";
  if (o.clip_grad > 0) os << ", gradients clipped to norm " << o.clip_grad;
  return os.str();
}

}  // namespace mt::app
