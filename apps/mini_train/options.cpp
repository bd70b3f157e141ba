// The command line of mini_train (CLI11), its presets and its validation. See options.h.
#include "apps/mini_train/options.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "apps/mini_train/backend.h"
#include "apps/mini_train/gpus.h"
#include "apps/mini_train/tracing.h"
#include "data/fashion_mnist.h"
#include "data/text.h"
#include "nn/networks.h"
#include "tensor/check.h"
#include "tensor/memory.h"
#include "tensor/output_file.h"
#include "tensor/parallel.h"

namespace mt::app {

namespace {

// Sets `field` to `value` unless the user gave `flag`.
template <typename T, typename V>
void preset(const CLI::App& app, const char* flag, T& field, const V& value) {
  if (app.get_option(flag)->count() == 0) field = value;
}

const char* kDescription =
    "mini_train: trains a model with minitrain.\n"
    "With no options it runs the seed job: Linear(10, 1) on 1000 synthetic examples, batch 32,\n"
    "SGD lr 0.01, MSE, 5 epochs, and saves final_model.safetensors.\n"
    "  mini_train --dataset fashion-mnist --model mlp --eval   # Fashion-MNIST, ~0.89 test accuracy\n"
    "  mini_train --inputs x.npy --targets y.npy               # your own data (NPY or CSV)\n"
    "  mini_train eval --init final_model.safetensors          # test score of a saved model\n"
    "  mini_train predict --init m.safetensors --inputs x.npy --output y.npy   # its predictions\n"
    "  mini_train --checkpoint-dir ckpt --resume auto           # checkpoint each epoch, resume\n"
    "  mini_train --nproc 2                                     # data-parallel on 2 CPU processes\n"
    "  mpirun --allow-run-as-root -np 2 mini_train              # the same, started by MPI (or srun)\n"
    "  mini_train --gpus 0,1                                    # data-parallel on 2 GPUs (NCCL)\n"
  "  mini_train --env                                         # what this machine offers\n"
    "  mini_train --model gpt --eval                            # a small GPT on Debian's fortunes\n"
    "  mini_train generate --init final_model.safetensors --prompt 'The '   # text from it\n"
    "  mini_train --eval --log-json a.jsonl --log-every 10      # per-step and per-epoch records\n"
    "  mini_train plot a.jsonl b.jsonl -o curves.svg            # their curves, overlaid\n";

// Whether `text` is a whole number past int64's range (strtoll clamps it and says ERANGE).
bool past_int64(const std::string& text) {
  errno = 0;
  char* end = nullptr;
  std::strtoll(text.c_str(), &end, 10);
  return errno == ERANGE && end != text.c_str() && *end == '\0';
}

// What is wrong with the first value CLI11 would take silently wrong, or "": an empty value
// ("--seed ''"), which it reads as 0 for a number and as "not given" for a path, and a whole number
// past int64 ("--seed 99999999999999999999"), which it clamps to the largest. Either way the run
// would go on with something the user did not write.
std::string unusable_value(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size_min() <= 0) continue;  // a flag: no value
    for (const std::string& value : opt->results()) {
      if (value.empty()) return opt->get_name() + " was given an empty value: give one, or leave the option out";
      if (opt->get_type_name() == "INT" && past_int64(value))
        return opt->get_name() + " " + value + " is past the range of a 64-bit integer";
    }
  }
  return "";
}

// app.parse(argc, argv), with --help printed (exit 0) and a parse error printed as one line
// "mini_train: error: ..." (exit 2, like every other usage error). Returns false when the process
// should exit with *exit_code. Every command line below goes through it.
bool parse_command_line(CLI::App& app, int argc, char** argv, int* exit_code) {
  try {
    app.parse(argc, argv);
    if (const std::string what = unusable_value(app); !what.empty()) {
      std::fprintf(stderr, "mini_train: error: %s (%s --help lists the options)\n", what.c_str(),
                   app.get_name().c_str());
      *exit_code = 2;
      return false;
    }
    return true;
  } catch (const CLI::Success& e) {  // --help
    *exit_code = app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    for (char& c : what)
      if (c == '\n') c = ' ';
    std::fprintf(stderr, "mini_train: error: %s (%s --help lists the options)\n", what.c_str(), app.get_name().c_str());
    *exit_code = 2;
  }
  return false;
}

// Flags parsed into a form Options does not hold; parse_options converts them.
struct RawFlags {
  std::string hidden;   // --hidden, comma-separated
  int64_t seed = 0;     // signed, so that -1 is refused instead of wrapping to 2^64 - 1
  bool no_shuffle = false;
  std::string threads;  // --threads, checked by parse_num_threads
  std::string max_memory;  // --max-memory, checked by parse_memory_size
};

