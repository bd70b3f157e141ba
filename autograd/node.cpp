// Node bookkeeping (sequence numbers, the metadata of incoming gradients) and SavedTensor's version check.
#include "autograd/node.h"

#include <atomic>

#include "autograd/autograd_meta.h"
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

// Note [What a saved tensor holds]: a node saves inputs of its op and sometimes the op's own
// result, and saves before set_history gives that result its grad_fn (every op records in that
// order). Holding the result itself would then be a cycle (node -> result -> grad_fn = node) that
// keeps a graph alive after its last handle is dropped. So a tensor with no history yet (which may
// be that result) is saved as a fresh impl over the same storage, without the history. A tensor
// that already has one (a leaf that requires grad, or an earlier op's result) is an input: autograd
// has no in-place ops, so nothing gives it this node as grad_fn later, and holding it makes no
// cycle. Those are held as they are, which spares a heap view per saved input (PyTorch's
// SavedVariable draws the same line, between outputs and inputs). One thing can change under a held
// leaf: Module::to swaps a parameter's data in place (Note [Module::to keeps parameter identity]),
// so the saved tensor also remembers its storage, and unpack refuses another one: the graph was
// recorded with the old data. An op that knows which of its tensors are inputs says so
// (SavedTensor::input: linear's x and w, the MSE loss's difference), and a plain input, a batch
// of data with no history, is then held as it is too: PyTorch's SavedVariable is told the same
// (its is_output argument) rather than inferring it.
inline SavedTensor::SavedTensor(const Tensor& t, bool as_is) {
  if (!t.defined()) return;
  // An if, not ?:, which would copy t into a temporary and then move that (22 instructions more
  // per saved input, callgrind).
  if (as_is) {
    data_ = t;
  } else {
    data_ = raw::as_strided(t, t.sizes(), t.strides(), t.storage_offset());
  }
  storage_ = t.storage().get();
  version_ = t.version();
}

bool SavedTensor::has_history(const Tensor& t) {
  const AutogradMeta* m = t.defined() ? detail::autograd_meta_or_null(t) : nullptr;
  return m != nullptr && (m->grad_fn != nullptr || m->requires_grad);
}

SavedTensor::SavedTensor(const Tensor& t) : SavedTensor(t, has_history(t)) {}

SavedTensor SavedTensor::input(const Tensor& t) { return SavedTensor(t, /*as_is=*/true); }

Tensor SavedTensor::unpack(const Node& owner) const {
  if (data_.defined()) {
    MT_CHECK(data_.storage().get() == storage_, owner.name(), ": a tensor saved for the backward pass was given "
             "new data after this graph was recorded; run the forward again after Module::to");
    MT_CHECK(data_.version() == version_, owner.name(), ": a tensor saved for the backward pass was "
             "modified by an in-place operation (version ", version_, " when saved, now ", data_.version(),
             "). Clone it before changing it in place.");
  }
  return data_;
}

}  // namespace mt
