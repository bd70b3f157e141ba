// Engine::backward: runs the recorded graph from the roots back to the leaves.
//
// Note [Dependency counting]
// A node may run only once every gradient for it has arrived. Take `b = a + a; c = b * b`: the node
// of b receives two gradients from c's node (one per use), and a's accumulator two from b's node.
// Naive recursion ("call backward on each input as you go") would run b's node twice, once per
// incoming gradient, and push half-summed gradients to the leaves. Instead:
//   1. walk the graph from the roots once and count, for each node, how many edges lead into it;
//   2. keep an input buffer per node where arriving gradients are summed slot by slot;
//   3. a node becomes ready when its count drops to zero; ready nodes run newest-first (highest
//      sequence_nr), i.e. roughly in reverse order of the forward pass. That order is what makes
//      parameter gradients become ready last-layer-first, which DDP's bucketing relies on.
// After the last node, callbacks queued during this backward run (DDP's finalize).
//
// Note [A gradient matches its tensor]
// The gradient flowing into a node's slot must have exactly the shape, dtype and device of the
// forward tensor it is the gradient of: set_history records them for every op result (GradMeta),
// AccumulateGrad for its leaf. The engine checks each gradient as it leaves the node that made it,
// before it is summed into a slot. Without the check a wrong backward goes unnoticed where it
// happens: the slot sum broadcasts ((3) + (1, 3) is (1, 3)), a float64 gradient promotes the sum,
// and the error surfaces far away (in AccumulateGrad, in the optimizer) or never. With it, the
// error names the node whose backward is wrong. Nothing is reduced or cast here on the node's
// behalf: undoing the forward's broadcasting and promotion is each op's job (reduce_grad).
// The check costs a shape comparison per edge; the metadata lives inline in the node, so recording
// allocates nothing more (bench/ seed_step: 2.77 µs CPU time before and after the check).
#include "autograd/engine.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <vector>

#include "autograd/accumulate_grad.h"
#include "autograd/autograd_meta.h"
#include "autograd/grad_mode.h"
#include "autograd/detail/node_trace.h"
#include "tensor/raw_ops.h"

namespace mt {

using GraphTask = Engine::GraphTask;

// Per-backward state of one node (declared in node.h so a Node can point at it).
struct NodeTask {
  GraphTask* owner = nullptr;
  int dependencies = 0;
  TensorList inputs;  // summed gradients, one per output slot of the node
};

// One backward call: its nodes' state, its queued callbacks and the work lists of the walk. A node
// points at its NodeTask while the backward runs (Node::engine_task_), so lookups cost nothing;
// reset() clears those pointers, also when a node throws.
//
// Note [Reused graph tasks]: a backward of a small model is mostly bookkeeping, and allocating
// these containers afresh each call was a dozen heap allocations per step (bench/ seed_step). So a
// thread keeps finished GraphTasks (GraphTaskLease) and the next backward reuses their capacity:
// reset() empties every list and drops every tensor, keeping only the buffers. A backward started
// from inside another one (a hook, a callback) leases a second task, so nesting stays correct. What
// stays allocated per thread is the capacity of the largest graph run so far: a few dozen bytes
// per node.
struct Engine::GraphTask {
  std::deque<NodeTask> storage;  // deque: pointers stay valid as it grows; [0, used) are in use
  size_t used = 0;
  std::vector<Node*> nodes;
  std::vector<std::function<void()>> callbacks;
  std::vector<std::pair<Edge, Tensor>> root_edges;
  std::vector<Node*> stack;  // step 1's walk
  std::vector<Node*> ready;  // step 3's heap, newest first (Newest)