// The option table, one function per --help group.
void add_data_options(CLI::App& app, Options& o) {
  constexpr const char* kGroup = "Data";
  app.add_option("--dataset", o.dataset, "synthetic, fashion-mnist or text (bytes of --text, for --model gpt)")
      ->check(CLI::IsMember({"synthetic", "fashion-mnist", "text"}))->group(kGroup);
  app.add_option("--data-dir", o.data_dir, "Fashion-MNIST folder (Debian: dataset-fashion-mnist)")
      ->default_str(data::kFashionMnistDir)->group(kGroup);
  app.add_option("--inputs", o.inputs, "inputs file, .npy or .csv, one example per row")->group(kGroup);
  app.add_option("--targets", o.targets, "targets file, .npy or .csv; int64 targets mean classification")
      ->group(kGroup);
  app.add_option("--task", o.task, "auto, regression or classification")
      ->check(CLI::IsMember({"auto", "regression", "classification"}))->group(kGroup);
  app.add_option("--samples", o.samples, "synthetic examples (1..2147483648)")->group(kGroup);
  app.add_option("--features", o.features, "synthetic input width (1..1048576)")->group(kGroup);
  app.add_option("--val-split", o.val_split, "hold out this share of --inputs' rows (picked by --seed) as a "
                 "validation split, scored after every epoch (turns --eval on)")->group(kGroup);
  app.add_flag("--standardize,!--no-standardize", o.standardize,
               "scale inputs to zero mean and unit variance (default on for fashion-mnist)")->group(kGroup);
  app.add_option("--text", o.text, "--dataset text's corpus: a file, or a folder of text files (default: Debian's "
                 "fortunes, " + std::string(data::kDefaultTextCorpus) + ")")->group(kGroup);
}

void add_model_options(CLI::App& app, Options& o, RawFlags& raw) {
  constexpr const char* kGroup = "Model";
  app.add_option("--model", o.model, "linear, mlp, cnn (1x28x28 images) or gpt")
      ->check(CLI::IsMember({"linear", "mlp", "cnn", "gpt"}))->group(kGroup);
  app.add_option("--hidden", raw.hidden, "mlp hidden widths, comma-separated (default 512,256 for "
                 "fashion-mnist, else 64)")->group(kGroup);
  app.add_option("--layers", o.layers, "gpt: transformer blocks")->group(kGroup);
  app.add_option("--heads", o.heads, "gpt: attention heads (must divide --dim)")->group(kGroup);
  app.add_option("--dim", o.dim, "gpt: width of the residual stream")->group(kGroup);
  app.add_option("--context", o.context, "gpt: bytes the model sees (its longest prompt)")->group(kGroup);
}

void add_training_options(CLI::App& app, Options& o, RawFlags& raw) {
  constexpr const char* kGroup = "Training";
  app.add_option("--epochs", o.epochs, "passes over the training data")->group(kGroup);
  app.add_option("--stop-after", o.stop_after, "stop after this many epochs of this invocation (checkpoint, "
                 "then resume later with the same flags and --resume)")->group(kGroup);
  app.add_option("--max-steps", o.max_steps, "end training after this many optimizer steps (0: no limit; "
                 "default 1000 for gpt)")->group(kGroup);
  app.add_option("--batch-size", o.batch_size, "examples per step, per device")->group(kGroup);
  app.add_option("--optimizer", o.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))->group(kGroup);
  app.add_option("--lr", o.lr, "learning rate (default 0.01 for sgd, 0.001 for adam/adamw)")->group(kGroup);
  app.add_option("--momentum", o.momentum, "SGD momentum")->group(kGroup);
  app.add_option("--weight-decay", o.weight_decay, "L2 (sgd, adam) or decoupled (adamw) weight decay")->group(kGroup);
  app.add_option("--schedule", o.schedule, "learning-rate schedule: none or cosine (per step)")
      ->check(CLI::IsMember({"none", "cosine"}))->group(kGroup);
  app.add_option("--clip-grad", o.clip_grad, "scale the gradients to at most this global L2 norm before each "
                 "step (0: off; default 1.0 for gpt)")->group(kGroup);
  app.add_option("--seed", raw.seed, "seed for data, initialisation and shuffling (>= 0)")->group(kGroup);
  app.add_flag("--no-shuffle", raw.no_shuffle, "keep the data in file order")->group(kGroup);
  app.add_option("--num-workers", o.num_workers, "background threads building batches")->group(kGroup);
  app.add_option("--threads", raw.threads, "intra-op threads per process for the CPU kernels and GEMM (default: "
                 "MT_NUM_THREADS, else the cores divided among this machine's ranks)")->group(kGroup);
  app.add_option("--accumulate", o.accumulate, "micro-batches of --batch-size per optimizer step: gradients "
                 "add up over K batches (DDP communicates once per step), so --batch-size B --accumulate K "
                 "trains like --batch-size K*B")->group(kGroup);
  app.add_option("--early-stop", o.early_stop, "stop when the --eval score has not improved for this many epochs, "
                 "and save the best epoch's weights (0: off)")->group(kGroup);
  app.add_flag("--allow-nonfinite", o.allow_nonfinite, "train on after a NaN or infinite loss (default: stop at "
               "the first one, naming the step)")->group(kGroup);
  app.add_option("--max-memory", raw.max_memory, "at most this much tensor memory per process (e.g. 300M, 2G; "
                 "default: MT_MAX_MEMORY, else no limit): an allocation past it stops the run with one "
                 "out-of-memory line")->group(kGroup);
  app.add_option("--precision", o.precision, "fp32, or mixed precision: bf16 (forward and loss under autocast, "
                 "matmul, linear, conv and attention in bfloat16, float32 master weights and gradients) or "
                 "fp16 (as bf16 in float16, the loss scaled by a dynamic GradScaler: steps whose gradients overflow are skipped)")->check(CLI::IsMember({"fp32", "bf16", "fp16"}))->group(kGroup);
}

