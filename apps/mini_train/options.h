// mini_train's options: what the command line can say, the defaults of each dataset's preset, and
// the checks that refuse impossible requests before any work starts.
//
// Presets: with no flags the job is the seed's template (synthetic regression, Linear(10, 1), SGD
// lr 0.01, batch 32, MSE, 5 epochs). `--dataset fashion-mnist` switches every default that the user
// did not set to a recipe that reaches ≥ 0.88 test accuracy in 5 epochs (MLP 784-512-256-10, Adam
// 1e-3 with cosine decay, batch 64, standardised inputs). `--model gpt` (or `--dataset text`, or
// `--text FILE`) is a 4-layer, 4-head, 128-wide GPT with context 64 on bytes of text, trained 1000
// steps with model_gpt.h's recipe (AdamW 1e-3, warm-up and cosine, --clip-grad 1.0, batch 32).
// A flag given explicitly always wins.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt::app {

struct Options {
  // ---- data ----
  std::string dataset = "synthetic";  // synthetic | fashion-mnist | files (set by --inputs/--targets)
  std::string data_dir;               // fashion-mnist folder
  std::string inputs, targets;        // NPY or CSV files
  std::string task = "auto";          // auto | regression | classification
  int64_t samples = 1000;             // synthetic examples
  int64_t features = 10;              // synthetic input width
  bool standardize = false;           // scale inputs to zero mean, unit variance (train statistics)
  // ---- model ----
  std::string model = "linear";       // linear | mlp
  std::vector<int64_t> hidden;        // mlp widths
  // ---- training ----
  int64_t epochs = 5;
  int64_t stop_after = 0;             // > 0: leave after this many epochs in this invocation
  int64_t batch_size = 32;            // per device
  std::string optimizer = "sgd";      // sgd | adam | adamw
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  std::string schedule = "none";      // none | cosine
  uint64_t seed = 0;
  bool shuffle = true;
  int num_workers = 0;
  int threads = 0;  // --threads: intra-op threads per process (tensor/parallel.h); 0: not given, the default
  // ---- files ----
  std::string save = "final_model.safetensors";
  std::string init;                   // start from these weights
  std::string checkpoint_dir;         // a checkpoint per epoch when set
  int keep = 3;                       // checkpoints kept
  std::string resume;                 // PATH or "auto"
  std::string log_json;
  // ---- distributed (launcher.h) ----
  int nproc = 1;                      // >= 2: launch this many worker processes (Gloo, CPU), per node
  int nnodes = 1;                     // machines in the job; each runs one launcher (launcher.h)
  int node_rank = 0;                  // this machine's index in 0..nnodes-1; node 0 hosts the store
  std::string master_addr = "127.0.0.1";  // where rank 0 hosts the store
  int master_port = 0;                // 0: a free port
  std::string gpus;                   // "0,1": one worker per listed GPU (gpus.h); empty: CPU
  bool ddp_stats = false;             // rank 0 prints DistributedDataParallel's statistics
  std::string comm_hook = "allreduce";  // how DDP communicates buckets: allreduce | fp16 | bf16 (comm_hook.h)
  int zero = 0;                       // 1: ZeRO-1, each rank keeps 1/N of the optimizer state; 2: ZeRO-2, and
                                      // 1/N of the reduced gradients (distributed/zero/zero.h); 3: ZeRO-3, and
                                      // 1/N of the parameters (distributed/zero/fsdp.h)
  std::string backend = "auto";       // CPU process group: auto | gloo | mpi (backend.h)
  // ---- distributed guards (distributed/, docs/ddp.md) ----
  int64_t timeout = 300;              // seconds: rendezvous and every collective
  int64_t check_replicas = 0;         // > 0: compare the replicas every K steps too (always at epoch ends)
  int max_restarts = 0;               // the launcher reruns the workers after a failure, this many times
  int64_t heartbeat_timeout = 30;     // seconds without a worker's heartbeat before the job ends; 0: off
  // ---- output ----
  bool eval = false;                  // test score after training, and a validation line per epoch
  bool quiet = false;
  bool env = false;
  bool version = false;  // --version: print what this build is and exit
  // ---- added with issue 15: a user's surprises (grouped so that other option changes merge) ----
  std::string init_prefix;            // --init key mapping "OLD=NEW" (model_file.h)
  bool allow_nonfinite = false;       // train on after a NaN/inf loss instead of stopping
  // ---- added with issue 13: the GPT on bytes of text (model_gpt.h), and step limits ----
  std::string text;                   // --dataset text's corpus (file or folder); empty: Debian's fortunes
  int64_t layers = 4, heads = 4, dim = 128, context = 64;  // --model gpt's shape
  int64_t max_steps = 0;              // > 0: training ends after this many optimizer steps (any model)
  double clip_grad = 0;               // > 0: gradients scaled to at most this global L2 norm before a step
  bool sync_bn = false;              // DDP: BatchNorm statistics over every rank's batch (SyncBatchNorm)
  double bucket_cap_mb = 25;          // DDP's bucket size in MiB (the first bucket: 1 MiB), as PyTorch's
  // ---- added with issue 14: step checkpoints (checkpoint_step.h) ----
  int64_t checkpoint_every = 0;       // > 0: a checkpoint every N optimizer steps too, resumable mid-epoch
  // ---- added with issue 16: seeing a step (tracing.h) ----
  std::string trace;                  // a Chrome-trace / Perfetto JSON of every rank goes here; empty: off
  std::string trace_steps = "1:3";    // the steps traced, A:B inclusive: the first (warm-up) and two more
  // ---- added with issue 41: what a PyTorch user expects of a trainer ----
  int64_t accumulate = 1;             // micro-batches per optimizer step (accumulate.h)
  int64_t log_every = 0;              // > 0: a --log-json step record every N steps (json_log.h)
  double val_split = 0;               // > 0: this share of --inputs' rows validates (job.h), and --eval is on
  int64_t early_stop = 0;             // > 0: stop after this many epochs without a better --eval score (early_stop.h)
  // ---- added with issue 38: sharded checkpoints (checkpoint_sharded.h) ----
  std::string checkpoint_format;      // sharded | single; as parsed, "" becomes sharded under --zero, else single
  // ---- added with issue 38: memory per rank ----
  size_t max_memory = 0;              // > 0: bytes of tensors this process may hold (tensor/memory.h); 0: no cap
  // ---- added with issue 39: mixed precision ----
  std::string precision = "fp32";     // fp32 | bf16 | fp16: forward and loss under autocast (autograd/autocast.h)
};