  // The task of n, created on first sight; `fresh` tells whether it was.
  NodeTask& task(Node* n, bool* fresh = nullptr) {
    NodeTask*& slot = Engine::task_slot(*n);
    if (fresh) *fresh = slot == nullptr;
    if (slot == nullptr) {
      if (used == storage.size()) storage.emplace_back();
      slot = &storage[used++];
      slot->owner = this;
      nodes.push_back(n);
    }
    MT_CHECK(slot->owner == this, "backward: ", n->name(), " is already part of a backward running on "
             "this thread (a hook started a backward through the same graph)");
    return *slot;
  }
  // Back to empty, keeping the containers' capacity (Note [Reused graph tasks]).
  void reset() {
    for (Node* n : nodes) Engine::task_slot(*n) = nullptr;
    for (size_t i = 0; i < used; ++i) storage[i] = NodeTask{};
    used = 0;
    nodes.clear();
    callbacks.clear();
    root_edges.clear();
    stack.clear();
    ready.clear();
  }
};

namespace {

thread_local GraphTask* current_task = nullptr;

// A GraphTask for one backward, taken from this thread's finished ones when there is one and handed
// back reset when the backward ends, also by exception (Note [Reused graph tasks]).
thread_local std::vector<std::unique_ptr<GraphTask>> spare_tasks;
struct GraphTaskLease {
  std::unique_ptr<GraphTask> task;
  GraphTaskLease() {
    if (spare_tasks.empty()) {
      task = std::make_unique<GraphTask>();
    } else {
      task = std::move(spare_tasks.back());
      spare_tasks.pop_back();
    }
  }
  ~GraphTaskLease() {
    task->reset();
    spare_tasks.push_back(std::move(task));
  }
};

// Restores the outer backward (if any) when this one ends, also by exception.
struct CurrentTaskGuard {
  GraphTask* prev;
  explicit CurrentTaskGuard(GraphTask* t) : prev(current_task) { current_task = t; }
  ~CurrentTaskGuard() { current_task = prev; }
};

void accumulate(TensorList& slots, uint32_t slot, Tensor grad) {
  if (slots.size() <= slot) slots.resize(slot + 1);
  Tensor& s = slots[slot];
  s = s.defined() ? raw::binary(BinaryOp::Add, s, grad) : std::move(grad);
}

// Checks Note [A gradient matches its tensor]: `producer` returned `grad` as the gradient of its
// input i, which flows along edge e.
void check_gradient(const Node& producer, size_t i, const Tensor& grad, const Edge& e) {
  const GradMeta& want = e.fn->slot_meta(e.input_nr);
  if (!want.known || want.matches(grad)) [[likely]]
    return;
  MT_FAIL("backward: ", producer.name(), " returned a gradient of shape ", grad.sizes(), ", ", grad.dtype(),
          " on ", grad.device(), " for its input ", i, ", a tensor of shape ", want.shape, ", ", want.dtype,
          " on ", want.device, ". A gradient must match its tensor exactly; this is a bug in ",
          producer.name(), "'s backward.");
}

struct Newest {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

void push_ready(GraphTask& graph, Node* n) {
  graph.ready.push_back(n);
  std::push_heap(graph.ready.begin(), graph.ready.end(), Newest{});
}

// 0. The gradient edges of the roots, each with its gradient (implied 1 for a one-element root).
void collect_roots(GraphTask& graph, std::span<const Tensor> roots, std::span<const Tensor> grad_outputs) {
  MT_CHECK(roots.size() == grad_outputs.size(), "backward: ", roots.size(), " roots but ",
           grad_outputs.size(), " gradients");
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    AutogradMeta* m = detail::autograd_meta_or_null(r);
    MT_CHECK(m && (m->grad_fn || m->requires_grad), "backward: root ", i, " (shape ", r.sizes(),
             ") does not require grad and has no grad_fn");
    Tensor g = grad_outputs[i];
    if (!g.defined()) {
      MT_CHECK(r.numel() == 1, "backward: a gradient can be implied only for a one-element output; root ",
               i, " has shape ", r.sizes(), ", so pass its gradient");
      g = ones(r.sizes(), {.dtype = r.dtype(), .device = r.device()});
    }
    MT_CHECK(GradMeta(r).matches(g), "backward: gradient of shape ", g.sizes(), ", ", g.dtype(), " on ",
             g.device(), " for root ", i, " of shape ", r.sizes(), ", ", r.dtype(), " on ", r.device(),
             "; it must match the root exactly");
    graph.root_edges.emplace_back(detail::gradient_edge(r), g);
  }
}

// 1. Count the edges into each node reachable from the roots (Note [Dependency counting]).
void count_dependencies(GraphTask& graph) {
  auto& stack = graph.stack;
  for (auto& [edge, g] : graph.root_edges) {
    bool fresh = false;
    graph.task(edge.fn.get(), &fresh);
    if (fresh) stack.push_back(edge.fn.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      bool fresh = false;
      graph.task(e.fn.get(), &fresh).dependencies++;
      if (fresh) stack.push_back(e.fn.get());
    }
  }
}

// 2. Seed the roots' buffers; roots nobody else feeds are ready now.
void seed_roots(GraphTask& graph) {
  for (auto& [edge, g] : graph.root_edges) accumulate(graph.task(edge.fn.get()).inputs, edge.input_nr, g);
  for (auto& [edge, g] : graph.root_edges) {
    NodeTask& t = graph.task(edge.fn.get());
    if (t.dependencies == 0) {
      t.dependencies = -1;  // queued once even if it is the root of several outputs
      push_ready(graph, edge.fn.get());
    }
  }
}

// 3, for one node: run it on its summed gradients and pass each result along its edge; a node
// whose last gradient this was becomes ready.
void run_node(GraphTask& graph, Node* n, bool retain_graph) {
  const trace::Span traced = trace_node(*n);  // node begin; it ends when this returns (node_trace.h)
  TensorList inputs = std::move(graph.task(n).inputs);
  if (inputs.empty()) inputs.resize(1);
  bool any = false;
  for (const Tensor& g : inputs) any = any || g.defined();
  // Nothing flowed into this node (e.g. only an unused output): pass nothing on.
  TensorList outputs = any ? n->apply(std::move(inputs)) : TensorList(n->next_edges.size());
  if (!retain_graph) n->release_saved();
  MT_CHECK(outputs.size() == n->next_edges.size() || outputs.empty(), n->name(), " returned ",
           outputs.size(), " gradients for ", n->next_edges.size(), " inputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Edge& e = n->next_edges[i];
    if (!e.valid()) continue;
    NodeTask& t = graph.task(e.fn.get());
    if (outputs[i].defined()) {
      check_gradient(*n, i, outputs[i], e);
      accumulate(t.inputs, e.input_nr, std::move(outputs[i]));
    }
    if (--t.dependencies == 0) push_ready(graph, e.fn.get());
  }
}

}  // namespace

void Engine::backward(std::span<const Tensor> roots, std::span<const Tensor> grad_outputs, BackwardOptions opts) {
  GraphTaskLease lease;
  GraphTask& graph = *lease.task;
  CurrentTaskGuard guard(&graph);
  // Backward formulas use raw ops and record nothing; hooks that call differentiable ops must not
  // extend the graph being run either.
  NoGradGuard no_grad;

  collect_roots(graph, roots, grad_outputs);
  count_dependencies(graph);  // 1.
  seed_roots(graph);          // 2.
  // 3. Run nodes as their gradients complete, newest first.
  auto& ready = graph.ready;
  while (!ready.empty()) {
    std::pop_heap(ready.begin(), ready.end(), Newest{});
    Node* n = ready.back();
    ready.pop_back();
    run_node(graph, n, opts.retain_graph);
  }
  // 4. Callbacks queued during this backward, including ones queued by earlier callbacks.
  for (size_t i = 0; i < graph.callbacks.size(); ++i) {
    auto fn = std::move(graph.callbacks[i]);
    fn();
  }
}

void Engine::queue_callback(std::function<void()> fn) {
  MT_CHECK(current_task != nullptr, "queue_callback: no backward is running on this thread");
  current_task->callbacks.push_back(std::move(fn));
}

bool Engine::in_backward() { return current_task != nullptr; }

}  // namespace mt