void add_file_options(CLI::App& app, Options& o) {
  constexpr const char* kGroup = "Files";
  app.add_option("--save", o.save, "where the final weights go (safetensors)")->group(kGroup);
  app.add_option("--init", o.init, "start from the weights in this safetensors file")->group(kGroup);
  app.add_option("--init-prefix", o.init_prefix, "rename --init's tensors: OLD=NEW replaces a leading OLD by NEW "
                 "(=0. loads a PyTorch nn.Linear's weight/bias, net.=0. a module's net.weight)")->group(kGroup);
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "save a checkpoint there after every epoch")->group(kGroup);
  app.add_option("--keep", o.keep, "checkpoints kept in --checkpoint-dir")->group(kGroup);
  app.add_option("--checkpoint-every", o.checkpoint_every, "also checkpoint every N optimizer steps (0: only at "
                 "epoch ends); --resume continues mid-epoch at that step, exactly")->group(kGroup);
  app.add_option("--resume", o.resume, "continue from a checkpoint file, or 'auto': the newest in "
                 "--checkpoint-dir (none there: start fresh)")->group(kGroup);
  app.add_option("--log-json", o.log_json, "write the run as JSON lines to this file: a record per epoch (loss, "
                 "rate, lr), per evaluation with --eval, and per --log-every steps; emptied at the start of a run, "
                 "appended to by --resume")->group(kGroup);
  app.add_option("--log-every", o.log_every, "with --log-json: also a record every N optimizer steps (that step's "
                 "loss and lr; 0: none)")->group(kGroup);
}

void add_distributed_options(CLI::App& app, Options& o) {
  constexpr const char* kGroup = "Distributed";
  // Guards against hangs and silent divergence (--timeout ... --heartbeat-timeout): distributed/fault/, docs/ddp.md.
  app.add_option("--nproc", o.nproc, "train data-parallel on this many CPU processes (MPI or Gloo: "
                 "--backend); --batch-size is per process")->group(kGroup);
  app.add_option("--nnodes", o.nnodes, "machines in the job: run mini_train with the same flags on each, "
                 "with its own --node-rank and node 0's --master-addr/--master-port")->group(kGroup);
  app.add_option("--node-rank", o.node_rank, "this machine's index, 0..nnodes-1 (node 0 hosts the store)")
      ->group(kGroup);
  app.add_option("--master-addr", o.master_addr, "address of rank 0's store (node 0's address when --nnodes > 1)")
      ->group(kGroup);
  app.add_option("--master-port", o.master_port, "port of rank 0's store (default: a free one; required "
                 "when --nnodes > 1)")->group(kGroup);
  app.add_option("--backend", o.backend, "CPU collectives: mpi (shared memory; the job starts through "
                 "mpirun), gloo (TCP), or auto: mpi when this build has it and mpirun is installed")
      ->check(CLI::IsMember({"auto", "gloo", "mpi"}))->group(kGroup);
  app.add_option("--gpus", o.gpus, "train on these GPUs, comma-separated: one process per GPU, NCCL "
                 "between them; --batch-size is per GPU")->group(kGroup);
  app.add_flag("--ddp-stats", o.ddp_stats, "after training, print the gradient all-reduce statistics and every rank's "
               "peak tensor memory (parameters, gradients, optimizer state, the rest)")
      ->group(kGroup);
  app.add_option("--comm-hook", o.comm_hook, "how DDP communicates gradients: allreduce, fp16 (compressed "
                 "to half precision: half the bytes, about 3 significant digits) or bf16 (half the bytes, "
                 "float32's range, about 2 significant digits)")
      ->check(CLI::IsMember({"allreduce", "fp16", "bf16"}))->group(kGroup);
  app.add_option("--bucket-cap-mb", o.bucket_cap_mb, "DDP: MiB of gradients per all-reduce bucket (the first and "
                 "the last are 1 MiB); smaller buckets start communicating earlier in backward")
      ->group(kGroup);
  app.add_flag("--sync-bn", o.sync_bn, "DDP: BatchNorm normalises with the statistics of every rank's batch "
               "together (SyncBatchNorm; --model cnn), not each rank's own")
      ->group(kGroup);
  app.add_option("--zero", o.zero, "1: ZeRO-1, shard the optimizer state over the ranks (each keeps 1/N; "
                 "gradients reduce-scattered, parameters all-gathered); 2: ZeRO-2, the reduced gradients too "
                 "(each rank keeps only its 1/N shard of them); 3: ZeRO-3, fully sharded: the parameters too, each "
                 "transformer block or top-level layer gathered only around its forward and backward; 0: every rank "
                 "keeps all of it")
      ->check(CLI::Validator([](std::string& v) {
                return v == "0" || v == "1" || v == "2" || v == "3" ? std::string() : v + " is not 0, 1, 2 or 3"; },
                            "{0,1,2,3}"))
      ->group(kGroup);
  app.add_option("--checkpoint-format", o.checkpoint_format, "sharded: under --zero 1|2|3 each rank writes its "
                 "shard (of the optimizer state; under 3 of the parameters too) to a file of its own, rank 0 an index "
                 "(the default with --zero); single: one file, the shards gathered to rank 0 first (the default "
                 "otherwise)")
      ->check(CLI::IsMember({"sharded", "single"}))->group(kGroup);
  app.add_option("--timeout", o.timeout, "seconds the rendezvous and each collective may wait for the "
                 "other ranks before the job fails, naming them")->group(kGroup);
  app.add_option("--check-replicas", o.check_replicas, "compare a hash of every parameter across the ranks "
                 "every K steps as well as at each epoch end (a divergence names the parameter and ranks)")
      ->group(kGroup);
  app.add_option("--max-restarts", o.max_restarts, "after a worker fails, start all workers again from the "
                 "newest checkpoint of --checkpoint-dir (or from the start), at most this many times; with "
                 "--nnodes, every node together (one count per job; --checkpoint-dir shared by all nodes)")->group(kGroup);
  app.add_option("--heartbeat-timeout", o.heartbeat_timeout, "seconds a worker may send no heartbeat (stopped, "
                 "frozen) before the job ends naming it and its last phase (--nproc's launcher watches, else the ranks "
                 "watch each other through the store); 0: off")->group(kGroup);
}

