// What one mini_train run holds from set-up to the final save (trainer.cpp builds it phase by phase),
// shared by the files that act on it: the trainer's phases, the checkpoint writers
// (checkpoint_writer.h) and the data-parallel set-up (data_parallel.h). Plain data and two
// questions about the step count; no behaviour of its own.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/mini_train/accumulate.h"
#include "apps/mini_train/checkpoint_step.h"
#include "apps/mini_train/job.h"
#include "apps/mini_train/json_log.h"
#include "apps/mini_train/options.h"
#include "data/dataloader.h"
#include "distributed/ddp/ddp.h"
#include "distributed/process_group/process_group.h"
#include "distributed/store/rendezvous.h"
#include "distributed/zero/fsdp.h"
#include "optim/grad_scaler.h"
#include "trace/tracer.h"

namespace mt::dist {
class StoreHeartbeat;
}

namespace mt::app {

// Everything a run holds: built by set_up, changed by resume, used by every later phase.
struct Run {
  Options o;                     // the options in effect (resume may override some)
  int64_t requested_batch = 0;   // --batch-size as given; o.batch_size is what is used
  std::optional<dist::RendezvousInfo> rdv;
  Device device = kCPU;
  std::shared_ptr<dist::ProcessGroup> pg;
  int world = 1, rank = 0;
  bool lead = true;              // rank 0: prints, logs, checkpoints, saves
  bool talk = true;              // lead and not --quiet
  Data d;
  std::string signature;
  std::shared_ptr<nn::Module> model;
  std::shared_ptr<nn::Loss> loss_fn;
  std::unique_ptr<optim::Optimizer> opt;
  std::optional<data::DataLoader> loader;
  Accumulation acc;              // --accumulate's micro-batches per step (accumulate.h)
  int64_t steps_per_epoch = 0;   // optimizer steps: acc.steps()
  std::unique_ptr<optim::LRScheduler> scheduler;
  std::unique_ptr<optim::GradScaler> scaler;  // --precision fp16's loss scaling (Note [Loss scaling]); null: off
  int64_t skipped_steps = 0;     // steps the scaler skipped for an inf or NaN gradient
  std::shared_ptr<dist::DistributedDataParallel> ddp;        // --zero 0, 1, 2
  std::shared_ptr<dist::FullyShardedDataParallel> fsdp;     // --zero 3, instead of ddp
  int64_t first_epoch = 1, step = 0;
  EpochProgress resumed_at;      // a mid-epoch checkpoint's place in epoch first_epoch (checkpoint_step.h)
  std::string resumed_from;      // the checkpoint's path, "" for a fresh run
  JsonLog log;                   // --log-json (json_log.h); closed: off
  double step_lr = 0;            // the learning rate of the last step (group 0's), for its step record
  int64_t log_seen = 0;          // this rank's examples since the last step record ...
  std::chrono::steady_clock::time_point log_since;  // ... and when that record was written
  std::unique_ptr<trace::Tracer> tracer;  // --trace (tracing.h); null: off
  // Without --nproc's launcher, the ranks watching each other (peer_heartbeat.h); last, so that it
  // stops before the process group it watches through goes.
  std::shared_ptr<dist::StoreHeartbeat> peers;
};

// The optimizer steps the whole run makes (what a schedule spans): --epochs, capped by --max-steps.
inline int64_t total_steps(const Options& o, int64_t steps_per_epoch) {
  const int64_t all = o.epochs * steps_per_epoch;
  return o.max_steps > 0 ? std::min(all, o.max_steps) : all;
}

// --max-steps reached: no further step in this run.
inline bool steps_exhausted(const Run& r) { return r.o.max_steps > 0 && r.step >= r.o.max_steps; }

}  // namespace mt::app
