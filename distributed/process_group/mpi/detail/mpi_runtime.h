// MPI's process-wide side, shared by ProcessGroupMPI's files: its lifetime (Runtime: Note [MPI is
// initialised once per process]), the checked call, and how tensors map onto MPI's types, counts
// and reductions. Private to the MPI backend: not installed, compiled only with MPI.
#pragma once

#include <mpi.h>

#include <atomic>
#include <mutex>
#include <string>

#include "distributed/process_group/process_group.h"

namespace mt::dist::detail {

std::string mpi_error_string(int code);

// Every MPI call is checked; the error names the call and MPI's explanation.
#define MT_MPI_CHECK(call)                                                                     \
  do {                                                                                         \
    const int mt_mpi_rc = (call);                                                              \
    if (mt_mpi_rc != MPI_SUCCESS)                                                              \
      MT_FAIL(#call, " failed: ", ::mt::dist::detail::mpi_error_string(mt_mpi_rc));             \
  } while (0)

const char* thread_level_name(int level);

// Note [MPI is initialised once per process]: MPI_Init may be called once in a process's life, and
// after MPI_Finalize MPI cannot be used again. So MPI's lifetime is not any group's: the first group
// initialises it (unless the program already has), and it is finalized when the process exits, by
// the destructor of the function-local static below, or earlier by ProcessGroupMPI::finalize(). That static is constructed before the first
// group finishes constructing, hence destroyed after every group that lives in a static. A program
// that initialised MPI itself also finalizes it itself. MPI_Finalize is skipped when a collective
// was abandoned with its request still in flight (Note [Timeouts without cancellation]): it would
// wait for that request forever, and the job has failed anyway (mpirun then reports that this
// process exited without finalizing).
//
// Threads: MPI is initialised with MPI_THREAD_SERIALIZED, and every MPI call made here holds `mutex`.
// MULTIPLE would let threads call MPI at once, which this code never needs, and makes OpenMPI take
// locks inside every call.
// float16 and bfloat16: MPI has neither type. They travel as MPI_UINT16_T and are combined by
// user-defined reductions (half_sum_op, half_max_op; bf16_sum_op, bf16_max_op), through float32
// with one rounding per pairwise sum (as Gloo does).
class Runtime {
 public:
  static Runtime& get();
  std::mutex mutex;
  int provided = MPI_THREAD_SINGLE;
  std::atomic<bool> unfinished{false};  // an abandoned request is in flight: do not finalize
  MPI_Op half_sum_op = MPI_OP_NULL, half_max_op = MPI_OP_NULL, bf16_sum_op = MPI_OP_NULL, bf16_max_op = MPI_OP_NULL;
  void finalize();  // once; what the destructor does

 private:
  Runtime();
  ~Runtime();
  bool owns_ = false;
};

MPI_Datatype mpi_type(DType dtype);
// MPI counts elements with an int.
int mpi_count(const Tensor& t, const std::string& what);
MPI_Op mpi_op(DType dtype, ReduceOp op);
// t /= n on raw memory (check_reduce admits Avg for floating dtypes only): MPI has no average.
void divide(const Tensor& t, int n);

}  // namespace mt::dist::detail
