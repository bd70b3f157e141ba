// Node: one step of the backward graph. A differentiable op, when any input requires grad, creates
// a Node holding only what its backward needs (saved tensors, shapes), and points its result's
// grad_fn at it. `next_edges[i]` leads to the node that produced input i (or to the input leaf's
// AccumulateGrad). Backward of a node = the chain rule for that op: gradients of its outputs in,
// gradients of its inputs out. A node also remembers what each gradient coming in must look like
// (GradMeta), so the engine can reject a wrong one where it is made.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/inline_vector.h"
#include "tensor/tensor.h"

namespace mt {

class Node;
struct NodeTask;  // the engine's per-backward state of a node (autograd/engine.cpp)

// Where a gradient goes: input slot `input_nr` of node `fn`. An edge with no fn is a dead end
// (the input did not require grad) and the engine drops the gradient.
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

// The gradients into or out of a node, and its edges: short lists, kept inline (Note [Lists that
// stay short], tensor/inline_vector.h). Three covers every op's inputs but concat's.
using TensorList = InlineVector<Tensor, 3>;
using EdgeList = InlineVector<Edge, 3>;

// What the gradient arriving in one input slot of a node must be: the shape, dtype and device of
// the forward tensor it is the gradient of (Note [A gradient matches its tensor], engine.cpp).
struct GradMeta {
  Shape shape;
  DType dtype = kFloat32;
  Device device;
  bool known = false;  // false: nobody recorded the tensor (a node built by hand), nothing to check
  GradMeta() = default;
  explicit GradMeta(const Tensor& t) : shape(t.sizes()), dtype(t.dtype()), device(t.device()), known(true) {}
  bool matches(const Tensor& g) const { return g.sizes() == shape && g.dtype() == dtype && g.device() == device; }
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // grads[i] is the gradient of this node's output i (undefined when nothing flowed into it).
  // Returns one gradient per next_edge (undefined where the input needs none).
  virtual TensorList apply(TensorList&& grads) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors after a backward without retain_graph; a second backward then fails loudly.
  virtual void release_saved() { released_ = true; }
  bool released() const { return released_; }

  // Records t as the forward tensor whose gradient arrives in `slot` (set_history does this for
  // every op's result, AccumulateGrad for its leaf).
  void set_slot_meta(uint32_t slot, const Tensor& t) {
    if (slot == 0) slot0_meta_ = GradMeta(t);
    else set_more_slot_meta(slot, t);
  }
  // What the gradient arriving in `slot` must be; `known` is false where nothing was recorded.
  const GradMeta& slot_meta(uint32_t slot) const { return slot == 0 ? slot0_meta_ : more_slot_meta(slot); }

  EdgeList next_edges;
  // Creation order; the engine runs ready nodes newest first, i.e. in reverse forward order.
  const uint64_t sequence_nr;

 protected:
  friend class Engine;
  NodeTask* engine_task_ = nullptr;  // set only while a backward through this node runs
  // Throws the "backward through the graph a second time" error if saved tensors were freed.
  void check_not_released() const;
  bool released_ = false;

 private:
  // Slot 0 inline: every op in the library has one output, and a heap block per node would cost
  // more than the check it serves. Further slots (multi-output nodes) go to the vector.
  GradMeta slot0_meta_;
  std::vector<GradMeta> more_slot_meta_;  // slots 1, 2, ...
  void set_more_slot_meta(uint32_t slot, const Tensor& t);
  const GradMeta& more_slot_meta(uint32_t slot) const;
};

// A saved tensor plus the version its storage had when saved. unpack() throws if an in-place op
// changed it since ("modified by an inplace operation"), instead of computing a wrong gradient.
class SavedTensor {
 public:
  SavedTensor() = default;
  // Holds t itself when it has a history (an input), else its data only, so a node that saves its
  // own output makes no reference cycle (Note [What a saved tensor holds], node.cpp).
  explicit SavedTensor(const Tensor& t);
  // For a tensor the caller knows is an input of its op, or an intermediate of its own, never the
  // op's result: held as it is, history or not (no cycle can form through it), which spares the
  // view the rule above makes for a plain tensor such as a batch of data.
  static SavedTensor input(const Tensor& t);
  Tensor unpack(const Node& owner) const;
  void reset() { data_ = Tensor(); }
  bool defined() const { return data_.defined(); }

 private:
  // Holds t itself (as_is), or a fresh impl over its storage without its history.
  SavedTensor(const Tensor& t, bool as_is);
  static bool has_history(const Tensor& t);

  Tensor data_;
  const Storage* storage_ = nullptr;  // t's storage when saved (Note [What a saved tensor holds])
  uint64_t version_ = 0;
};

}  // namespace mt