void add_output_options(CLI::App& app, Options& o) {
  constexpr const char* kGroup = "Output";
  app.add_flag("--eval", o.eval, "report accuracy (or loss) on the test split after every epoch and at the end")
      ->group(kGroup);
  app.add_flag("--quiet,-q", o.quiet, "print only errors, warnings and the end (the --eval score, --early-stop's "
               "line, the saved file)")->group(kGroup);
  app.add_flag("--env", o.env, "describe this machine (CPU, GPUs, CUDA, NCCL, Gloo) and exit")->group(kGroup);
  app.add_flag("--version", o.version, "print the version, the commit and the backends built in, and exit")
      ->group(kGroup);
  app.add_option("--trace", o.trace, "write a Chrome-trace / Perfetto JSON of every rank's --trace-steps to this "
                 "file (data, forward, each backward node, each DDP bucket's all-reduce, optimizer; open it in "
                 "ui.perfetto.dev, draw it with scripts/trace_to_svg.py)")->group(kGroup);
  app.add_option("--trace-steps", o.trace_steps, "the steps --trace records, A:B inclusive (1-based; only these "
                 "are kept in memory)")->group(kGroup);
}

// Presets for what the user left unsaid: a flag given on the command line always wins.
void apply_presets(CLI::App& app, Options& o) {
  // --model cnn (model_cnn.h) takes Fashion-MNIST images unless given files: the preset below applies.
  if (o.model == "cnn" && o.dataset != "files") preset(app, "--dataset", o.dataset, "fashion-mnist");
  const bool fashion = o.dataset == "fashion-mnist";
  if (fashion) {
    preset(app, "--model", o.model, "mlp");
    preset(app, "--optimizer", o.optimizer, "adam");
    preset(app, "--schedule", o.schedule, "cosine");
    preset(app, "--batch-size", o.batch_size, 64);
    preset(app, "--standardize", o.standardize, true);
  }
  if (o.optimizer != "sgd") preset(app, "--lr", o.lr, 1e-3);
  if (o.optimizer == "adamw") preset(app, "--weight-decay", o.weight_decay, 1e-2);
  // The GPT's preset (model_gpt.h): --model gpt, --dataset text and --text each imply the others.
  if (!o.text.empty()) preset(app, "--dataset", o.dataset, "text");
  if (o.dataset == "text") preset(app, "--model", o.model, "gpt");
  if (o.model == "gpt") {
    preset(app, "--dataset", o.dataset, "text");
    preset(app, "--optimizer", o.optimizer, "adamw");
    preset(app, "--lr", o.lr, 1e-3);
    preset(app, "--weight-decay", o.weight_decay, 0.1);
    preset(app, "--schedule", o.schedule, "cosine");
    preset(app, "--clip-grad", o.clip_grad, 1.0);
    preset(app, "--epochs", o.epochs, 1);
    preset(app, "--max-steps", o.max_steps, 1000);
  }
  for (const char* flag : {"--layers", "--heads", "--dim", "--context"})
    MT_CHECK(o.model == "gpt" || app.get_option(flag)->count() == 0, flag, " applies to --model gpt; --model ",
             o.model, " has no such setting");
}