// Parses argv. Returns true to go on; false when the process should exit with *exit_code (--help,
// or a parse error already printed).
bool parse_options(int argc, char** argv, Options& opts, int* exit_code);

// The subcommands' command lines (argv[1] is the subcommand's name). Parsed here, beside the
// training command line, so that CLI11 (header-only, seconds of compile in each file that
// includes it) is compiled once: Note [One file parses the command lines] in options.cpp.
struct GenerateOptions {  // `mini_train generate` (generate.h)
  std::string init, prompt;
  int64_t tokens = 200, seed = 0;
  double temperature = 1.0;  // 0: the most likely byte
  int64_t top_k = 0;         // > 0: sample among the k most likely bytes only
};
struct EvalOptions {  // `mini_train eval` (inference.h); an empty dataset or text: what the model file says
  std::string init, dataset, data_dir, inputs, targets, text;  // data_dir: filled with the default folder
};
struct PredictOptions {  // `mini_train predict` (inference.h)
  std::string init, inputs, output;
  bool probabilities = false;  // a classifier's softmax instead of its class indices
};
struct ConsolidateOptions {  // `mini_train consolidate` (consolidate.h)
  std::string checkpoint, output;
  std::string as = "checkpoint";  // checkpoint | model
};
struct PlotOptions {  // `mini_train plot` (plot.h)
  std::vector<std::string> logs;  // --log-json files
  std::string output, title;
};
bool parse_generate_options(int argc, char** argv, GenerateOptions& g, int* exit_code);
bool parse_eval_options(int argc, char** argv, EvalOptions& e, int* exit_code);
bool parse_predict_options(int argc, char** argv, PredictOptions& p, int* exit_code);
bool parse_plot_options(int argc, char** argv, PlotOptions& p, int* exit_code);
bool parse_consolidate_options(int argc, char** argv, ConsolidateOptions& c, int* exit_code);

// Throws mt::Error with the reason for requests that cannot work (before anything is loaded).
void validate(const Options& opts);

}  // namespace mt::app
