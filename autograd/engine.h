// Engine: runs the backward graph from one or more roots. See autograd/engine.cpp for the ordering
// argument (Note [Dependency counting]).
#pragma once

#include <functional>
#include <span>

#include "autograd/node.h"

namespace mt {

struct BackwardOptions {
  bool retain_graph = false;  // keep saved tensors so the same graph can be run again
};

class Engine {
 public:
  // Backpropagates grad_outputs[i] from roots[i] (each a tensor with history or a leaf). Spans, so
  // Tensor::backward passes its one root without building a vector.
  static void backward(std::span<const Tensor> roots, std::span<const Tensor> grad_outputs, BackwardOptions opts = {});

  // Queues fn to run once, after the last node of the backward currently running on this thread.
  // DDP's finalize step (wait for all-reduces, check every parameter was reduced) uses this.
  // Throws when called outside a backward.
  static void queue_callback(std::function<void()> fn);
  // True while a backward runs on this thread (hooks and nodes can ask).
  static bool in_backward();

  // One backward call's bookkeeping, defined in engine.cpp; only it reaches a node's task slot.
  struct GraphTask;

 private:
  // Where the running backward keeps a node's state (Node::engine_task_).
  static NodeTask*& task_slot(Node& n) { return n.engine_task_; }
};

}  // namespace mt
