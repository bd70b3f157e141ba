// ZeRO stage 3, fully sharded data parallel (PyTorch's FullyShardedDataParallel): each rank keeps
// only 1/N of the parameters, of their gradients and of the optimizer state. The model is cut into
// UNITS (by default one per transformer block, or per top-level child module, plus a root unit for
// what is left); each unit's parameters live flattened, and a rank holds only its shard of the flat
// vector (Note [FSDP shard layout]). A unit is whole only while it is used:
//
//   forward   just before a unit's forward its shards are ALL-GATHERED into its parameters, and
//             right after it they are freed (Note [Gather, then free]); the next unit's all-gather
//             is already on its way while this one computes (Note [FSDP prefetch])
//   backward  when the gradient reaches a unit's output, the unit is gathered again (Note
//             [Pre-backward gather]); once all its parameters have their gradients, they are
//             REDUCE-SCATTERED as one flat vector, so a rank keeps the average of its shard only,
//             and the parameters are freed again (Note [Reduce-scatter of a unit])
//   step      FsdpOptimizer updates this rank's shard only; nothing is all-gathered after the step
//             (the next forward gathers what it needs)
//
//   auto fsdp = std::make_shared<dist::FullyShardedDataParallel>(model, pg);
//   dist::FsdpOptimizer opt(fsdp, std::make_unique<optim::AdamW>(model->parameters(), opts));
//   loss(fsdp->forward(x), y).backward();
//   opt.step();
//   { auto whole = fsdp->summon_full_params(); model->state_dict(); }  // a collective
//
// It lives in distributed/zero/ beside stages 1 and 2: it is the same idea one stage further (the
// shard arithmetic, the pieces the optimizer steps, the consolidated state dicts), but it does not
// sit on DDP's buckets: the parameters themselves are sharded, so the units replace the buckets.
// Buffers (BatchNorm's running statistics) follow DDP's rule: rank 0's are broadcast at
// construction and before each training forward. Uneven inputs: it is a dist::Joinable, so a rank
// out of batches answers the others' steps inside a dist::Join as under DDP (Note [FSDP Join]).
// Tested on Gloo and MPI, and on NCCL over the emulated GPUs (tests/cuda_emu/mini_train_emu.sh).
// Not here: mixed precision of the gathered parameters, CPU offload.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/ddp/ddp_join.h"
#include "distributed/process_group/process_group.h"
#include "distributed/zero/zero.h"
#include "nn/module.h"
#include "nn/sharded_state.h"
#include "optim/optimizer.h"

namespace mt::dist {

struct FSDPOptions {
  // Which modules become units, asked for every module below the root in named_modules() order
  // (a module inside a unit is not asked). Empty: every nn::TransformerBlock when the model has
  // any, else every top-level child module that holds parameters (a ModuleList or ModuleDict,
  // which is never called, gives its elements instead).
  std::function<bool(const std::string& name, const nn::Module& module)> wrap{};
  bool prefetch = true;  // Note [FSDP prefetch]
};

// What --ddp-stats shows of FSDP: the collectives and the time the computation waited for an
// all-gather (the part prefetch did not hide).
struct FSDPStats {
  int64_t units = 0, allgathers = 0, reduce_scatters = 0;
  double allgather_wait_ms = 0;  // forward and backward, summed over the steps
};

class FullyShardedDataParallel : public nn::Module, public Joinable {
 public:
  // Checks every rank holds the same parameter names and shapes, broadcasts rank 0's parameters
  // and buffers, cuts the model into units and keeps this rank's shard of each (the parameters'
  // own bytes are released). Every parameter must be contiguous, float32 or float64.
  FullyShardedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> process_group,
                           FSDPOptions options = {});
  ~FullyShardedDataParallel() override;

  // The wrapped module's forward with the units gathered and freed around their own forwards.
  Tensor forward(const Tensor& input) override;

  // RAII: while alive, every unit is gathered (a collective at both ends), so the module can be
  // read whole: its state_dict (clone what you keep), evaluation, generation (its forwards, on any
  // rank, then gather nothing: no collective, no rank waiting for another). Writes to the
  // parameters are put back into the shards when it ends. Made over a null pointer, it does nothing
  // (a caller that runs with or without FSDP: `FullParams whole(maybe_fsdp);`).
  class FullParams {
   public:
    explicit FullParams(FullyShardedDataParallel* fsdp);
    ~FullParams();
    FullParams(const FullParams&) = delete;
    FullParams& operator=(const FullParams&) = delete;

