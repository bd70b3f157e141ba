// mini_train's training loop, one function per phase, in the order a run goes through them:
// set_up (process group, data, model, output checks, optimizer, loader), resume (resume.h: checkpoint state,
// and what it overrides), the data-parallel wrapping (data_parallel.h), the config table, then per
// epoch: train_epoch (train_epoch.h: the steps, with their --log-every records and --checkpoint-every
// checkpoints), report_epoch (the epoch line, validation with --eval, the JSON log: json_log.h) and
// write_checkpoint (checkpoint_writer.h); finally the --eval score and save_model. --max-steps can
// end the last epoch early. What a run holds between the phases is a Run (run.h). See trainer.h.
//
// Distributed (RANK and WORLD_SIZE in the environment: mini_train's launcher, torchrun, srun; or an
// MPI launcher's variables): this process is one rank. It meets the others through
// init_process_group (MPI or Gloo, backend.h; NCCL with --gpus), wraps the model in
// DistributedDataParallel and reads its share of each epoch through a DistributedSampler; the batch
// size is per rank. With --gpus the model, each batch and the collectives' tensors live on this
// rank's GPU (gpus.h); files are read and written from the host. Every rank loads --init/--resume;
// only rank 0 prints, logs, checkpoints and saves. The epoch line's loss is the mean over every
// rank's samples (one small all-reduce per epoch), and samples/s counts every rank's samples. At
// every epoch end (and every --check-replicas K steps) the replicas are compared (replica_guard.h).
#include "apps/mini_train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "apps/mini_train/backend.h"
#include "apps/mini_train/checkpoint_sharded.h"
#include "apps/mini_train/checkpoint_writer.h"
#include "apps/mini_train/data_parallel.h"
#include "apps/mini_train/early_stop.h"
#include "apps/mini_train/evaluate.h"
#include "apps/mini_train/gpus.h"
#include "apps/mini_train/interrupt.h"
#include "apps/mini_train/job.h"
#include "apps/mini_train/json_log.h"
#include "apps/mini_train/model_file.h"
#include "apps/mini_train/model_gpt.h"
#include "apps/mini_train/outputs.h"
#include "apps/mini_train/peer_heartbeat.h"
#include "apps/mini_train/progress.h"
#include "apps/mini_train/resume.h"
#include "apps/mini_train/run.h"
#include "apps/mini_train/tracing.h"
#include "apps/mini_train/train_epoch.h"
#include "data/dataloader.h"
#include "data/sampler.h"
#include "distributed/ddp/ddp.h"
#include "distributed/ddp/found_inf.h"
#include "distributed/fault/heartbeat.h"
#include "distributed/process_group/init_process_group.h"
#include "nn/checkpoint.h"
#include "tensor/backend.h"
#include "tensor/memory.h"
#include "tensor/parallel.h"

