// The CUDA emulator's stand-in for NCCL (tests/cuda_emu/emu_nccl.cpp): the calls ProcessGroupNCCL
// makes, for ranks that are separate processes (mini_train --gpus 0,1) or threads of one, each with
// its own communicator and emulated GPU; they meet in a shared-memory file named by the
// ncclUniqueId (Note [Emulated NCCL across processes]). A collective is queued on its stream like a
// kernel and, when it runs, waits there until every rank's has arrived (the way an NCCL kernel
// spins for its peers), so a rank that never issues it hangs the others' streams until
// ncclCommAbort, which is what ProcessGroupNCCL's watchdog is for.
// Communicators are non-blocking when config.blocking == 0: ncclCommInitRankConfig returns
// ncclInProgress until all ranks joined (ncclCommGetAsyncError says when).
// Test hooks, per rank (every communicator of that rank; ncclSuccess clears): nccl_fail_async makes
// ncclCommGetAsyncError report `error` as the communicator's state (a peer failure NCCL saw), and
// nccl_fail_query makes the ncclCommGetAsyncError call itself fail with `error`.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};
enum ncclDataType_t { ncclInt64 = 4, ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 };
enum ncclRedOp_t { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };

#define NCCL_UNIQUE_ID_BYTES 128
struct ncclUniqueId {
  char internal[NCCL_UNIQUE_ID_BYTES];
};
struct ncclConfig_t {
  int blocking;
};
#define NCCL_CONFIG_INITIALIZER {1}

struct ncclComm;
using ncclComm_t = ncclComm*;

const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recv_count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream);

namespace mt_emu {
void nccl_fail_async(int rank, ncclResult_t error);
void nccl_fail_query(int rank, ncclResult_t error);
}  // namespace mt_emu
