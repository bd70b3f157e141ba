// The Reducer's one rebuild of its buckets in the order gradients arrived (see detail/reducer.h).
#include "distributed/ddp/detail/reducer.h"

#include <algorithm>

namespace mt::dist::detail {

// Note [Bucket rebuild]: reverse registration order is a guess at the order backward produces
// gradients (Note [Buckets]); a model whose forward uses its modules in another order than it
// registered them fills its buckets out of order, and a full bucket then waits for lower-index
// ones (Note [Bucket launch order]). So, as PyTorch does after its first iteration, the first
// synced backward records the order in which slots became ready (count_ready), and the next
// training forward (or Join's shadow step) lays the buckets out again in that order, with the
// same caps, once. The orders of the ranks may differ (hooks follow each rank's graph and timing),
// and ranks whose buckets differ would pair the wrong buffers, so rank 0's order is broadcast and
// every rank builds from it: one broadcast of one integer per parameter, in a collective every
// rank reaches at the same step. Rank 0 sends -1s when it has no order (it joined before its first
// backward), and then no rank rebuilds. Nor does any when the new buckets hold the same parameters
// as the old ones (order inside a bucket does not change when it launches), so a model that
// produces its gradients in reverse registration order keeps the buckets it was built with.
// A rebuild copies what .grad holds into the new buckets (lay_out), and the .grad tensors are new
// views; the parameters are the same tensors, so optimizers are unaffected. A comm hook built on
// the old layout (ZeroHook: ZeRO's shards are cut from bucket_layout() when it is constructed,
// zero.cpp) says so through CommHook::fixed_layout, and then the buckets stay as they were built.
// DDPStats' per-bucket figures and timed sums start again at a rebuild, so they describe the
// buckets they name (DDPStats::bucket_rebuilds counts it).
void Reducer::rebuild_buckets_once() {
  if (rebuild_done_ || !options_.rebuild_buckets || stats_.backwards == 0) return;
  rebuild_done_ = true;
  record_order_ = false;
  if (hook_->fixed_layout() || slots_.empty()) return;
  const size_t n = slots_.size();
  std::vector<int64_t> order(n, -1);
  if (pg_->rank() == 0 && arrival_order_.size() == n)
    std::copy(arrival_order_.begin(), arrival_order_.end(), order.begin());
  arrival_order_.clear();
  if (pg_->size() > 1) {
    Tensor wire = from_vector(order, {static_cast<int64_t>(n)}).to(pg_->device());
    pg_->broadcast(wire, 0)->wait();
    order = wire.to(kCPU).to_vector<int64_t>();
  }
  if (order[0] < 0) return;
  const std::vector<std::vector<size_t>> members = assign_buckets(std::vector<size_t>(order.begin(), order.end()));
  if (same_members(members)) return;
  lay_out(members);
  ++stats_.bucket_rebuilds;
}

// Whether `members` puts the same slots in each bucket as the present buckets, in any order.
bool Reducer::same_members(std::vector<std::vector<size_t>> members) const {
  if (members.size() != buckets_.size()) return false;
  for (size_t b = 0; b < members.size(); ++b) {
    std::vector<size_t> now = buckets_[b].slots;
    std::sort(now.begin(), now.end());
    std::sort(members[b].begin(), members[b].end());
    if (now != members[b]) return false;
  }
  return true;
}

}  // namespace mt::dist::detail