   private:
    FullyShardedDataParallel* fsdp_;
  };
  [[nodiscard]] FullParams summon_full_params();

  // A COLLECTIVE: the module's state dict, whole, as cloned tensors (what a checkpoint saves).
  NamedTensors full_state_dict();
  // Not a collective: this rank's pieces of every parameter, in unit order (ShardPiece,
  // nn/sharded_state.h: elements [offset, offset + data.numel()) of the flattened parameter).
  std::vector<ShardPiece> local_state_dict() const;

  // RAII: backward accumulates the whole gradients locally (in the parameters' .grad) and does not
  // reduce; the first backward after it reduce-scatters the sums (as DDP's no_sync; the gradients
  // are then held whole until that backward, as plain DDP's buckets are).
  class NoSync {
   public:
    explicit NoSync(FullyShardedDataParallel* fsdp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    FullyShardedDataParallel* fsdp_;
  };
  [[nodiscard]] NoSync no_sync();

  // Note [FSDP shard layout]: unit u's parameters, flattened one after another, make `numel`
  // elements; the flat vector is padded with zeros to N·shard elements, shard = ceil(numel / N),
  // and rank r holds elements [r·shard, (r+1)·shard). Each rank's shard has the same size, so a
  // gather and a reduce-scatter of the unit are one flat collective each (Note [Flat shards]); the
  // padding (under N elements per unit) is gathered and reduced along and never read. No tail is
  // replicated (ZeRO-1/2's Note [ZeRO shards] does that, because there the buckets are DDP's and
  // cannot grow).
  struct UnitLayout {
    std::string name;                 // the unit's module path; "" for the root unit
    std::vector<size_t> params;       // indices into parameters() order (named_parameters of the model)
    std::vector<int64_t> offsets;     // where each starts in the flat vector
    int64_t numel = 0, shard = 0;
  };
  const std::vector<UnitLayout>& units() const { return layouts_; }
  const NamedTensors& sharded_parameters() const { return params_; }  // the model's, in index order
  // This rank's shard of unit u's parameters (shard elements; the optimizer updates it in place),
  // and the averaged gradient of that shard after a synced backward (undefined before, and after
  // release_gradients()).
  const Tensor& shard(size_t u) const;
  const Tensor& shard_grad(size_t u) const;
  void release_gradients();  // FsdpOptimizer::step calls it: the shards' gradients are spent
  std::shared_ptr<ProcessGroup> process_group() const { return pg_; }
  std::shared_ptr<nn::Module> module() const { return module_; }
  const FSDPStats& stats() const { return stats_; }

  // Joinable (Note [FSDP Join], fsdp_join.cpp): a joined rank repeats the collectives of its own
  // last step under the Join, with zero gradients.
  ProcessGroup& join_process_group() override { return *pg_; }
  void check_joinable(const JoinOptions& opts) const override;
  void join_step_begins() override;
  void shadow_step() override;
  void join_ended() override;

  // The unit hooks and the pre-backward node call these (fsdp.cpp, fsdp_backward.cpp).
  void before_unit_forward(size_t u);
  Tensor after_unit_forward(size_t u, const Tensor& output);
  void pre_backward(size_t u);