// Flags given explicitly that this job would not use: each is a request the run cannot honour, so
// it is refused in one line rather than dropped without a word. (Options that act on DDP only are
// checked once the run knows its processes: data_parallel.h.)
void refuse_unused_flags(const CLI::App& app, const Options& o) {
  const auto given = [&](const char* flag) { return app.get_option(flag)->count() > 0; };
  const std::string data = o.dataset == "files" ? "--inputs/--targets" : "--dataset " + o.dataset;
  MT_CHECK(!given("--dataset") || o.dataset != "files", "--dataset ", app.get_option("--dataset")->as<std::string>(),
           " and --inputs/--targets both choose the data: give one of them");
  for (const char* flag : {"--samples", "--features"})
    MT_CHECK(!given(flag) || o.dataset == "synthetic", flag, " sizes --dataset synthetic; this run's data is ", data);
  MT_CHECK(!given("--data-dir") || o.dataset == "fashion-mnist", "--data-dir is Fashion-MNIST's folder; this run's "
           "data is ", data);
  MT_CHECK(!given("--text") || o.dataset == "text", "--text is the corpus of --dataset text (--model gpt); this "
           "run's data is ", data);
  for (const char* flag : {"--standardize", "--task"})
    MT_CHECK(!given(flag) || o.dataset != "text", flag, " applies to rows of numbers; --dataset text is bytes, whose "
             "next byte the GPT predicts");
  MT_CHECK(!given("--keep") || !o.checkpoint_dir.empty(), "--keep counts the checkpoints of --checkpoint-dir: give one");
  MT_CHECK(!given("--trace-steps") || !o.trace.empty(), "--trace-steps chooses the steps --trace records: give "
           "--trace FILE");
  MT_CHECK(!given("--init-prefix") || !o.init.empty(), "--init-prefix renames the tensors of --init: give --init FILE");
  MT_CHECK(!given("--checkpoint-format") || !o.checkpoint_dir.empty(), "--checkpoint-format chooses how the "
           "checkpoints of --checkpoint-dir are written: give one");
}

// --hidden's widths; --model mlp only. Default 512,256 for Fashion-MNIST, else 64.
void parse_hidden(Options& o, const std::string& hidden) {
  MT_CHECK(hidden.empty() || o.model == "mlp", "--hidden ", hidden, " applies to --model mlp; --model ", o.model,
           " has no hidden layers");
  if (hidden.empty()) {
    o.hidden = o.dataset == "fashion-mnist" ? std::vector<int64_t>{512, 256} : std::vector<int64_t>{64};
  } else {
    std::stringstream ss(hidden);
    std::string part;
    while (std::getline(ss, part, ',')) {
      char* end = nullptr;
      const long long v = std::strtoll(part.c_str(), &end, 10);
      MT_CHECK(!part.empty() && *end == '\0', "--hidden: '", hidden, "' is not a comma-separated list of widths");
      o.hidden.push_back(v);
    }
  }
}

}  // namespace

bool parse_options(int argc, char** argv, Options& o, int* exit_code) {
  CLI::App app(kDescription, "mini_train");
  app.option_defaults()->always_capture_default();
  app.get_formatter()->column_width(34);
  RawFlags raw;
  add_data_options(app, o);
  add_model_options(app, o, raw);
  add_training_options(app, o, raw);
  add_file_options(app, o);
  add_distributed_options(app, o);
  add_output_options(app, o);
  if (!parse_command_line(app, argc, argv, exit_code)) return false;
  if (app.get_option("--threads")->count() > 0) o.threads = mt::detail::parse_num_threads(raw.threads, "--threads");
  if (app.get_option("--max-memory")->count() > 0) o.max_memory = parse_memory_size(raw.max_memory, "--max-memory");
  else if (const char* env = std::getenv("MT_MAX_MEMORY"); env && *env) o.max_memory = parse_memory_size(env, "MT_MAX_MEMORY");
  o.shuffle = !raw.no_shuffle;
  MT_CHECK(raw.seed >= 0, "--seed must be >= 0, got ", raw.seed);
  o.seed = static_cast<uint64_t>(raw.seed);
  if (!o.inputs.empty() || !o.targets.empty()) o.dataset = "files";
  if (o.data_dir.empty()) o.data_dir = data::kFashionMnistDir;
  if (o.val_split > 0) o.eval = true;  // a validation split is there to be scored
  apply_presets(app, o);
  refuse_unused_flags(app, o);
  // checkpoint_sharded.h: the stages whose ranks hold pieces (ZeroRedundancyOptimizer::local_state, and
  // under 3 FullyShardedDataParallel's and FsdpOptimizer's local_state_dict).
  if (o.checkpoint_format.empty()) o.checkpoint_format = o.zero > 0 ? "sharded" : "single";
  parse_hidden(o, raw.hidden);
  return true;
}

