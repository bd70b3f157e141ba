// The CUDA emulator's NCCL (include/nccl.h): ranks that are separate processes, or threads of one,
// meet in a shared-memory file named by their ncclUniqueId (Note [Emulated NCCL across processes]).
// A collective is a task on its stream that, when the stream reaches it, copies this rank's send
// buffer into its slot of the file, waits there until every rank has (as an NCCL kernel spins for
// its peers), and computes its own output from all the slots, in rank order, so every rank computes
// the same bits. ncclCommAbort ends the waiting tasks of every rank (their outputs stay untouched),
// and peers then report ncclRemoteError, as they do for a peer process that exited without
// destroying its communicator (Note [A peer that exits]).
#include <nccl.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <cuda_fp16.h>

#include "emu_internal.h"

// Note [Emulated NCCL across processes]: mini_train --gpus 0,1 runs one process per GPU, and each
// process of the emulator has its own emulated GPUs (host memory), so the ranks' buffers cannot be
// read across processes. The ranks of a communicator therefore share one file, mapped by every
// rank (MAP_SHARED): a header of per-rank counters, then one slot of MT_CUDA_EMU_NCCL_SLOT_MB (64
// by default; sparse, so untouched bytes cost nothing) per rank. The file is
// <temp dir>/mt-emu-nccl-<id>; the last rank to join unlinks it (the mappings stay), so nothing is
// left behind once setup succeeded. Collective number s (in issue order, the same on every rank,
// as NCCL requires) of rank r:
//   1. waits until every rank has taken collective s-1 (its slot is no longer read),
//   2. writes its send buffer to slot r and publishes posted[r] = s+1 (release),
//   3. waits until every rank has posted s+1 (acquire),
//   4. computes its own output from the slots, in rank order (the same bits on every rank),
//   5. publishes taken[r] = s+1.
// Waiting is polling with a short sleep (the machine may have fewer cores than ranks and streams):
// no futex across processes, no lock a dying process could hold. Threads of one process map the
// same file once each, and meet the same way.
namespace {

constexpr int kMaxRanks = 64;

struct RankState {
  std::atomic<int> joined;
  std::atomic<int> pid;   // the rank's process, for Note [A peer that exits]
  std::atomic<int> left;  // 1 once the rank called ncclCommDestroy or ncclCommAbort
  std::atomic<uint64_t> posted;  // collectives whose data this rank has written to its slot
  std::atomic<uint64_t> taken;   // collectives this rank has computed its output for
};
struct Shared {
  std::atomic<int> nranks;  // set by the first rank to map the file
  std::atomic<int> joined;
  std::atomic<int> aborted;
  RankState ranks[kMaxRanks];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "the shared counters must be lock-free to work across processes");

std::mutex hooks_mutex;
std::map<int, ncclResult_t>& injected() {  // nccl_fail_async, by rank
  static auto* m = new std::map<int, ncclResult_t>;
  return *m;
}
std::map<int, ncclResult_t>& injected_query() {  // nccl_fail_query, by rank
  static auto* m = new std::map<int, ncclResult_t>;
  return *m;
}

size_t element_size(ncclDataType_t t) { return t == ncclFloat16 || t == ncclBfloat16 ? 2 : t == ncclFloat32 ? 4 : 8; }

// bfloat16 is float32's upper half: widening is a shift; narrowing rounds to nearest even (NaN stays NaN).
float bf16_to_float(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFu;  // CUDA's __float2bfloat16_rn NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

size_t slot_bytes() {
  const char* mb = std::getenv("MT_CUDA_EMU_NCCL_SLOT_MB");
  const long v = mb ? std::atol(mb) : 0;
  return static_cast<size_t>(v > 0 ? v : 64) << 20;
}

}  // namespace

struct ncclComm {
  Shared* shared = nullptr;
  char* slots = nullptr;  // nranks slots of slot_size bytes, after the header
  size_t slot_size = 0;
  std::string path;
  int rank = 0, nranks = 0, device = 0;
  std::atomic<bool> aborted{false};
  ncclResult_t init_error = ncclSuccess;  // why ncclCommInitRankConfig failed, for ncclCommGetAsyncError
  uint64_t next = 0;  // sequence number of this rank's next collective (issue order)
  std::string last_error;
  char* slot(int r) const { return slots + static_cast<size_t>(r) * slot_size; }
  bool all_joined() const { return shared->joined.load() == nranks; }
};

namespace {

// Polls `done` until it holds (true) or the communicator is aborted, here or by a peer (false).
template <typename Pred>
bool await(const ncclComm* comm, Pred done) {
  auto pause = std::chrono::microseconds(10);
  while (!done()) {
    if (comm->aborted.load() || comm->shared->aborted.load()) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  return true;
}

bool ready(ncclComm_t comm, const char* call) {
  if (comm == nullptr) return false;
  if (comm->aborted || !comm->all_joined()) {
    comm->last_error = std::string(call) + " on a communicator that is aborted or not yet initialised";
    return false;
  }
  return true;
}

bool fits(ncclComm_t comm, size_t bytes, const char* call) {
  if (bytes <= comm->slot_size) return true;
  comm->last_error = std::string(call) + " of " + std::to_string(bytes) + " bytes exceeds the emulated NCCL's " +
                     std::to_string(comm->slot_size) + "-byte slot per rank (raise MT_CUDA_EMU_NCCL_SLOT_MB)";
  return false;
}

// Queues this rank's part of the next collective: `bytes` of `send` go to its slot, and `finish`
// computes this rank's output from every rank's slot (steps 1-5 of the Note above).
ncclResult_t collective(ncclComm_t comm, cudaStream_t stream, const void* send, size_t bytes,
                        std::function<void(const std::vector<const char*>&)> finish) {
  const uint64_t seq = comm->next++;
  mt_emu::enqueue(stream, [comm, seq, send, bytes, finish] {
    Shared& sh = *comm->shared;
    RankState& me = sh.ranks[comm->rank];
    const auto every = [&](auto field, uint64_t at_least) {
      return [&, field, at_least] {
        for (int k = 0; k < comm->nranks; ++k)
          if ((sh.ranks[k].*field).load(std::memory_order_acquire) < at_least) return false;
        return true;
      };
    };
    // This rank's earlier collective first (it may sit on another stream), then the peers'.
    if (!await(comm, [&] { return me.taken.load() == seq; })) return;
    if (!await(comm, every(&RankState::taken, seq))) return;
    if (send != nullptr) std::memcpy(comm->slot(comm->rank), send, bytes);
    me.posted.store(seq + 1, std::memory_order_release);
    if (!await(comm, every(&RankState::posted, seq + 1))) return;
    std::vector<const char*> slots;
    for (int k = 0; k < comm->nranks; ++k) slots.push_back(comm->slot(k));
    finish(slots);
    me.taken.store(seq + 1, std::memory_order_release);
  });
  return ncclSuccess;
}

template <typename T>
void reduce_into(std::vector<double>& acc, const T* x, size_t n, ncclRedOp_t op, bool first) {
  for (size_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i]);
    acc[i] = first ? v : op == ncclMax ? std::max(acc[i], v) : op == ncclMin ? std::min(acc[i], v) : acc[i] + v;
  }
}

// op over ranks of elements [offset, offset + count) of every rank's slot, in rank order, in double
// (then rounded once to the type: the emulator's sums are exact for the small tests).
std::vector<double> reduce_ranks(const std::vector<const char*>& slots, size_t offset, size_t count,
                                 ncclDataType_t type, ncclRedOp_t op) {
  const int n = static_cast<int>(slots.size());
  std::vector<double> acc(count);
  for (int r = 0; r < n; ++r) {
    const bool first = r == 0;
    switch (type) {
      case ncclFloat32: reduce_into(acc, reinterpret_cast<const float*>(slots[r]) + offset, count, op, first); break;
      case ncclFloat64: reduce_into(acc, reinterpret_cast<const double*>(slots[r]) + offset, count, op, first); break;
      case ncclInt64: reduce_into(acc, reinterpret_cast<const int64_t*>(slots[r]) + offset, count, op, first); break;
      case ncclFloat16: {
        std::vector<float> f(count);
        for (size_t i = 0; i < count; ++i)
          f[i] = __half2float(__ushort_as_half(reinterpret_cast<const uint16_t*>(slots[r])[offset + i]));
        reduce_into(acc, f.data(), count, op, first);
        break;
      }
      case ncclBfloat16: {
        std::vector<float> f(count);
        for (size_t i = 0; i < count; ++i) f[i] = bf16_to_float(reinterpret_cast<const uint16_t*>(slots[r])[offset + i]);
        reduce_into(acc, f.data(), count, op, first);
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
      case ncclBfloat16: static_cast<uint16_t*>(recv)[i] = float_to_bf16(static_cast<float>(acc[i])); break;
    }
  }
}

// Note [A peer that exits]: NCCL reports a peer process that died (its connections closed) as
// ncclRemoteError from ncclCommGetAsyncError, which ProcessGroupNCCL's watchdog polls; the group
// then fails at once instead of waiting for its timeout. Here a rank whose process no longer exists
// (kill(pid, 0) fails with ESRCH; a zombie counts as alive until its parent reaps it) and that
// left no ncclCommDestroy or ncclCommAbort behind is such a peer; one that destroyed its
// communicator and exited, as every rank does at the end of a job, is not.
std::string exited_peer(const ncclComm* comm) {
  for (int k = 0; k < comm->nranks; ++k) {
    const RankState& peer = comm->shared->ranks[k];
    const int pid = peer.pid.load();
    if (k == comm->rank || pid <= 0 || pid == getpid() || peer.left.load()) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH)
      return "rank " + std::to_string(k) + " (process " + std::to_string(pid) + ") exited without ncclCommDestroy";
  }
  return "";
}

void forget_path(ncclComm_t comm) {
  if (!comm->path.empty()) ::unlink(comm->path.c_str());  // ENOENT when a peer did it already
  comm->path.clear();
}

}  // namespace

