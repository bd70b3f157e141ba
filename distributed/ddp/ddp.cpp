// DistributedDataParallel: the wrapper a user holds. Construct (fingerprint, broadcast, buckets and
// hooks), forward (buffers, the rebuild, the unused-parameter walk), and what it hands to its Reducer
// (detail/reducer.h: the algorithm, in reducer.cpp, reducer_finalize.cpp and bucket_rebuild.cpp).
#include "distributed/ddp/ddp.h"

#include "autograd/grad_mode.h"
#include "distributed/ddp/detail/buffer_sync.h"
#include "distributed/ddp/detail/ddp_fingerprint.h"
#include "distributed/ddp/detail/reducer.h"
#include "distributed/fault/heartbeat.h"
#include "distributed/fault/replica_guard.h"

namespace mt::dist {

// ---- construct ----------------------------------------------------------------------------------
DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> process_group, DDPOptions options)
    : module_(std::move(module)), process_group_(std::move(process_group)),
      broadcast_buffers_(options.broadcast_buffers) {
  MT_CHECK(module_ != nullptr && process_group_ != nullptr, "DDP: module and process group must be given");
  register_module("module", module_);
  ProcessGroup& pg = *process_group_;
  const NamedTensors params = module_->named_parameters();

  // 1. Same parameters everywhere (ddp_fingerprint.h): a mismatch is an error naming the first
  //    differing parameter and the ranks, here, not a failed or hung all-reduce far away.
  check_same_parameters(pg, params);

  // 2. Same values everywhere: rank 0's parameters (and buffers) are copied to every rank, so that
  //    identical gradients keep identical replicas. All broadcasts are issued, then waited for.
  {
    NoGradGuard no_grad;
    std::vector<Tensor> tensors;
    for (const auto& [name, p] : params) tensors.push_back(p);
    if (options.broadcast_buffers)
      for (const auto& [name, b] : module_->named_buffers()) tensors.push_back(b);
    std::vector<std::shared_ptr<Work>> works;
    for (Tensor& t : tensors) works.push_back(pg.broadcast(t, 0));
    for (auto& w : works) w->wait();
  }

  // 3. Buckets and hooks.
  reducer_ = std::make_shared<detail::Reducer>(process_group_, options);
  reducer_->build_buckets(params);
  const std::weak_ptr<detail::Reducer> weak = reducer_;
  for (size_t i = 0; i < reducer_->slot_count(); ++i)
    reducer_->slot(i).param.register_post_accumulate_grad_hook(
        [weak, i](const Tensor&) { detail::Reducer::on_gradient(weak, i); });
}

// The model outlives its DDP wrapper: its gradients go back to the engine (Note [Gradient destination]).
DistributedDataParallel::~DistributedDataParallel() { reducer_->forget_destinations(); }

Tensor DistributedDataParallel::forward(const Tensor& input) {
  set_phase(Phase::Forward);  // Note [Heartbeat]
  if (module_->is_training() && GradMode::is_enabled()) reducer_->rebuild_buckets_once();
  reducer_->prepare_backward();  // Note [Dividing while writing]
  sync_buffers();
  Tensor output = (*module_)(input);  // the model's hooks run (Note [Hooks run in operator()])
  reducer_->find_unused(output);  // Note [Unused parameters found after forward]
  return output;
}

// Note [Buffer broadcast] (buffer_sync.cpp): rank 0's buffers, before each training forward.
void DistributedDataParallel::sync_buffers() {
  if (broadcast_buffers_ && module_->is_training()) broadcast_buffers(*process_group_, module_->named_buffers());
}

void DistributedDataParallel::zero_grad() { reducer_->zero_grad(); }

void DistributedDataParallel::register_comm_hook(std::shared_ptr<CommHook> hook) {
  reducer_->set_comm_hook(std::move(hook));
}

DistributedDataParallel::NoSync::NoSync(std::shared_ptr<detail::Reducer> reducer)
    : reducer_(std::move(reducer)), previous_(reducer_->no_sync_) {
  reducer_->no_sync_ = true;
}

DistributedDataParallel::NoSync::~NoSync() { reducer_->no_sync_ = previous_; }

DistributedDataParallel::NoSync DistributedDataParallel::no_sync() { return NoSync(reducer_); }

void DistributedDataParallel::shadow_backward() {
  reducer_->rebuild_buckets_once();  // the active ranks' forward does (Note [Bucket rebuild])
  sync_buffers();  // the active ranks' forward broadcasts them first (Note [Buffer broadcast])
  reducer_->shadow_backward();
}

void DistributedDataParallel::check_replicas(const std::string& when) {
  dist::check_replicas(*process_group_, module_->named_parameters(), when);
}

std::vector<DistributedDataParallel::BucketLayout> DistributedDataParallel::bucket_layout() const {
  return reducer_->layout();
}

const DDPStats& DistributedDataParallel::stats() const { return reducer_->stats_; }

std::vector<BucketArrival> DistributedDataParallel::bucket_arrivals() { return reducer_->arrivals(); }

}  // namespace mt::dist
