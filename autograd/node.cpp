// Node bookkeeping (sequence numbers, the metadata of incoming gradients) and SavedTensor's version check.
#include "autograd/node.h"

#include <atomic>

#include "tensor/raw_ops.h"

namespace mt {

namespace {
std::atomic<uint64_t> next_sequence_nr{0};
}

Node::Node() : sequence_nr(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

void Node::set_more_slot_meta(uint32_t slot, const Tensor& t) {
  if (more_slot_meta_.size() < slot) more_slot_meta_.resize(slot);
  more_slot_meta_[slot - 1] = GradMeta(t);
}

const GradMeta& Node::more_slot_meta(uint32_t slot) const {
  static const GradMeta unknown;
  return slot <= more_slot_meta_.size() ? more_slot_meta_[slot - 1] : unknown;
}

void Node::check_not_released() const {
  MT_CHECK(!released_, name(), ": trying to backward through the graph a second time, but its saved "
           "tensors were already freed. Pass retain_graph = true to the first backward if you need to "
           "run it twice.");
}

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  // A fresh impl over the same storage: the data without the history (no cycle through grad_fn).
  data_ = raw::as_strided(t, t.sizes(), t.strides(), t.storage_offset());
  version_ = t.version();
}

Tensor SavedTensor::unpack(const Node& owner) const {
  if (data_.defined()) {
    MT_CHECK(data_.version() == version_, owner.name(), ": a tensor saved for the backward pass was "
             "modified by an in-place operation (version ", version_, " when saved, now ", data_.version(),
             "). Clone it before changing it in place.");
  }
  return data_;
}

}  // namespace mt