namespace mt_emu {
void nccl_fail_async(int rank, ncclResult_t error) {
  std::lock_guard<std::mutex> lock(hooks_mutex);
  if (error == ncclSuccess) injected().erase(rank);
  else injected()[rank] = error;
}
void nccl_fail_query(int rank, ncclResult_t error) {
  std::lock_guard<std::mutex> lock(hooks_mutex);
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

// A name no other job on the machine makes: the process, a counter and a random number.
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<uint64_t> counter{0};
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "%d-%llu-%u", static_cast<int>(getpid()),
                static_cast<unsigned long long>(counter++), std::random_device{}());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  const std::string name(id.internal, strnlen(id.internal, sizeof id.internal));
  if (name.empty() || name.find('/') != std::string::npos) return ncclInvalidArgument;
  auto* comm = new ncclComm;  // never freed: queued collectives may outlive ncclCommDestroy
  comm->rank = rank;
  comm->nranks = nranks;
  comm->device = mt_emu::current_device_index();
  comm->slot_size = slot_bytes();
  comm->path = (std::filesystem::temp_directory_path() / ("mt-emu-nccl-" + name)).string();
  *out = comm;  // written before any waiting, as NCCL does for non-blocking communicators
  const size_t header = (sizeof(Shared) + 4095) / 4096 * 4096;
  const size_t size = header + static_cast<size_t>(nranks) * comm->slot_size;
  const int fd = ::open(comm->path.c_str(), O_RDWR | O_CREAT, 0600);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || (static_cast<size_t>(st.st_size) < size && ::ftruncate(fd, size) != 0)) {
    comm->last_error = "cannot create " + comm->path + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    comm->aborted = true;
    return comm->init_error = ncclSystemError;
  }
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    comm->last_error = "cannot map " + comm->path + ": " + std::strerror(errno);
    comm->aborted = true;
    return comm->init_error = ncclSystemError;
  }
  comm->shared = static_cast<Shared*>(map);  // a fresh file is zeros: every counter starts at 0
  comm->slots = static_cast<char*>(map) + header;
  Shared& sh = *comm->shared;
  int expected = 0;
  if ((!sh.nranks.compare_exchange_strong(expected, nranks) && expected != nranks) ||
      sh.ranks[rank].joined.exchange(1) != 0) {
    comm->last_error = "rank " + std::to_string(rank) + " joined twice, or with another world size";
    comm->aborted = true;
    return comm->init_error = ncclInvalidUsage;
  }
  sh.ranks[rank].pid = getpid();
  if (sh.joined.fetch_add(1) + 1 == nranks) forget_path(comm);  // every rank has the file mapped
  if (config == nullptr || config->blocking) {
    if (!await(comm, [&] { return comm->all_joined(); })) return ncclRemoteError;
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
    std::lock_guard<std::mutex> lock(hooks_mutex);
    const auto q = injected_query().find(comm->rank);
    if (q != injected_query().end()) return q->second;
    const auto it = injected().find(comm->rank);
    if (it != injected().end()) {
      *async_error = it->second;
      return ncclSuccess;
    }
  }
  if (comm->init_error != ncclSuccess) *async_error = comm->init_error;
  else if (comm->shared->aborted.load() && !comm->aborted) *async_error = ncclRemoteError;
  else if (const std::string gone = exited_peer(comm); !gone.empty()) {
    comm->last_error = gone;
    *async_error = ncclRemoteError;
  } else *async_error = comm->all_joined() ? ncclSuccess : ncclInProgress;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->aborted = true;
  if (comm->shared != nullptr) {
    comm->shared->ranks[comm->rank].left = 1;
    comm->shared->aborted = 1;
  }
  forget_path(comm);  // a job that failed during setup leaves no file either
  return ncclSuccess;
}