namespace mt::app {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int64_t count_parameters(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

// ================================== set-up ======================================================

// Bytes of the files this run writes (outputs.h), from the parameter count: float32 weights, and
// in a checkpoint the optimizer's per-parameter state too; plus room for the header.
OutputSizes output_sizes(const Options& o, int64_t params) {
  const int64_t states = o.optimizer == "sgd" ? (o.momentum > 0 ? 1 : 0) : 2;  // momentum; Adam's two moments
  return {.model_bytes = 4 * params + 65536, .checkpoint_bytes = 4 * params * (1 + states) + 65536};
}

// What the loader draws from: the byte windows of --dataset text, else the training tensors.
std::shared_ptr<const data::Dataset> training_examples(const Data& d) {
  if (d.text_train) return d.text_train;
  return d.train;
}

Run set_up(const Options& o) {
  Run r;
  r.o = o;
  r.requested_batch = o.batch_size;
  dist::set_phase(dist::Phase::Init);
  // One rank of a distributed job when the environment says so (launcher, torchrun, srun).
  r.rdv = dist::rendezvous_from_env();
  // --gpus: this process's GPU (the LOCAL_RANK-th listed one) becomes current before anything
  // touches CUDA, so that CUDA's and NCCL's state lives on it alone.
  r.device = training_device(o, r.rdv ? r.rdv->local_rank : 0);
  bind_device(r.device);
  if (o.max_memory > 0) set_memory_limit(r.device, o.max_memory);  // --max-memory: Note [Memory limit]
  if (r.rdv && r.rdv->world_size > 1)
    r.pg = dist::init_process_group({.backend = r.device.is_cuda() ? "nccl" : worker_backend(o),
                                     .rendezvous = *r.rdv, .timeout = std::chrono::seconds(o.timeout),
                                     .cuda_device = r.device.is_cuda() ? r.device.index : -1});
  r.world = r.pg ? r.rdv->world_size : 1, r.rank = r.pg ? r.rdv->rank : 0;
  r.lead = r.rank == 0;
  r.talk = r.lead && !o.quiet;
  r.d = load_data(o);
  r.signature = model_signature(o, r.d);
  {
    MemoryKindGuard kind(MemoryKind::kParameters);  // what --ddp-stats counts as parameters: Note [Memory kinds]
    r.model = build_model(o, r.d);
    // Before any training: a run whose result cannot be written does not start.
    if (r.lead) check_outputs(o, output_sizes(o, count_parameters(*r.model)));
    if (!o.init.empty()) load_init(*r.model, o.init, o.init_prefix);
    if (r.device.is_cuda()) r.model->to(r.device);  // before the optimizer is built (Module::to)
  }
  r.loss_fn = build_loss(r.d);
  r.opt = build_optimizer(o, *r.model);
  // A batch larger than this rank's share of the data is that share: one step per epoch. (Left
  // as given, a huge --batch-size overflows the step count.)
  const std::shared_ptr<const data::Dataset> examples = training_examples(r.d);
  const int64_t share = (examples->size() + r.world - 1) / r.world;  // DistributedSampler pads to this
  r.o.batch_size = std::min(o.batch_size, share);
  // The sampler is what splits the epoch between ranks; one rank: the loader shuffles itself.
  if (r.pg)
    r.loader.emplace(examples,
                     std::make_shared<data::DistributedSampler>(
                         examples->size(), r.world, r.rank,
                         data::DistributedSamplerOptions{.shuffle = o.shuffle, .seed = o.seed}),
                     data::DataLoaderOptions{.batch_size = r.o.batch_size, .num_workers = o.num_workers, .seed = o.seed,
                                             .device = r.device, .pin_memory = r.device.is_cuda()});
  else
    r.loader.emplace(examples, data::DataLoaderOptions{.batch_size = r.o.batch_size, .shuffle = o.shuffle,
                                                        .num_workers = o.num_workers, .seed = o.seed,
                                                        .device = r.device, .pin_memory = r.device.is_cuda()});
  r.acc = {.k = o.accumulate, .batch_size = r.o.batch_size, .samples = share};  // Note [Gradient accumulation]
  MT_CHECK(r.acc.batches() == r.loader->size(), "internal: the loader's ", r.loader->size(),
           " batches are not the ", r.acc.batches(), " micro-batches --accumulate counts");
  r.steps_per_epoch = r.acc.steps();
  r.scheduler = build_scheduler(o, *r.opt, total_steps(o, r.steps_per_epoch));
  if (o.precision == "fp16") {  // float16's range needs the loss scaled; bfloat16 has float32's
    r.scaler = std::make_unique<optim::GradScaler>();
    // Every rank skips a step together or steps together (Note [One found-inf for all ranks]).
    if (r.pg) r.scaler->set_found_inf_reduction(dist::any_rank_found_inf(r.pg));
  }
  return r;
}

// The set --eval scores: the test split (--val-split's held-out rows, for files), or the training
// data when there is none; for text the validation windows (cross-entropy in nats per byte, model_gpt.h).
const data::TensorDataset& eval_set(const Run& r) { return r.d.test ? *r.d.test : *r.d.train; }
const char* eval_split(const Run& r) {
  return r.d.validation ? "validation" : r.d.test || r.d.text_validation ? "test" : "train";
}
// ================================== the config table ===========================================

void print_config(const Run& r) {
  const Options& o = r.o;
  const auto row = [](const char* key, const std::string& value) { std::printf("  %-12s %s\n", key, value.c_str()); };
  std::printf("mini_train\n");
  row("model", r.signature + " (" + std::to_string(count_parameters(*r.model)) + " parameters)");
  if (!o.init.empty())
    row("init", o.init + (o.init_prefix.empty() ? "" : " (names mapped by --init-prefix " + o.init_prefix + ")"));
  row("data", r.d.description);
  row("task", std::string(r.d.classification ? "classification, cross-entropy" : "regression, mean squared error") +
                  (r.d.task_reason.empty() ? "" : " (" + r.d.task_reason + ")"));
  const std::string where = o.gpus.empty() ? std::string("cpu") : "cuda " + o.gpus;
  const std::string nodes = o.nnodes > 1 ? " on " + std::to_string(o.nnodes) + " nodes" : "";
  const std::string hook = (o.comm_hook == "allreduce" ? "" : ", " + o.comm_hook + " compression") +
                           (o.zero == 1 ? ", ZeRO-1: optimizer state sharded" : "") +
                           (o.zero == 2 ? ", ZeRO-2: optimizer state and gradients sharded" : "") +
                           (o.zero == 3 ? ", ZeRO-3: parameters, gradients and optimizer state sharded" : "");
  const std::string chosen = o.backend == "auto" && o.gpus.empty() ? ", chosen by --backend auto" : "";
  const std::string backend = r.pg ? r.pg->backend() : "";
  row("device", r.world > 1 ? where + ", " + std::to_string(r.world) + " processes" + nodes + " (" + backend +
                                  chosen + hook + ")"
                            : where + ", 1 process");
  const std::string clamped = o.batch_size == r.requested_batch ? "" : " (--batch-size " +
      std::to_string(r.requested_batch) + " is more than the " + std::to_string(o.batch_size) + " examples per process)";
  const int64_t per_step = o.batch_size * o.accumulate;  // --accumulate: examples per device and step
  const std::string micro = o.accumulate == 1 ? "" : " (" + std::to_string(o.accumulate) + " micro-batches of " +
                                                          std::to_string(o.batch_size) + ", --accumulate)";
  row("batch", std::to_string(per_step) + " per device" + micro + ", " + std::to_string(per_step * r.world) +
                   " global, " + std::to_string(r.steps_per_epoch) + " steps per epoch" + clamped);
  row("optimizer", optimizer_description(o));
  row("precision", o.precision == "fp32" ? std::string("fp32")
                                         : o.precision + " (autocast: matmul, linear, conv and attention in " +
                                               (o.precision == "bf16" ? "bfloat16" : "float16") +
                                               ", float32 master weights" +
                                               (o.precision == "fp16" ? "; loss scaled by a GradScaler from 65536" : "") + ")");
  row("epochs", std::to_string(o.epochs) + (o.max_steps > 0 ? ", at most " + std::to_string(o.max_steps) +
                                                                   " steps (--max-steps)" : "") +
                   (o.early_stop > 0 ? ", ending after " + std::to_string(o.early_stop) + " without a better " +
                                           eval_split(r) + " score (--early-stop)" : "") +
                   (r.resumed_from.empty() ? "" : ", resuming from " + r.resumed_from));
  row("seed", std::to_string(o.seed));
  row("threads", std::to_string(get_num_threads()) + " per process" +
                     (o.gpus.empty() ? std::string(", GEMM via ") + cpu_gemm_library() : " (host-side work)"));
  if (!o.checkpoint_dir.empty()) row("checkpoints", o.checkpoint_dir + " (keep " + std::to_string(o.keep) + ")");
  std::fflush(stdout);
}

// What --eval scores: eval_set's rows (eval_split names them), or for text the validation windows.
Score score(const Run& r) {
  const int64_t rows = r.d.text_validation ? r.d.text_validation->size() : eval_set(r).size();
  ProgressBar bar(r.talk, std::string("Evaluating ") + eval_split(r), rows);  // progress.h
  if (r.d.text_validation) return evaluate_text(*r.model, *r.d.text_validation, r.device, &bar);
  return evaluate(*r.model, eval_set(r), r.d.classification, r.device, &bar);
}

// The epoch line, and with --eval the validation line; an epoch record and an eval record with
// --log-json (Note [Log records]). Returns the --eval score it printed (rank 0 only), for the run's
// final report.
std::optional<Score> report_epoch(Run& r, int64_t epoch, const EpochResult& e) {
  if (!r.lead) return std::nullopt;
  std::optional<Score> score;
  double eval_seconds = 0;
  if (r.o.eval) {
    dist::set_phase(dist::Phase::Evaluation);
    const auto start = Clock::now();
    score = app::score(r);
    eval_seconds = seconds_since(start);
  }
  if (r.talk) {
    std::printf("Epoch [%lld/%lld], Loss: %.4f, %.0f samples/s\n", static_cast<long long>(epoch),
                static_cast<long long>(r.o.epochs), e.loss, e.samples_per_s);
    if (score)
      std::printf("Epoch [%lld/%lld] %s %s: %.4f\n", static_cast<long long>(epoch), static_cast<long long>(r.o.epochs),
                  eval_split(r), score->metric(), score->value);
    std::fflush(stdout);
  }
  if (r.log.is_open()) {
    r.log.write(EpochRecord{.epoch = epoch, .step = r.step, .loss = e.loss, .samples_per_s = e.samples_per_s,
                            .seconds = e.seconds, .lr = r.opt->lr(0)});
    if (score)
      r.log.write(EvalRecord{.epoch = epoch, .step = r.step, .split = eval_split(r), .metric = score->metric(),
                             .value = score->value, .seconds = eval_seconds});
  }
  return score;
}

// ================================== the end =====================================================

// The final weights with what it takes to use them elsewhere (model_file.h), and the summary
// line that even --quiet prints.
// `epochs`: the epochs the run trained (fewer than --epochs when --early-stop ended it).
void save_model(const Run& r, double last_loss, int64_t epochs, double seconds) {
  NamedTensors weights = r.model->state_dict();
  for (auto& [name, t] : weights) t = t.detach().to(kCPU);  // files are written from host memory
  save_safetensors(r.o.save, weights, model_metadata(r.o, r.d, r.signature));
  char loss[32] = "-";  // no epoch ran in this invocation: nothing to report
  if (!std::isnan(last_loss)) std::snprintf(loss, sizeof loss, "%.4f", last_loss);
  // A run that --max-steps ended says so: its last epoch may not have run to its end.
  const bool by_steps = steps_exhausted(r);
  const long long done = by_steps ? r.step : epochs;
  std::printf("saved %s (%lld %s%s, last loss %s, %.1f s)\n", r.o.save.c_str(), done, by_steps ? "step" : "epoch",
              done == 1 ? "" : "s", loss, seconds);
}

// What the run ends with: the --ddp-stats lines (at one process only the peak memory), and on rank 0
// the final --eval score.
void report_end(Run& r, const std::optional<Score>& last_score) {
  if (r.ddp && r.o.ddp_stats) {
    const std::vector<dist::BucketArrival> arrivals = r.ddp->bucket_arrivals();  // a collective: every rank
    if (r.lead) std::fputs(dist::describe_ddp_stats(r.ddp->stats(), arrivals).c_str(), stdout);
  }
  if (r.fsdp && r.o.ddp_stats && r.lead) {
    const dist::FSDPStats& s = r.fsdp->stats();
    std::printf("fsdp: %lld units, %lld all-gathers, %lld reduce-scatters; waited %.1f ms for all-gathers (exposed)\n",
                static_cast<long long>(s.units), static_cast<long long>(s.allgathers),
                static_cast<long long>(s.reduce_scatters), s.allgather_wait_ms);
  }
  if (r.o.ddp_stats) {  // what --zero saves shows here (bench/zero.sh, scripts/zero_memory_table.py)
    const std::vector<TensorMemory> ranks =
        r.pg ? dist::peak_memory_per_rank(*r.pg, r.device) : std::vector<TensorMemory>{tensor_memory(r.device)};
    if (r.lead) std::fputs(dist::describe_peak_memory(ranks, r.device).c_str(), stdout);
  }
  if (r.scaler && r.talk)
    std::printf("fp16: %lld step%s skipped for inf or NaN gradients; loss scale now %g\n",
                static_cast<long long>(r.skipped_steps), r.skipped_steps == 1 ? "" : "s", r.scaler->get_scale());
  if (!r.lead || !r.o.eval) return;
  // Note [The final score]: the last epoch's --eval score was taken after its last step, and
  // nothing has changed the weights (or BatchNorm's statistics) since, so it is this score; only a
  // run that trained no epoch here (--resume of a finished run) scores the model anew. Scoring the
  // test split again would cost one more pass over it, half the evaluation of a 1-epoch run.
  dist::set_phase(dist::Phase::Evaluation);
  const Score s = last_score ? *last_score : score(r);
  const char* split = r.d.validation ? "Validation" : r.d.test || r.d.text_validation ? "Test" : "Train (no test split)";
  if (s.classification) std::printf("%s accuracy: %.4f\n", split, s.value);
  else if (r.d.text_validation) std::printf("%s loss: %.6f nats per byte (%.4f bits per byte)\n", split, s.value,
                                            s.value / std::log(2.0));
  else std::printf("%s loss: %.6f\n", split, s.value);
}

// Between set-up and the first epoch: the ranks' watch on each other, resume, DDP, trace, log.
// `watched`: a launcher reads this process's heartbeat.
void prepare(Run& r, bool watched) {
  // Ctrl-C or SIGTERM: one line saying what is saved (interrupt.h). Under --nproc the launcher speaks.
  if (r.lead && !watched) install_interrupt_line(r.o.checkpoint_dir);
  // Without that launcher (torchrun, srun, by hand), the ranks watch each other (Note [Store
  // heartbeat]).
  if (!watched) r.peers = peer_heartbeat(r.o, r.rdv, r.pg.get());
  resume(r);
  if (!r.o.checkpoint_dir.empty()) note_checkpoint(latest_checkpoint(r.o.checkpoint_dir));
  // After --init/--resume (every rank loaded the same state; DDP checks and broadcasts rank 0's).
  set_up_data_parallel(r);  // data_parallel.h: DDP, --sync-bn, --zero 1|2
  if (!r.o.trace.empty()) r.tracer = start_trace(r.o.trace_steps, r.pg.get(), *r.model);  // tracing.h
  if (r.talk) print_config(r);
  if (r.lead && !r.o.log_json.empty())  // json_log.h; a resume drops what followed its checkpoint
    r.log.open(r.o.log_json, !r.resumed_from.empty(), r.first_epoch - 1, r.step);
  r.log_since = Clock::now();
}

// Rank 0's yes or no, on every rank (--early-stop: every rank leaves after the same epoch).
bool rank0_says(const Run& r, bool yes) {
  if (!r.pg) return yes;
  Tensor flag = from_vector(std::vector<double>{yes ? 1.0 : 0.0}, {1}).to(r.pg->device());
  r.pg->broadcast(flag, 0)->wait();
  return flag.to(kCPU).item() != 0;
}

// The run, once set up: prepare, train, evaluate, save.
int train_set_up(Run& r, bool watched, Clock::time_point start) {
  prepare(r, watched);
  double last_loss = std::nan("");
  std::optional<Score> last_score;  // the last epoch's --eval score: Note [The final score]
  // The schedule always spans --epochs (capped by --max-steps); --stop-after only ends this
  // invocation early.
  const int64_t last_epoch = r.o.stop_after > 0 ? std::min(r.o.epochs, r.first_epoch + r.o.stop_after - 1) : r.o.epochs;
  const bool nothing_left = steps_exhausted(r);
  EarlyStop early(r.o.early_stop);  // early_stop.h
  int64_t stopped_after = 0;        // --early-stop ended training after this epoch; 0: it did not
  for (int64_t epoch = r.first_epoch; epoch <= last_epoch && !steps_exhausted(r) && !stopped_after; ++epoch) {
    const EpochResult e = train_epoch(r, epoch);
    // --zero 3: the model whole on every rank for what reads it between epochs (fsdp.h), when
    // anything does (every rank has the same options, so all gather or none); a sharded checkpoint
    // does not: each rank saves its shards.
    const bool single_file = !r.o.checkpoint_dir.empty() && !sharded_checkpoints(r);
    const bool read_whole = r.o.eval || single_file || r.o.early_stop > 0;
    const dist::FullyShardedDataParallel::FullParams whole(read_whole ? r.fsdp.get() : nullptr);
    last_loss = e.loss;
    last_score = report_epoch(r, epoch, e);
    write_checkpoint(r, epoch, e.loss);
    if (r.o.early_stop > 0 && rank0_says(r, last_score && early.update(epoch, *last_score, *r.model)))
      stopped_after = epoch;
  }
  if (r.tracer) finish_trace(*r.tracer, r.pg.get(), r.o.trace, r.talk);  // every rank: a collective
  if (r.first_epoch > r.o.epochs && r.talk)
    std::printf("nothing to train: the checkpoint already has %lld of %lld epochs\n",
                static_cast<long long>(r.first_epoch - 1), static_cast<long long>(r.o.epochs));
  else if (nothing_left && r.talk)
    std::printf("nothing to train: the checkpoint already has %lld of --max-steps %lld steps\n",
                static_cast<long long>(r.step), static_cast<long long>(r.o.max_steps));
  if (last_epoch < r.o.epochs && !steps_exhausted(r) && !stopped_after) {
    if (r.talk)
      std::printf("stopped after epoch %lld of %lld (--stop-after); resume with --resume auto\n",
                  static_cast<long long>(last_epoch), static_cast<long long>(r.o.epochs));
    return 0;
  }
  // --zero 3: the model whole for the end (fsdp.h). Nothing steps or checkpoints any more, so the
  // optimizer's shards of state go first: the end then holds less than a training step did.
  if (r.fsdp) r.scheduler.reset(), r.opt.reset();
  const dist::FullyShardedDataParallel::FullParams whole(r.fsdp.get());
  if (r.lead && early.best_epoch() > 0) {  // the saved model is the best epoch's, and a line says so
    std::printf("%s\n", early.restore_best(*r.model, eval_split(r), stopped_after).c_str());
    last_score = early.best();
  }
  report_end(r, last_score);
  if (r.lead) save_model(r, last_loss, stopped_after ? stopped_after : r.o.epochs, seconds_since(start));
  return 0;
}

}  // namespace

int train(const Options& opts, dist::Heartbeat* heartbeat) {
  validate(opts);
  const auto start = Clock::now();
  // The launcher hears why this rank fails while its connections are still open (`r` unwinds after
  // the catch), before any peer fails on them (Note [The first failure is the one reported]).
  const auto reported = [&](const std::exception& e) {
    if (heartbeat) heartbeat->report_failure(e);
  };
  Run r = [&] {
    try {
      return set_up(opts);
    } catch (const std::exception& e) {
      reported(e);
      throw;
    }
  }();
  try {
    return train_set_up(r, heartbeat != nullptr, start);
  } catch (const std::exception& e) {
    reported(e);
    throw;
  }
}

}  // namespace mt::app
