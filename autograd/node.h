// Node: one step of the backward graph. A differentiable op, when any input requires grad, creates
// a Node holding only what its backward needs (saved tensors, shapes), and points its result's
// grad_fn at it. `next_edges[i]` leads to the node that produced input i (or to the input leaf's
// AccumulateGrad). Backward of a node = the chain rule for that op: gradients of its outputs in,
// gradients of its inputs out.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

using TensorList = std::vector<Tensor>;

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

  std::vector<Edge> next_edges;
  // Creation order; the engine runs ready nodes newest first, i.e. in reverse forward order.
  const uint64_t sequence_nr;

 protected:
  friend class Engine;
  NodeTask* engine_task_ = nullptr;  // set only while a backward through this node runs
  // Throws the "backward through the graph a second time" error if saved tensors were freed.
  void check_not_released() const;
  bool released_ = false;
};

// A saved tensor plus the version its storage had when saved. unpack() throws if an in-place op
// changed it since ("modified by an inplace operation"), instead of computing a wrong gradient.
class SavedTensor {
 public:
  SavedTensor() = default;
  // Saves the data only (no history), so a node that saves its own output makes no reference cycle.
  explicit SavedTensor(const Tensor& t);
  Tensor unpack(const Node& owner) const;
  void reset() { data_ = Tensor(); }
  bool defined() const { return data_.defined(); }

 private:
  Tensor data_;
  uint64_t version_ = 0;
};

}  // namespace mt