// Note [One file parses the command lines]: CLI11 is header-only, and a file holding only its
// include takes 6.6 s to compile at -O3 here. Three files included it; now the subcommands' options
// are parsed here into plain structs (options.h), and generate.cpp and inference.cpp do not see it:
// 13.5 + 12.4 s -> 4.0 + 4.7 s in the Release build, this file 19.4 -> 21.5 s (9.9 + 8.5 -> 3.1 +
// 3.5 s and 11.1 -> 18.6 s under the sanitizers).

bool parse_generate_options(int argc, char** argv, GenerateOptions& g, int* exit_code) {
  CLI::App app("mini_train generate: continues a prompt with a GPT saved by mini_train --model gpt",
               "mini_train generate");
  app.add_option("--init", g.init, "the model file (mini_train --model gpt's --save), or a checkpoint of one")->required();
  app.add_option("--prompt", g.prompt, "the text to continue (at most the model's context in bytes)")->required();
  app.add_option("--tokens", g.tokens, "bytes to generate (0..1000000)")->capture_default_str();
  app.add_option("--temperature", g.temperature, "divides the logits: < 1 surer, > 1 wilder, 0 the most likely byte")
      ->capture_default_str();
  app.add_option("--top-k", g.top_k, "sample among the k most likely bytes only (0: all)")->capture_default_str();
  app.add_option("--seed", g.seed, "seed of the sampling (the same seed, the same text)")->capture_default_str();
  return parse_command_line(app, argc - 1, argv + 1, exit_code);
}

bool parse_eval_options(int argc, char** argv, EvalOptions& e, int* exit_code) {
  CLI::App app("mini_train eval: the test score of a model file saved by mini_train (its metadata says the "
               "model, task, data and preprocessing)", "mini_train eval");
  app.add_option("--init", e.init, "the model file (mini_train's --save), or a checkpoint (its weights)")->required();
  app.add_option("--dataset", e.dataset, "synthetic or fashion-mnist (default: what the model was trained on)")
      ->check(CLI::IsMember({"synthetic", "fashion-mnist"}));
  app.add_option("--data-dir", e.data_dir, "Fashion-MNIST folder")->default_str(data::kFashionMnistDir);
  app.add_option("--inputs", e.inputs, "score on these rows instead (.npy or .csv) ...");
  app.add_option("--targets", e.targets, "... and these targets");
  app.add_option("--text", e.text, "a GPT: the text whose last 10 % to score (default: its training corpus)");
  if (!parse_command_line(app, argc - 1, argv + 1, exit_code)) return false;
  if (e.data_dir.empty()) e.data_dir = data::kFashionMnistDir;
  return true;
}

bool parse_predict_options(int argc, char** argv, PredictOptions& p, int* exit_code) {
  CLI::App app("mini_train predict: predictions of a model file saved by mini_train for every row of --inputs",
               "mini_train predict");
  app.add_option("--init", p.init, "the model file (mini_train's --save), or a checkpoint (its weights)")->required();
  app.add_option("--inputs", p.inputs, "rows to predict, .npy or .csv")->required();
  app.add_option("--output", p.output, "where the predictions go (.npy): class indices (int64) or values (float32)")
      ->required();
  app.add_flag("--probabilities", p.probabilities, "a classifier: each row's softmax probabilities per class "
               "(float32, shape (n, classes)) instead of its class index");
  return parse_command_line(app, argc - 1, argv + 1, exit_code);
}

bool parse_plot_options(int argc, char** argv, PlotOptions& p, int* exit_code) {
  CLI::App app("mini_train plot: the training loss, the --eval metric and the learning rate against the step, "
               "from --log-json files, one colour per file, as an SVG", "mini_train plot");
  app.add_option("logs", p.logs, "--log-json files (JSON lines), drawn over each other")->required();
  app.add_option("-o,--output", p.output, "where the SVG goes")->required();
  app.add_option("--title", p.title, "the heading (default: mini_train)");
  return parse_command_line(app, argc - 1, argv + 1, exit_code);
}