 private:
  struct Unit;
  void build_units(const FSDPOptions& options);
  void flatten_unit(size_t u);
  void gather(size_t u);  // issue the all-gather (no-op when gathered or on its way)
  void wait(size_t u);    // the all-gather done: the parameters hold their values
  void free(size_t u);
  void prefetch_after(size_t u, bool backward);
  void on_gradient(size_t u);
  void launch_ready();
  void reduce_scatter(size_t u);
  void finish_scatter(size_t u);
  void finalize_backward();
  void queue_finalize();
  void register_gradient_hooks();
  Tensor with_pre_backward(size_t u, const Tensor& output);
  enum class Collective { Buffers, Gather, Scatter };
  void log_collective(Collective kind, size_t u);

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> pg_;
  NamedTensors params_;
  std::vector<UnitLayout> layouts_;
  std::vector<std::unique_ptr<Unit>> units_;  // the last one is the root unit
  std::vector<nn::HookHandle> hooks_;
  std::vector<size_t> order_;      // the non-root units in the order their forwards ran (first forward)
  std::vector<size_t> rs_order_;   // the order of the reduce-scatters: reverse order_, then the root
  size_t next_rs_ = 0;
  int64_t in_flight_ = -1;      // the unit whose reduce-scatter was issued last and not waited for
  bool prefetch_ = true, finalize_queued_ = false, no_sync_ = false, forwarded_ = false;
  bool summoned_ = false;  // a FullParams lives: the units stay whole, the hooks do nothing
  FSDPStats stats_;
  // Under a Join: what this rank issued since the step began, in order (Note [FSDP Join]).
  std::vector<std::pair<Collective, size_t>> step_log_;
  bool logging_ = false;
  // What the parameters' gradient hooks reach this object through: they cannot be removed, so the
  // destructor empties it (fsdp_backward.cpp).
  std::shared_ptr<FullyShardedDataParallel*> alive_ = std::make_shared<FullyShardedDataParallel*>(this);
  friend class FullParams;
};

// The optimizer of a FullyShardedDataParallel model: `full` as plain DDP would use it (over the
// model's parameters; its kind, groups, hyperparameters and any state carry over), rebuilt over
// this rank's pieces of the shards, as ZeroRedundancyOptimizer does over DDP's buckets.
class FsdpOptimizer : public optim::Optimizer {
 public:
  FsdpOptimizer(std::shared_ptr<FullyShardedDataParallel> fsdp, std::unique_ptr<optim::Optimizer> full,
                ZeroFactory make = {});

  // This rank's shards, from their reduced gradients; then the gradients are released.
  void step() override;
  // As ZeroRedundancyOptimizer::clip_grad_norm: squares summed over the shards, one all-reduce of
  // a scalar, the same coefficient on every rank. A COLLECTIVE.
  double clip_grad_norm(double max_norm) override;
  // This rank's shards of the reduced gradients (their padding holds zeros): what step() reads, and
  // what a GradScaler unscales and checks (Note [One found-inf for all ranks], ddp/found_inf.h).
  std::vector<Tensor> step_gradients() const override;
  size_t num_param_groups() const override { return groups_.size(); }
  const std::vector<Tensor>& params(size_t group) const override;
  double lr(size_t group) const override { return inner_->lr(group); }
  void set_lr(size_t group, double lr) override { inner_->set_lr(group, lr); }
  // A COLLECTIVE: the state `full` would have (Note [Consolidated ZeRO state]); loads any world size's.
  optim::StateDict state_dict() const override;
  void load_state_dict(const optim::StateDict& state) override;
  // Not a collective: this rank's part of state_dict(), for a sharded checkpoint writer. Each tensor
  // field of each piece as a ShardPiece (nn/sharded_state.h) named as in state_dict() ("state.<i>.<field>", the offset
  // into parameter i flattened); scalar fields and the param_groups.* entries whole (offset 0,
  // alike on every rank that holds a piece of the parameter).
  std::vector<ShardPiece> local_state_dict() const;

 private:
  struct Piece {  // elements [param_offset, +numel) of parameter `param` (full numbering), at
    size_t param = 0, unit = 0;  // [shard_offset, +numel) of unit's shard
    int64_t param_offset = 0, shard_offset = 0, numel = 0;
  };
  void build_pieces(const std::vector<size_t>& index_of);

  std::shared_ptr<FullyShardedDataParallel> fsdp_;
  std::shared_ptr<ProcessGroup> pg_;
  std::vector<std::vector<Tensor>> groups_;
  std::vector<Piece> pieces_;
  std::vector<int64_t> inner_piece_;       // inner parameter index -> piece, or -1 for a placeholder
  std::vector<size_t> inner_group_size_;
  std::vector<Tensor> inner_params_;       // the pieces' views, in inner order
  std::unique_ptr<optim::Optimizer> inner_;
};

}  // namespace mt::dist
