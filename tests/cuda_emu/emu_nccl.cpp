// The CUDA emulator's NCCL (include/nccl.h): communicators of one process's threads, grouped into
// cliques by their ncclUniqueId. A collective is a task on its stream that, when the stream reaches
// it, deposits this rank's buffers under the collective's sequence number and waits until all ranks
// have; the last one to arrive computes the result into every rank's output. ncclCommAbort ends the
// waiting tasks of the whole clique (their outputs stay untouched) and peers then report
// ncclRemoteError, like a rank whose peer exited.
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <cuda_fp16.h>

#include "emu_internal.h"

namespace {

struct Collective {
  int arrived = 0, left = 0;
  bool done = false;
  std::vector<const void*> send;
  std::vector<void*> recv;
};

struct Clique {
  explicit Clique(int n) : nranks(n), members(n, nullptr) {}
  std::mutex mutex;
  std::condition_variable changed;
  int nranks, joined = 0;
  bool aborted = false;
  std::vector<ncclComm*> members;
  std::map<uint64_t, Collective> collectives;
};

std::mutex registry_mutex;
std::map<std::string, std::shared_ptr<Clique>>& registry() {
  static auto* r = new std::map<std::string, std::shared_ptr<Clique>>;
  return *r;
}
std::map<int, ncclResult_t>& injected() {  // nccl_fail_async, by rank
  static auto* m = new std::map<int, ncclResult_t>;
  return *m;
}
std::map<int, ncclResult_t>& injected_query() {  // nccl_fail_query, by rank
  static auto* m = new std::map<int, ncclResult_t>;
  return *m;
}

size_t element_size(ncclDataType_t t) { return t == ncclFloat16 ? 2 : t == ncclFloat32 ? 4 : 8; }

template <typename T>
void reduce_into(std::vector<double>& acc, const T* x, size_t n, ncclRedOp_t op, bool first) {
  for (size_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i]);
    acc[i] = first ? v : op == ncclMax ? std::max(acc[i], v) : op == ncclMin ? std::min(acc[i], v) : acc[i] + v;
  }
}

}  // namespace

struct ncclComm {
  std::shared_ptr<Clique> clique;
  int rank = 0, nranks = 0, device = 0;
  std::atomic<int> state{ncclInProgress};  // ncclInProgress until every rank joined
  std::atomic<bool> aborted{false};
  uint64_t next = 0;  // sequence number of this rank's next collective (issue order)
  std::string last_error;
};

namespace {

bool ready(ncclComm_t comm, const char* call) {
  if (comm == nullptr) return false;
  if (comm->aborted || comm->state.load() != ncclSuccess) {
    comm->last_error = std::string(call) + " on a communicator that is aborted or not yet initialised";
    return false;
  }
  return true;
}

// Queues this rank's part of collective `seq`; `finish` runs once, on the last rank to arrive, with
// every rank's buffers.
ncclResult_t collective(ncclComm_t comm, cudaStream_t stream, const void* send, void* recv,
                        std::function<void(Collective&)> finish) {
  const uint64_t seq = comm->next++;
  std::shared_ptr<Clique> clique = comm->clique;
  const int rank = comm->rank;
  mt_emu::enqueue(stream, [comm, clique, seq, rank, send, recv, finish] {
    std::unique_lock<std::mutex> lock(clique->mutex);
    if (clique->aborted) return;
    Collective& c = clique->collectives[seq];
    if (c.send.empty()) {
      c.send.assign(clique->nranks, nullptr);
      c.recv.assign(clique->nranks, nullptr);
    }
    c.send[rank] = send;
    c.recv[rank] = recv;
    if (++c.arrived == clique->nranks) {
      finish(c);
      c.done = true;
      clique->changed.notify_all();
    } else {
      clique->changed.wait(lock, [&] { return c.done || clique->aborted; });  // an NCCL kernel spinning for its peers
    }
    if (++c.left == clique->nranks) clique->collectives.erase(seq);
    (void)comm;
  });
  return ncclSuccess;
}

}  // namespace