bool parse_consolidate_options(int argc, char** argv, ConsolidateOptions& c, int* exit_code) {
  CLI::App app("mini_train consolidate: one file from a checkpoint, sharded (--zero) or not: the ordinary "
               "single-file checkpoint, or the model file of its weights", "mini_train consolidate");
  app.add_option("checkpoint", c.checkpoint, "a checkpoint (a sharded one's index, or its .shards folder), or a "
                 "--checkpoint-dir: its newest checkpoint")->required();
  app.add_option("-o,--output", c.output, "the file to write")->required();
  app.add_option("--as", c.as, "checkpoint: a single-file checkpoint that --resume takes (default); model: the "
                 "model file (--save's) of its weights, for eval, predict, generate and --init")
      ->check(CLI::IsMember({"checkpoint", "model"}));
  return parse_command_line(app, argc - 1, argv + 1, exit_code);
}

namespace {

void validate_training(const Options& o) {
  MT_CHECK(o.epochs >= 1, "--epochs must be at least 1, got ", o.epochs);
  MT_CHECK(o.stop_after >= 0, "--stop-after must be >= 0, got ", o.stop_after);
  MT_CHECK(o.stop_after == 0 || !o.checkpoint_dir.empty(), "--stop-after without --checkpoint-dir would lose "
           "the run: give a --checkpoint-dir to resume from");
  MT_CHECK(o.batch_size >= 1, "--batch-size must be at least 1, got ", o.batch_size);
  MT_CHECK(o.accumulate >= 1 && o.accumulate <= 65536, "--accumulate must be in 1..65536 micro-batches, got ",
           o.accumulate);
  MT_CHECK(std::isfinite(o.lr) && o.lr > 0, "--lr must be a positive number, got ", o.lr);
  MT_CHECK(o.momentum >= 0 && o.momentum < 1, "--momentum must be in [0, 1), got ", o.momentum);
  MT_CHECK(o.weight_decay >= 0 && std::isfinite(o.weight_decay), "--weight-decay must be >= 0, got ", o.weight_decay);
  MT_CHECK(o.samples >= 1 && o.samples <= int64_t{1} << 31, "--samples must be in 1..2147483648, got ", o.samples);
  MT_CHECK(o.features >= 1 && o.features <= nn::kMaxWidth, "--features must be in 1..", nn::kMaxWidth, ", got ",
           o.features);
  MT_CHECK(o.num_workers >= 0 && o.num_workers <= 64, "--num-workers must be in 0..64, got ", o.num_workers);
}

void validate_distributed(const Options& o) {
  MT_CHECK(o.nproc >= 1 && o.nproc <= 256, "--nproc must be in 1..256, got ", o.nproc);
  MT_CHECK(o.master_port >= 0 && o.master_port <= 65535, "--master-port must be in 0..65535, got ", o.master_port);
  validate_backend(o);  // backend.h: mpi without MPI, mpi with --gpus or --nnodes
  MT_CHECK(o.nnodes >= 1 && o.nnodes <= 4096, "--nnodes must be in 1..4096, got ", o.nnodes);
  MT_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "--node-rank must be in 0..", o.nnodes - 1,
           " (--nnodes ", o.nnodes, "), got ", o.node_rank);
  MT_CHECK(o.nnodes == 1 || o.master_port > 0, "--nnodes ", o.nnodes, ": give --master-port (and node 0's "
           "--master-addr): the other nodes cannot guess a port node 0 picked");
  MT_CHECK(o.timeout >= 1 && o.timeout <= 86400, "--timeout must be in 1..86400 seconds, got ", o.timeout);
  MT_CHECK(o.check_replicas >= 0, "--check-replicas must be >= 0 steps, got ", o.check_replicas);
  MT_CHECK(o.max_restarts >= 0 && o.max_restarts <= 1000, "--max-restarts must be in 0..1000, got ", o.max_restarts);
  // torchrun sets TORCHELASTIC_RUN_ID in its workers; it restarts them itself, and its workers never launch.
  MT_CHECK(o.max_restarts == 0 || !std::getenv("TORCHELASTIC_RUN_ID"), "--max-restarts ", o.max_restarts,
           ": this process was started by torchrun, which restarts workers itself: give torchrun --max-restarts ",
           o.max_restarts, " instead, and drop it from mini_train's arguments");
  MT_CHECK(o.heartbeat_timeout >= 0 && o.heartbeat_timeout <= 86400, "--heartbeat-timeout must be in 0..86400 "
           "seconds, got ", o.heartbeat_timeout);
}

