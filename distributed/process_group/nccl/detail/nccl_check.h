// Checks for NCCL calls: on failure, an mt::Error naming the failing call, NCCL's error text and its
// last-error detail, and the file and line (check.h's format), like MT_CUDA_CHECK for CUDA.
//
//   MT_NCCL_CHECK(ncclGetUniqueId(&id));
//   MT_NCCL_CHECK_NONBLOCKING(ncclAllReduce(...), comm, deadline);   // on a non-blocking communicator
//
// Note [Non-blocking communicator]: ProcessGroupNCCL creates its communicator with blocking = 0, so
// that no NCCL call can hold the host forever (a peer that never joins ncclCommInitRank would).
// On such a communicator any call may return ncclInProgress: the call was accepted and NCCL is still
// finishing it on its own threads; the communicator's state (ncclCommGetAsyncError) says when it is
// done. MT_NCCL_CHECK_NONBLOCKING polls that state until it is no longer ncclInProgress, or until
// `deadline`, when it throws a TimeoutError naming the call.
//
// Only compiled into NCCL builds (MT_HAVE_NCCL).
#pragma once

#include <nccl.h>

#include <chrono>

#include "distributed/errors.h"

namespace mt::dist::detail {

// Waits out ncclInProgress on `comm` (Note [Non-blocking communicator]); throws naming `call` on an
// error or at `deadline`.
void nccl_settle(ncclComm_t comm, ncclResult_t result, const char* call, const char* file, int line,
                 Clock::time_point deadline);

}  // namespace mt::dist::detail

#define MT_NCCL_CHECK(call)                                                                         \
  do {                                                                                              \
    const ncclResult_t mt_nccl_status_ = (call);                                                    \
    if (mt_nccl_status_ != ncclSuccess) [[unlikely]]                                                \
      ::mt::detail::fail(__FILE__, __LINE__, "NCCL error in ", #call, ": ",                         \
                         ncclGetErrorString(mt_nccl_status_), " (", ncclGetLastError(nullptr), ")"); \
  } while (0)

// The call's result is stored before `comm` is read: ncclCommInitRankConfig(&comm, ...) writes the
// communicator that the settling then polls, and as two arguments of one function call the order of
// the write and the read would be unspecified.
#define MT_NCCL_CHECK_NONBLOCKING(call, comm, deadline)                                                 \
  do {                                                                                                  \
    const ncclResult_t mt_nccl_started_ = (call);                                                       \
    ::mt::dist::detail::nccl_settle((comm), mt_nccl_started_, #call, __FILE__, __LINE__, (deadline));   \
  } while (0)