// As NCCL's (which finalizes first): the collectives already issued complete before the
// communicator goes, so a peer still waiting for this rank's last one is not left hanging.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (comm->shared != nullptr) {
    const uint64_t issued = comm->next;
    RankState& me = comm->shared->ranks[comm->rank];
    await(comm, [&] { return me.taken.load() == issued; });
    me.left = 1;
  }
  comm->aborted = true;  // no further use; the memory stays (see ncclCommInitRankConfig)
  forget_path(comm);
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (!ready(comm, "ncclAllReduce")) return ncclInvalidUsage;
  if (!fits(comm, count * element_size(type), "ncclAllReduce")) return ncclInvalidUsage;
  return collective(comm, stream, send, count * element_size(type),
                    [recv, count, type, op](const std::vector<const char*>& slots) {
                      store(recv, reduce_ranks(slots, 0, count, type, op), type);
                    });
}

// Rank r's recv gets the reduction of shard r ([r·count, (r+1)·count) of every send buffer). The
// send buffer was copied to the slot first, so in place (recv = send + r·count) reads no result.
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recv_count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  if (!ready(comm, "ncclReduceScatter")) return ncclInvalidUsage;
  const size_t bytes = recv_count * comm->nranks * element_size(type);
  if (!fits(comm, bytes, "ncclReduceScatter")) return ncclInvalidUsage;
  const size_t offset = recv_count * comm->rank;
  return collective(comm, stream, send, bytes, [recv, offset, recv_count, type, op](const std::vector<const char*>& slots) {
    store(recv, reduce_ranks(slots, offset, recv_count, type, op), type);
  });
}

// Only the root's slot is read: the other ranks post nothing.
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  if (!ready(comm, "ncclBroadcast")) return ncclInvalidUsage;
  if (root < 0 || root >= comm->nranks) return ncclInvalidArgument;
  const size_t bytes = count * element_size(type);
  if (!fits(comm, bytes, "ncclBroadcast")) return ncclInvalidUsage;
  return collective(comm, stream, comm->rank == root ? send : nullptr, bytes,
                    [recv, bytes, root](const std::vector<const char*>& slots) { std::memcpy(recv, slots[root], bytes); });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  if (!ready(comm, "ncclAllGather")) return ncclInvalidUsage;
  const size_t bytes = send_count * element_size(type);
  if (!fits(comm, bytes, "ncclAllGather")) return ncclInvalidUsage;
  return collective(comm, stream, send, bytes, [recv, bytes](const std::vector<const char*>& slots) {
    for (size_t r = 0; r < slots.size(); ++r) std::memcpy(static_cast<char*>(recv) + r * bytes, slots[r], bytes);
  });
}
