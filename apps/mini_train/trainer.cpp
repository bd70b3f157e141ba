// mini_train's training loop. Order of a run: build the job, resume if asked, print the config,
// then per epoch: shuffle (seeded by seed + epoch), steps, the epoch line, a checkpoint; finally
// evaluation and the final save. See trainer.h.
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
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "apps/mini_train/backend.h"
#include "apps/mini_train/gpus.h"
#include "apps/mini_train/job.h"
#include "apps/mini_train/progress.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "data/dataloader.h"
#include "data/sampler.h"
#include "distributed/ddp.h"
#include "distributed/heartbeat.h"
#include "distributed/init.h"
#include "distributed/process_group_mpi.h"
#include "nn/checkpoint.h"
#include "tensor/generator.h"
#include "tensor/raw_ops.h"

namespace mt::app {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int64_t count_parameters(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

void print_config(const Options& o, const Data& d, const std::string& signature, int64_t params, int64_t steps,
                  const std::string& resumed_from, int world, const std::string& backend) {
  const auto row = [](const char* key, const std::string& value) { std::printf("  %-12s %s\n", key, value.c_str()); };
  std::printf("mini_train\n");
  row("model", signature + " (" + std::to_string(params) + " parameters)");
  row("data", d.description);
  row("task", d.classification ? "classification, cross-entropy" : "regression, mean squared error");
  const std::string where = o.gpus.empty() ? std::string("cpu") : "cuda " + o.gpus;
  const std::string nodes = o.nnodes > 1 ? " on " + std::to_string(o.nnodes) + " nodes" : "";
  const std::string hook = o.comm_hook == "allreduce" ? "" : ", " + o.comm_hook + " compression";
  const std::string chosen = o.backend == "auto" && o.gpus.empty() ? ", chosen by --backend auto" : "";
  row("device", world > 1 ? where + ", " + std::to_string(world) + " processes" + nodes + " (" + backend + chosen + hook + ")"
                          : where + ", 1 process");
  row("batch", std::to_string(o.batch_size) + " per device, " + std::to_string(o.batch_size * world) + " global, " +
                   std::to_string(steps) + " steps per epoch");
  row("optimizer", optimizer_description(o));
  row("epochs", std::to_string(o.epochs) + (resumed_from.empty() ? "" : ", resuming from " + resumed_from));
  row("seed", std::to_string(o.seed));
  if (!o.checkpoint_dir.empty()) row("checkpoints", o.checkpoint_dir + " (keep " + std::to_string(o.keep) + ")");
  std::fflush(stdout);
}

// Accuracy (classification) or mean squared error (regression) of the model on a dataset.
double evaluate(nn::Module& model, const data::TensorDataset& set, bool classification, const Device& device) {
  NoGradGuard no_grad;
  model.eval();
  double total = 0;
  const int64_t n = set.size();
  for (int64_t start = 0; start < n; start += 4096) {
    const int64_t len = std::min<int64_t>(4096, n - start);
    const Tensor x = raw::narrow(set.inputs(), 0, start, len), y = raw::narrow(set.targets(), 0, start, len);
    const Tensor out = model.forward(x.to(device)).to(kCPU);  // to() of a tensor already there is itself
    if (classification) {
      total += raw::sum(raw::binary(BinaryOp::Eq, raw::argmax(out, 1), y)).item();
    } else {
      const Tensor diff = raw::binary(BinaryOp::Sub, out, y);
      total += raw::sum(raw::binary(BinaryOp::Mul, diff, diff)).item() / static_cast<double>(out.size(1));
    }
  }
  model.train();
  return total / static_cast<double>(n);
}

// The state to resume from: --resume PATH, or the newest checkpoint for --resume auto.
std::string resume_path(const Options& o) {
  if (o.resume != "auto") return o.resume;
  return latest_checkpoint(o.checkpoint_dir);
}

// DistributedDataParallel's statistics; overlap as DDPStats defines it (Note [Overlap] in ddp.h).
void print_ddp_stats(const dist::DDPStats& s) {
  int64_t bytes = 0;
  for (int64_t b : s.bucket_bytes) bytes += b;
  std::printf("DDP: %zu buckets, %lld bytes of gradients, %lld all-reduces over %lld backwards, comm hook %s\n",
              s.bucket_bytes.size(), static_cast<long long>(bytes), static_cast<long long>(s.allreduces),
              static_cast<long long>(s.backwards), s.comm_hook.c_str());
  std::printf("DDP: backward %.3f s, communication %.3f s of which %.3f s overlapped backward (%.1f%%), "
              "finalize wait %.3f s\n", s.backward_seconds, s.comm_seconds, s.overlapped_seconds,
              100.0 * s.overlap_fraction(), s.finalize_wait_seconds);
}

// Test hook (tests/apps/mini_train_test.sh, case nproc_failure): with MT_TEST_FAIL_RANK=r and
// MT_TEST_FAIL_EPOCH=e in the environment, rank r exits with code 3 at the start of epoch e, as a
// crashed worker would. Not an option: nothing but the tests should set these.
void test_fail_hook(int rank, int64_t epoch) {
  const char* r = std::getenv("MT_TEST_FAIL_RANK");
  const char* e = std::getenv("MT_TEST_FAIL_EPOCH");
  if (r && e && std::atoi(r) == rank && std::atoll(e) == epoch) {
    std::fprintf(stderr, "mini_train: rank %d: MT_TEST_FAIL_RANK: failing at epoch %lld\n", rank,
                 static_cast<long long>(epoch));
    dist::ProcessGroupMPI::abort_job(3);  // as main() does for a real failure
    std::exit(3);
  }
}

}  // namespace

int train(const Options& o) {
  validate(o);
  // Note [Heartbeat]: under --nproc's launcher, a thread tells it this process is alive, and where.
  const std::unique_ptr<dist::Heartbeat> heartbeat = dist::Heartbeat::from_env();
  dist::set_phase(dist::Phase::Rendezvous);
  // One rank of a distributed job when the environment says so (launcher, torchrun, srun).
  const std::optional<dist::RendezvousInfo> rdv = dist::rendezvous_from_env();
  // --gpus: this process's GPU (the LOCAL_RANK-th listed one) becomes current before anything
  // touches CUDA, so that CUDA's and NCCL's state lives on it alone.
  const Device device = training_device(o, rdv ? rdv->local_rank : 0);
  bind_device(device);
  std::shared_ptr<dist::ProcessGroup> pg;
  if (rdv && rdv->world_size > 1)
    pg = dist::init_process_group({.backend = device.is_cuda() ? "nccl" : worker_backend(o), .rendezvous = *rdv,
                                   .timeout = std::chrono::seconds(o.timeout),
                                   .cuda_device = device.is_cuda() ? device.index : -1});
  const int world = pg ? rdv->world_size : 1, rank = pg ? rdv->rank : 0;
  const bool lead = rank == 0;       // prints, logs, checkpoints, saves
  const bool talk = lead && !o.quiet;
  const Data d = load_data(o);
  const std::string signature = model_signature(o, d);
  std::shared_ptr<nn::Module> model = build_model(o, d);
  if (!o.init.empty()) {
    const SafetensorsFile weights = load_safetensors(o.init);
    model->load_state_dict(weights.tensors);
  }
  if (device.is_cuda()) model->to(device);  // before the optimizer is built (Module::to)
  std::shared_ptr<nn::Loss> loss_fn = build_loss(d);
  std::unique_ptr<optim::Optimizer> opt = build_optimizer(o, *model);
  // The sampler is what splits the epoch between ranks; one rank: the loader shuffles itself.
  data::DataLoader loader =
      pg ? data::DataLoader(d.train,
                            std::make_shared<data::DistributedSampler>(d.train->size(), world, rank,
                                                                       data::DistributedSamplerOptions{
                                                                           .shuffle = o.shuffle, .seed = o.seed}),
                            {.batch_size = o.batch_size, .num_workers = o.num_workers, .seed = o.seed})
         : data::DataLoader(d.train, {.batch_size = o.batch_size, .shuffle = o.shuffle,
                                      .num_workers = o.num_workers, .seed = o.seed});
  const int64_t steps_per_epoch = loader.size();
  std::unique_ptr<optim::LRScheduler> scheduler = build_scheduler(o, *opt, o.epochs * steps_per_epoch);

  // Resume: everything that decides the rest of the run comes back, so that the final weights are
  // bit-for-bit those of an uninterrupted run (the data order needs nothing: it is seeded by
  // seed + epoch).
  int64_t first_epoch = 1, step = 0;
  const std::string from = o.resume.empty() ? std::string() : resume_path(o);
  if (!from.empty()) {
    const Checkpoint c = load_checkpoint(from);
    const auto sig = c.info.find("model");
    MT_CHECK(sig != c.info.end() && sig->second == signature, "--resume ", from, ": the checkpoint is of model '",
             sig == c.info.end() ? "?" : sig->second, "' but this run builds '", signature,
             "'; use the same --model/--hidden/data, or another --checkpoint-dir");
    MT_CHECK(c.scheduler.empty() == (scheduler == nullptr), "--resume ", from, ": the checkpoint was written ",
             c.scheduler.empty() ? "without" : "with", " a learning-rate schedule; use the same --schedule");
    model->load_state_dict(c.model);
    opt->load_state_dict(c.optimizer);
    if (scheduler) scheduler->load_state_dict(c.scheduler);
    default_generator().set_state(c.rng_seed, c.rng_offset);
    first_epoch = c.epoch + 1;
    step = c.step;
  }

  // After --init/--resume (every rank loaded the same state; DDP checks and broadcasts rank 0's).
  std::shared_ptr<dist::DistributedDataParallel> ddp;
  if (pg) {
    ddp = std::make_shared<dist::DistributedDataParallel>(model, pg);
    ddp->register_comm_hook(dist::make_comm_hook(o.comm_hook));
  }
  nn::Module& net = ddp ? static_cast<nn::Module&>(*ddp) : *model;

  if (talk)
    print_config(o, d, signature, count_parameters(*model), steps_per_epoch, from, world, pg ? pg->backend() : "");
  std::ofstream json_log;
  if (lead && !o.log_json.empty()) {
    json_log.open(o.log_json, from.empty() ? std::ios::trunc : std::ios::app);
    MT_CHECK(json_log.good(), "--log-json ", o.log_json, ": cannot open for writing");
  }
  if (lead && !o.checkpoint_dir.empty()) std::filesystem::create_directories(o.checkpoint_dir);

  double last_loss = std::nan("");
  // The schedule always spans --epochs; --stop-after only ends this invocation early.
  const int64_t last_epoch = o.stop_after > 0 ? std::min(o.epochs, first_epoch + o.stop_after - 1) : o.epochs;
  for (int64_t epoch = first_epoch; epoch <= last_epoch; ++epoch) {
    const auto start = Clock::now();
    if (pg) test_fail_hook(rank, epoch);
    loader.set_epoch(epoch);
    dist::set_phase(dist::Phase::Data);
    ProgressBar bar(talk, epoch, o.epochs, steps_per_epoch);
    double loss_sum = 0;
    int64_t seen = 0, done = 0;
    for (const data::Batch& batch : loader) {
      // The batch goes to the GPU on the compute stream: later kernels are ordered after the copy.
      const Tensor input = device.is_cuda() ? batch.input.to(device) : batch.input;
      const Tensor target = device.is_cuda() ? batch.target.to(device) : batch.target;
      // forward, backward, update: the whole of training
      const Tensor loss = (*loss_fn)(net.forward(input), target);
      if (ddp) ddp->zero_grad();  // keeps the gradients views into DDP's buckets
      else opt->zero_grad();
      loss.backward();
      dist::set_phase(dist::Phase::Optimizer);
      opt->step();
      if (scheduler) scheduler->step();
      ++step, ++done;
      dist::set_step(step);
      dist::set_phase(dist::Phase::Data);  // the loader builds the next batch
      if (ddp && o.check_replicas > 0 && step % o.check_replicas == 0)  // replica_guard.h
        ddp->check_replicas("after step " + std::to_string(step) + " (--check-replicas)");
      const double l = loss.item();
      loss_sum += l * static_cast<double>(batch.size());
      seen += batch.size();
      bar.update(done, l);
    }
    bar.clear();
    if (ddp) ddp->check_replicas("at the end of epoch " + std::to_string(epoch));  // replica_guard.h
    const double secs = seconds_since(start);
    double total_seen = static_cast<double>(seen);
    if (pg) {
      // The epoch's loss over every rank's samples: one small all-reduce of (Σ loss·n, Σ n).
      // On the group's device: NCCL reduces GPU tensors only.
      Tensor sums = from_vector(std::vector<double>{loss_sum, total_seen}, {2}).to(pg->device());
      pg->allreduce(sums, dist::ReduceOp::Sum)->wait();
      const std::vector<double> summed = sums.to(kCPU).to_vector<double>();
      loss_sum = summed[0], total_seen = summed[1];
    }
    last_loss = loss_sum / std::max(total_seen, 1.0);
    const double rate = total_seen / std::max(secs, 1e-9);  // every rank's samples
    if (talk) {
      std::printf("Epoch [%lld/%lld], Loss: %.4f, %.0f samples/s\n", static_cast<long long>(epoch),
                  static_cast<long long>(o.epochs), last_loss, rate);
      std::fflush(stdout);
    }
    if (json_log.is_open()) {
      nlohmann::json line = {{"epoch", epoch},           {"loss", last_loss}, {"samples_per_s", rate},
                             {"seconds", secs},          {"steps", step},     {"lr", opt->lr(0)}};
      json_log << line.dump() << '\n' << std::flush;
    }
    if (lead && !o.checkpoint_dir.empty()) {
      dist::set_phase(dist::Phase::Checkpoint);
      Checkpoint c;
      c.model = model->state_dict();
      c.optimizer = opt->state_dict();
      if (scheduler) c.scheduler = scheduler->state_dict();
      c.epoch = epoch, c.step = step, c.loss = last_loss;
      c.rng_seed = default_generator().seed(), c.rng_offset = default_generator().offset();
      c.info = {{"model", signature}};
      save_checkpoint(checkpoint_path(o.checkpoint_dir, epoch), c);
      prune_checkpoints(o.checkpoint_dir, o.keep);
    }
  }
  if (first_epoch > o.epochs && talk)
    std::printf("nothing to train: the checkpoint already has %lld of %lld epochs\n",
                static_cast<long long>(first_epoch - 1), static_cast<long long>(o.epochs));

  if (last_epoch < o.epochs) {
    if (talk)
      std::printf("stopped after epoch %lld of %lld (--stop-after); resume with --resume auto\n",
                  static_cast<long long>(last_epoch), static_cast<long long>(o.epochs));
    return 0;
  }
  if (ddp && o.ddp_stats && lead) print_ddp_stats(ddp->stats());
  if (!lead) return 0;
  if (o.eval) {
    dist::set_phase(dist::Phase::Evaluation);
    const data::TensorDataset& set = d.test ? *d.test : *d.train;
    const char* split = d.test ? "Test" : "Train (no test split)";
    const double v = evaluate(*model, set, d.classification, device);
    if (d.classification) std::printf("%s accuracy: %.4f\n", split, v);
    else std::printf("%s loss: %.6f\n", split, v);
  }
  NamedTensors weights = model->state_dict();
  for (auto& [name, t] : weights) t = t.detach().to(kCPU);  // files are written from host memory
  save_safetensors(o.save, weights, {{"model", signature}});
  if (!o.quiet) std::printf("saved %s\n", o.save.c_str());
  return 0;
}

}  // namespace mt::app