// Files that must exist are checked here, so that a launcher refuses before it starts any worker.
void validate_files(const Options& o) {
  MT_CHECK(o.keep >= 1, "--keep must be at least 1, got ", o.keep);
  MT_CHECK(o.checkpoint_every >= 0, "--checkpoint-every must be >= 0 steps, got ", o.checkpoint_every);
  MT_CHECK(std::isfinite(o.val_split) && o.val_split >= 0 && o.val_split < 1, "--val-split must be in [0, 1), got ",
           o.val_split);
  MT_CHECK(o.val_split == 0 || o.dataset == "files", "--val-split holds out rows of --inputs/--targets; --dataset ",
           o.dataset, " has its own test split, which --eval scores");
  MT_CHECK(o.early_stop >= 0, "--early-stop must be >= 0 epochs, got ", o.early_stop);
  MT_CHECK(o.early_stop == 0 || o.eval, "--early-stop ", o.early_stop, " watches the score --eval takes after each "
           "epoch: add --eval (or --val-split F for your own data)");
  MT_CHECK(o.log_every >= 0, "--log-every must be >= 0 steps, got ", o.log_every);
  MT_CHECK(o.log_every == 0 || !o.log_json.empty(), "--log-every ", o.log_every, " writes step records into "
           "--log-json: give a --log-json FILE");
  MT_CHECK(o.checkpoint_every == 0 || !o.checkpoint_dir.empty(), "--checkpoint-every ", o.checkpoint_every,
           " needs a --checkpoint-dir to write to");
  for (int64_t h : o.hidden)
    MT_CHECK(h >= 1 && h <= nn::kMaxWidth, "--hidden widths must be in 1..", nn::kMaxWidth, ", got ", h);
  MT_CHECK(o.inputs.empty() == o.targets.empty(), "--inputs and --targets go together: give both files");
  for (const auto& [flag, path] : {std::pair{"--inputs", o.inputs}, std::pair{"--targets", o.targets},
                                   std::pair{"--init", o.init},
                                   std::pair{"--resume", o.resume == "auto" ? std::string() : o.resume}}) {
    if (path.empty()) continue;
    std::error_code ec;
    MT_CHECK(std::filesystem::exists(path, ec), flag, " ", path, ": no such file");
    const std::string kind = file_kind(path);  // tensor/output_file.h: the words an output's refusal uses
    MT_CHECK(kind.empty(), flag, " ", path, ": not a regular file (", kind, "); give a file");
  }
  MT_CHECK(o.resume != "auto" || !o.checkpoint_dir.empty(), "--resume auto looks in --checkpoint-dir: give one");
  MT_CHECK(!o.save.empty(), "--save needs a path");
}

void validate_model(const Options& o) {
  MT_CHECK(o.momentum == 0 || o.optimizer == "sgd", "--momentum applies to sgd only (adam/adamw use betas)");
  MT_CHECK(o.max_steps >= 0, "--max-steps must be >= 0, got ", o.max_steps);
  MT_CHECK(o.clip_grad >= 0 && std::isfinite(o.clip_grad), "--clip-grad must be >= 0, got ", o.clip_grad);
  MT_CHECK(o.checkpoint_format != "sharded" || o.zero > 0, "--checkpoint-format sharded writes each rank's shard "
           "of the state of --zero 1|2|3 (this run: --zero ", o.zero, "); add --zero 1|2|3, or leave "
           "--checkpoint-format single");
  MT_CHECK(o.zero == 0 || o.comm_hook == "allreduce", "--zero ", o.zero, " reduce-scatters the gradients itself: it does "
           "not combine with --comm-hook ", o.comm_hook);
  MT_CHECK(o.zero != 3 || o.check_replicas == 0, "--check-replicas compares whole replicas of the model, and under "
           "--zero 3 no rank holds one; drop one of them");
  MT_CHECK(!o.sync_bn || o.model == "cnn", "--sync-bn synchronises BatchNorm, and only --model cnn has it (this "
           "run: --model ", o.model, ")");
  MT_CHECK(o.bucket_cap_mb > 0 && o.bucket_cap_mb <= 1 << 20, "--bucket-cap-mb must be in (0, 1048576], got ",
           o.bucket_cap_mb);
  parse_trace_steps(o.trace_steps);  // tracing.h: A:B or an error naming --trace-steps
  MT_CHECK((o.model == "gpt") == (o.dataset == "text"), "--model ", o.model, " with --dataset ", o.dataset,
           ": --model gpt trains on --dataset text (bytes), and text needs --model gpt");
  if (o.model == "gpt") {
    for (const auto& [flag, v] : {std::pair{"--layers", o.layers}, std::pair{"--heads", o.heads},
                                  std::pair{"--dim", o.dim}, std::pair{"--context", o.context}})
      MT_CHECK(v >= 1 && v <= 1 << 16, flag, " must be in 1..65536, got ", v);
    MT_CHECK(o.dim % o.heads == 0, "--heads ", o.heads, " does not divide --dim ", o.dim,
             ": each head gets dim / heads of the width");
    MT_CHECK(o.optimizer == "adamw", "--model gpt trains with --optimizer adamw (model_gpt.h's recipe), got --optimizer ",
             o.optimizer);
  }
}

}  // namespace

void validate(const Options& o) {
  validate_gpus(o);  // gpus.h: malformed lists, --nproc, no CUDA build, no GPU, no such GPU
  validate_training(o);
  validate_distributed(o);
  validate_files(o);
  validate_model(o);
}

}  // namespace mt::app