namespace mt_emu {
void nccl_fail_async(int rank, ncclResult_t error) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (error == ncclSuccess) injected().erase(rank);
  else injected()[rank] = error;
}
void nccl_fail_query(int rank, ncclResult_t error) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (error == ncclSuccess) injected_query().erase(rank);
  else injected_query()[rank] = error;
}
}  // namespace mt_emu

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t comm) { return comm ? comm->last_error.c_str() : ""; }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<uint64_t> counter{0};
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "mt_emu-nccl-%llu-%u",
                static_cast<unsigned long long>(counter++), std::random_device{}());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  auto* comm = new ncclComm;  // never freed: queued collectives may outlive ncclCommDestroy
  comm->rank = rank;
  comm->nranks = nranks;
  comm->device = mt_emu::current_device_index();
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto& c = registry()[std::string(id.internal, sizeof id.internal)];
    if (!c) c = std::make_shared<Clique>(nranks);
    comm->clique = c;
  }
  *out = comm;  // written before any waiting, as NCCL does for non-blocking communicators
  Clique& c = *comm->clique;
  std::unique_lock<std::mutex> lock(c.mutex);
  if (c.nranks != nranks || c.members[rank] != nullptr) {
    comm->state = ncclInvalidUsage;
    comm->last_error = "rank " + std::to_string(rank) + " joined twice, or with another world size";
    return ncclInvalidUsage;
  }
  c.members[rank] = comm;
  if (++c.joined == nranks) {
    for (ncclComm* m : c.members) m->state = ncclSuccess;
    c.changed.notify_all();
  }
  if (config == nullptr || config->blocking) {
    c.changed.wait(lock, [&] { return c.joined == nranks; });
    return ncclSuccess;
  }
  return ncclInProgress;  // as NCCL: a non-blocking init always answers so; the state says when done
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr) return ncclInvalidArgument;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    const auto q = injected_query().find(comm->rank);
    if (q != injected_query().end()) return q->second;
    const auto it = injected().find(comm->rank);
    if (it != injected().end()) {
      *async_error = it->second;
      return ncclSuccess;
    }
  }
  std::lock_guard<std::mutex> lock(comm->clique->mutex);
  *async_error = comm->clique->aborted && !comm->aborted ? ncclRemoteError
                                                          : static_cast<ncclResult_t>(comm->state.load());
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->aborted = true;
  std::lock_guard<std::mutex> lock(comm->clique->mutex);
  comm->clique->aborted = true;
  comm->clique->changed.notify_all();
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  comm->aborted = true;  // no further use; the memory stays (see ncclCommInitRankConfig)
  return ncclSuccess;
}

namespace {

// op over ranks of elements [offset, offset + count) of every rank's send buffer, in rank order, in
// double (then rounded once to the type: the emulator's sums are exact for the small tests).
std::vector<double> reduce_ranks(const Collective& c, size_t offset, size_t count, ncclDataType_t type,
                                 ncclRedOp_t op) {
  const int n = static_cast<int>(c.send.size());
  std::vector<double> acc(count);
  for (int r = 0; r < n; ++r) {
    switch (type) {
      case ncclFloat32: reduce_into(acc, static_cast<const float*>(c.send[r]) + offset, count, op, r == 0); break;
      case ncclFloat64: reduce_into(acc, static_cast<const double*>(c.send[r]) + offset, count, op, r == 0); break;
      case ncclInt64: reduce_into(acc, static_cast<const int64_t*>(c.send[r]) + offset, count, op, r == 0); break;
      case ncclFloat16: {
        std::vector<float> f(count);
        for (size_t i = 0; i < count; ++i)
          f[i] = __half2float(__ushort_as_half(static_cast<const uint16_t*>(c.send[r])[offset + i]));
        reduce_into(acc, f.data(), count, op, r == 0);
        break;
      }
    }
  }
  if (op == ncclAvg)
    for (double& v : acc) v /= n;
  return acc;
}

void store(void* recv, const std::vector<double>& acc, ncclDataType_t type) {
  for (size_t i = 0; i < acc.size(); ++i) {
    switch (type) {
      case ncclFloat32: static_cast<float*>(recv)[i] = static_cast<float>(acc[i]); break;
      case ncclFloat64: static_cast<double*>(recv)[i] = acc[i]; break;
      case ncclInt64: static_cast<int64_t*>(recv)[i] = static_cast<int64_t>(acc[i]); break;
      case ncclFloat16:
        static_cast<uint16_t*>(recv)[i] = __half_as_ushort(__float2half_rn(static_cast<float>(acc[i])));
        break;
    }
  }
}

}  // namespace

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (!ready(comm, "ncclAllReduce")) return ncclInvalidUsage;
  return collective(comm, stream, send, recv, [count, type, op](Collective& c) {
    const std::vector<double> acc = reduce_ranks(c, 0, count, type, op);
    for (void* r : c.recv) store(r, acc, type);
  });
}

// Rank r's recv gets the reduction of shard r ([r·count, (r+1)·count) of every send buffer). Every
// shard is reduced before any is stored, so in place (recv = send + r·count) reads no result.
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recv_count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  if (!ready(comm, "ncclReduceScatter")) return ncclInvalidUsage;
  return collective(comm, stream, send, recv, [recv_count, type, op](Collective& c) {
    std::vector<std::vector<double>> shards;
    for (size_t r = 0; r < c.recv.size(); ++r) shards.push_back(reduce_ranks(c, r * recv_count, recv_count, type, op));
    for (size_t r = 0; r < c.recv.size(); ++r) store(c.recv[r], shards[r], type);
  });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  if (!ready(comm, "ncclBroadcast")) return ncclInvalidUsage;
  if (root < 0 || root >= comm->nranks) return ncclInvalidArgument;
  const size_t bytes = count * element_size(type);
  return collective(comm, stream, send, recv, [bytes, root](Collective& c) {
    std::vector<char> data(static_cast<const char*>(c.send[root]), static_cast<const char*>(c.send[root]) + bytes);
    for (void* r : c.recv) std::memcpy(r, data.data(), bytes);
  });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  if (!ready(comm, "ncclAllGather")) return ncclInvalidUsage;
  const size_t bytes = send_count * element_size(type);
  return collective(comm, stream, send, recv, [bytes](Collective& c) {
    std::vector<char> all;
    for (const void* s : c.send) all.insert(all.end(), static_cast<const char*>(s), static_cast<const char*>(s) + bytes);
    for (void* r : c.recv) std::memcpy(r, all.data(), all.size());
  });
}
