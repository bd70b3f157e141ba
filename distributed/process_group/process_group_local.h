// ProcessGroupLocal: a process group of one. Every collective is already done when it returns (the
// result of reducing, broadcasting or gathering over one rank is the rank's own data), but it checks
// its arguments exactly as the real backends do, and returns a Work like them. So a training loop
// written for N ranks runs unchanged, and its mistakes show up, in a plain single-process run.
#pragma once

#include "distributed/process_group/process_group.h"

namespace mt::dist {

class ProcessGroupLocal : public ProcessGroup {
 public:
  explicit ProcessGroupLocal(std::chrono::milliseconds timeout = kDefaultTimeout);
  std::string backend() const override { return "local"; }

  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root = 0) override;
  std::shared_ptr<Work> allgather(std::vector<Tensor>& outputs, const Tensor& input) override;
  std::shared_ptr<Work> barrier() override;
  std::shared_ptr<Work> reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum) override;
  std::shared_ptr<Work> allgather_into(Tensor& output, const Tensor& input) override;

 private:
  std::shared_ptr<Work> done(const std::string& description);
};

}  // namespace mt::dist
