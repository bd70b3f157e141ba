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

 private:
  // The collectives (Note [One opening for every collective]: ProcessGroup checked and numbered them).
  std::shared_ptr<Work> run_allreduce(Tensor& tensor, ReduceOp op, const std::string& what) override;
  std::shared_ptr<Work> run_broadcast(Tensor& tensor, int root, const std::string& what) override;
  std::shared_ptr<Work> run_allgather(std::vector<Tensor>& outputs, const Tensor& input, const std::string& what) override;
  std::shared_ptr<Work> run_barrier(const std::string& what) override;
  std::shared_ptr<Work> run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op,
                                           const std::string& what) override;
  std::shared_ptr<Work> run_allgather_into(Tensor& output, const Tensor& input, const std::string& what) override;

  std::shared_ptr<Work> done(const std::string& description);
};

}  // namespace mt::dist
