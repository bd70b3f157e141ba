// The CUDA emulator's kernel execution: a grid's blocks one after another, each block's threads as
// fibers on the stream's worker thread (Note [Emulated threads] in include/emu_kernel.h), with the
// block barrier and the warp exchange as the only points where a thread gives way.
#include <sys/mman.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <atomic>
#include <deque>
#include <thread>
#include <memory>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "emu_internal.h"

namespace mt_emu {
namespace {

constexpr size_t kStackBytes = size_t{256} << 10;  // per emulated thread; kernels use little stack
constexpr int kWarp = 32;

enum class State { Ready, AtBarrier, AtWarp, Done };

struct ThreadContext {
  ucontext_t context;
  uint3 idx;
  int linear = 0;
  State state = State::Ready;
  // Where it waits, and what it brought to a warp exchange.
  const char* file = nullptr;
  int line = 0;
  WarpOp op = WarpOp::Sync;
  unsigned mask = 0;
  int bytes = 0, source = 0;
  unsigned char value[16], result[16];
};

// A stack per emulated thread, kept by a host thread across blocks and handed back to a shared
// free list when that thread ends (grids start helper threads: Note [Emulated threads]). A guard
// page below each turns an overflow into a crash rather than corruption.
class StackPool {
 public:
  ~StackPool() {
    std::lock_guard<std::mutex> lock(free_mutex());
    for (void* s : stacks_) free_list().push_back(s);
  }
  void* get(size_t i) {
    while (stacks_.size() <= i) stacks_.push_back(take());
    return stacks_[i];
  }

 private:
  static std::mutex& free_mutex() {
    static auto* m = new std::mutex;
    return *m;
  }
  static std::vector<void*>& free_list() {
    static auto* v = new std::vector<void*>;  // never destroyed: threads may end during exit
    return *v;
  }
  static void* take() {
    {
      std::lock_guard<std::mutex> lock(free_mutex());
      if (!free_list().empty()) {
        void* s = free_list().back();
        free_list().pop_back();
        return s;
      }
    }
    void* p = mmap(nullptr, kStackBytes + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
      std::perror("CUDA emulator: mmap of a fiber stack");
      std::abort();
    }
    mprotect(p, 4096, PROT_NONE);
    return static_cast<char*>(p) + 4096;
  }
  std::vector<void*> stacks_;
};

struct BlockRun {
  Launch::AnyBody* body = nullptr;
  uint3 block_idx{};
  dim3 block_dim, grid_dim;
  ucontext_t scheduler;
  std::vector<ThreadContext> threads;
  int at_barrier = 0, done = 0;
  // Threads ready to run, next first. Released threads go to the front (Note [Racing ahead]).
  std::deque<int> ready;
  std::string error;
};

thread_local BlockRun* t_block = nullptr;
thread_local ThreadContext* t_thread = nullptr;
thread_local StackPool t_stacks;

ThreadContext& me() {
  if (t_thread == nullptr) {
    std::fprintf(stderr, "CUDA emulator: a kernel builtin (threadIdx, __syncthreads, ...) used outside a kernel\n");
    std::abort();
  }
  return *t_thread;
}

void yield_to_scheduler() { swapcontext(&t_thread->context, &t_block->scheduler); }

void fiber_main() {
  try {
    t_block->body->run();
  } catch (const std::exception& e) {
    t_block->error = std::string("a C++ exception escaped the kernel: ") + e.what();
  } catch (...) {
    t_block->error = "a C++ exception escaped the kernel";
  }
  t_thread->state = State::Done;
}  // returns to uc_link: the scheduler

std::string where(const ThreadContext& t) {
  std::ostringstream s;
  s << "thread (" << t.idx.x << "," << t.idx.y << "," << t.idx.z << ")";
  return s.str();
}
std::string site(const char* file, int line) { return std::string(file ? file : "?") + ":" + std::to_string(line); }
const char* op_name(WarpOp op) {
  return op == WarpOp::Shuffle ? "a warp shuffle" : op == WarpOp::Vote ? "a warp vote" : "__syncwarp";
}

// After a thread stopped at the block barrier: release everyone when all are there.
void settle_barrier(BlockRun& b, ThreadContext& t) {
  const int n = static_cast<int>(b.threads.size());
  ++b.at_barrier;
  if (b.done > 0) {
    b.error = "__syncthreads at " + site(t.file, t.line) + " is not reached by all threads of the block: " +
              std::to_string(b.done) + " of " + std::to_string(n) + " threads had already returned";
    return;
  }
  if (b.at_barrier < n) return;
  for (const ThreadContext& o : b.threads) {
    if (o.line != t.line || std::strcmp(o.file, t.file) != 0) {
      b.error = "divergent __syncthreads: " + where(t) + " waits at " + site(t.file, t.line) + ", " + where(o) +
                " at " + site(o.file, o.line);
      return;
    }
  }
  for (int i = n - 1; i >= 0; --i) {
    b.threads[i].state = State::Ready;
    b.ready.push_front(i);
  }
  b.at_barrier = 0;
}

// After a lane stopped at a warp exchange: complete it when every lane of the mask is there.
void settle_warp(BlockRun& b, ThreadContext& t) {
  const int n = static_cast<int>(b.threads.size());
  const int warp = t.linear / kWarp, lane = t.linear % kWarp;
  auto fail = [&](const std::string& why) {
    b.error = op_name(t.op) + std::string(" at ") + site(t.file, t.line) + " by " + where(t) + " (warp " +
              std::to_string(warp) + ", mask 0x" + [&] {
                char hex[16];
                std::snprintf(hex, sizeof hex, "%08x", t.mask);
                return std::string(hex);
              }() + "): " + why;
  };
  if (((t.mask >> lane) & 1u) == 0) return fail("the calling lane is not in the mask");
  std::vector<ThreadContext*> lanes(kWarp, nullptr);
  for (int l = 0; l < kWarp; ++l) {
    if (((t.mask >> l) & 1u) == 0) continue;
    const int i = warp * kWarp + l;
    if (i >= n) return fail("lane " + std::to_string(l) + " does not exist (the block has " + std::to_string(n) +
                            " threads)");
    ThreadContext& o = b.threads[i];
    if (o.state == State::Done) return fail("lane " + std::to_string(l) + " has already returned");
    if (o.state != State::AtWarp) return;  // not everyone is here yet
    if (o.op != t.op || o.mask != t.mask || o.bytes != t.bytes)
      return fail("lane " + std::to_string(l) + " is at " + op_name(o.op) + " at " + site(o.file, o.line) +
                  " with mask or size differing");
    lanes[l] = &o;
  }
  unsigned ballot = 0;
  for (int l = 0; l < kWarp; ++l)
    if (lanes[l] && lanes[l]->value[0]) ballot |= 1u << l;
  for (int l = kWarp - 1; l >= 0; --l) {  // backwards, so that lane 0 ends first in the queue
    ThreadContext* o = lanes[l];
    if (!o) continue;
    if (o->op == WarpOp::Shuffle) {
      const int src = o->source;
      if (src < 0 || src >= kWarp || !lanes[src])
        return fail("lane " + std::to_string(l) + " reads lane " + std::to_string(src) + ", which is not in the mask");
      std::memcpy(o->result, lanes[src]->value, o->bytes);
    } else if (o->op == WarpOp::Vote) {
      std::memcpy(o->result, &ballot, sizeof ballot);
    }
    o->state = State::Ready;
    b.ready.push_front(o->linear);
  }
}

std::string deadlock(const BlockRun& b) {
  std::ostringstream s;
  s << "no thread can go on: ";
  int shown = 0;
  for (const ThreadContext& t : b.threads) {
    if (t.state == State::Done || shown >= 4) continue;
    s << (shown++ ? "; " : "") << where(t) << " waits at "
      << (t.state == State::AtBarrier ? "__syncthreads" : op_name(t.op)) << " " << site(t.file, t.line);
  }
  s << " (" << b.done << " of " << b.threads.size() << " threads returned)";
  return s.str();
}

// A fresh fiber that starts in fiber_main and returns to `link`. Out of line: getcontext returns
// twice, which must not happen in a frame with live loop variables.
[[gnu::noinline]] void prepare_fiber(ucontext_t& context, void* stack, ucontext_t* link) {
  getcontext(&context);
  context.uc_stack.ss_sp = stack;
  context.uc_stack.ss_size = kStackBytes;
  context.uc_link = link;
  makecontext(&context, fiber_main, 0);
}

// Note [Racing ahead]: threads start in index order, each running until it blocks; the threads a
// completed barrier or warp exchange releases run next, before threads that have been ready
// longer. So the first warp through a warp exchange races ahead of the rest of the block, as a fast
// warp may on a GPU: a kernel that writes shared memory other warps still read, without a
// __syncthreads in between, gives wrong results here instead of passing by luck of the order.
std::string run_block(BlockRun& b) {
  const int n = static_cast<int>(b.threads.size());
  for (int i = 0; i < n; ++i) {
    ThreadContext& t = b.threads[i];
    t.linear = i;
    t.idx = {static_cast<unsigned>(i % b.block_dim.x), static_cast<unsigned>(i / b.block_dim.x % b.block_dim.y),
             static_cast<unsigned>(i / (b.block_dim.x * b.block_dim.y))};
    t.state = State::Ready;
    prepare_fiber(t.context, t_stacks.get(i), &b.scheduler);
  }
  b.at_barrier = b.done = 0;
  b.error.clear();
  b.ready.clear();
  for (int i = 0; i < n; ++i) b.ready.push_back(i);
  while (b.done < n) {
    if (b.ready.empty()) return deadlock(b);
    {
      ThreadContext& t = b.threads[b.ready.front()];
      b.ready.pop_front();
      t_thread = &t;
      swapcontext(&b.scheduler, &t.context);
      t_thread = nullptr;
      if (!b.error.empty()) return b.error;
      if (t.state == State::Done) {
        ++b.done;
        if (b.at_barrier > 0) {
          const ThreadContext* waiting = nullptr;
          for (const ThreadContext& o : b.threads)
            if (o.state == State::AtBarrier) waiting = &o;
          return "__syncthreads at " + site(waiting->file, waiting->line) + " is not reached by all threads of "
                 "the block: " + where(t) + " returned while " + std::to_string(b.at_barrier) + " wait there";
        }
        const int warp = t.linear / kWarp;
        for (int l = 0; l < kWarp && warp * kWarp + l < n; ++l) {
          ThreadContext& o = b.threads[warp * kWarp + l];
          if (o.state == State::AtWarp && ((o.mask >> (t.linear % kWarp)) & 1u)) {
            settle_warp(b, o);  // reports the lane that returned
            if (!b.error.empty()) return b.error;
          }
        }
      } else if (t.state == State::AtBarrier) {
        settle_barrier(b, t);
      } else if (t.state == State::AtWarp) {
        settle_warp(b, t);
      }
      if (!b.error.empty()) return b.error;
    }
  }
  return "";
}

// Kernel names launched in this process, appended once each to $MT_CUDA_EMU_LAUNCH_LOG (the
// coverage test, tests/cuda_emu/kernel_coverage.cmake, compares them with the __global__ list).
void log_launch(const char* kernel) {
  static const char* path = std::getenv("MT_CUDA_EMU_LAUNCH_LOG");
  std::string name(kernel);
  name = name.substr(0, name.find('<'));
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  if (count_launch(name) && path != nullptr) std::ofstream(path, std::ios::app) << name << "\n";
}

std::mutex launches_mutex;
std::map<std::string, int64_t> launches;  // name -> launches so far (count_launch)

}  // namespace

bool count_launch(const std::string& name) {
  std::lock_guard<std::mutex> lock(launches_mutex);
  return launches[name]++ == 0;
}

int64_t launch_count(const char* name) {
  std::lock_guard<std::mutex> lock(launches_mutex);
  auto it = launches.find(name);
  return it == launches.end() ? 0 : it->second;
}

const uint3& thread_idx() { return me().idx; }
const uint3& block_idx() {
  me();
  return t_block->block_idx;
}
const dim3& block_dim() {
  me();
  return t_block->block_dim;
}
const dim3& grid_dim() {
  me();
  return t_block->grid_dim;
}
int lane_id() { return me().linear % kWarp; }

void syncthreads(const char* file, int line) {
  ThreadContext& t = me();
  t.state = State::AtBarrier;
  t.file = file;
  t.line = line;
  yield_to_scheduler();
}

void warp_exchange(WarpOp op, unsigned mask, const void* value, int bytes, int source_lane, void* result,
                   const char* file, int line) {
  ThreadContext& t = me();
  t.state = State::AtWarp;
  t.op = op;
  t.mask = mask;
  t.bytes = bytes;
  t.source = source_lane;
  t.file = file;
  t.line = line;
  if (bytes > 0) std::memcpy(t.value, value, bytes);
  yield_to_scheduler();
  if (result && bytes > 0) std::memcpy(result, t.result, bytes);
}

unsigned warp_ballot(unsigned mask, bool predicate, const char* file, int line) {
  ThreadContext& t = me();
  t.value[0] = predicate ? 1 : 0;
  t.state = State::AtWarp;
  t.op = WarpOp::Vote;
  t.mask = mask;
  t.bytes = 1;
  t.file = file;
  t.line = line;
  yield_to_scheduler();
  unsigned ballot;
  std::memcpy(&ballot, t.result, sizeof ballot);
  return ballot;
}

namespace {

// Host threads that run a grid's blocks side by side: $MT_CUDA_EMU_BLOCK_THREADS, else up to 4
// (the cores there are). Blocks then really run concurrently, as on a GPU's multiprocessors.
int block_threads() {
  static const int n = [] {
    if (const char* v = std::getenv("MT_CUDA_EMU_BLOCK_THREADS")) return std::max(1, std::atoi(v));
    return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  }();
  return n;
}

// Runs blocks taken from `next` (linear block indices) until none is left or one failed.
void run_blocks(Launch::AnyBody& body, dim3 grid, dim3 block, std::atomic<uint64_t>& next, std::mutex& error_mutex,
                std::string& error, const char* kernel, const char* file, int line) {
  BlockRun b;
  b.body = &body;
  b.block_dim = block;
  b.grid_dim = grid;
  b.threads.resize(static_cast<size_t>(block.x) * block.y * block.z);
  BlockRun* outer = t_block;
  t_block = &b;
  const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
  for (uint64_t i = next++; i < blocks; i = next++) {
    b.block_idx = {static_cast<unsigned>(i % grid.x), static_cast<unsigned>(i / grid.x % grid.y),
                   static_cast<unsigned>(i / (uint64_t(grid.x) * grid.y))};
    const std::string e = run_block(b);
    if (e.empty()) continue;
    std::lock_guard<std::mutex> lock(error_mutex);
    if (error.empty())
      error = "kernel " + std::string(kernel) + " launched at " + site(file, line) + ", block (" +
              std::to_string(b.block_idx.x) + "," + std::to_string(b.block_idx.y) + "," +
              std::to_string(b.block_idx.z) + "): " + e;
    next = blocks;  // the others stop after their current block
  }
  t_block = outer;
}

}  // namespace

std::string run_grid(Launch::AnyBody& body, const char* kernel, const char* file, int line, dim3 grid, dim3 block) {
  std::atomic<uint64_t> next{0};
  std::mutex error_mutex;
  std::string error;
  const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
  const int helpers = static_cast<int>(std::min<uint64_t>(blocks, block_threads())) - 1;
  std::vector<std::thread> threads;
  for (int h = 0; h < helpers; ++h)
    threads.emplace_back([&] { run_blocks(body, grid, block, next, error_mutex, error, kernel, file, line); });
  run_blocks(body, grid, block, next, error_mutex, error, kernel, file, line);  // this worker too
  for (auto& t : threads) t.join();
  return error;
}

void Launch::enqueue(AnyBody* raw) {
  std::shared_ptr<AnyBody> body(raw);
  const cudaDeviceProp& p = device_properties(current_device_index());
  const unsigned long long threads = static_cast<unsigned long long>(block_.x) * block_.y * block_.z;
  const std::string what = "launch of " + std::string(kernel_) + " at " + site(file_, line_) + ": ";
  if (threads == 0 || threads > static_cast<unsigned>(p.maxThreadsPerBlock) || block_.x > unsigned(p.maxThreadsDim[0]) ||
      block_.y > unsigned(p.maxThreadsDim[1]) || block_.z > unsigned(p.maxThreadsDim[2])) {
    set_last_error(cudaErrorInvalidConfiguration, what + "block (" + std::to_string(block_.x) + "," +
                   std::to_string(block_.y) + "," + std::to_string(block_.z) + ") has " + std::to_string(threads) +
                   " threads; 1 to " + std::to_string(p.maxThreadsPerBlock) + " allowed");
    return;
  }
  if (grid_.x == 0 || grid_.y == 0 || grid_.z == 0 || grid_.x > unsigned(p.maxGridSize[0]) ||
      grid_.y > unsigned(p.maxGridSize[1]) || grid_.z > unsigned(p.maxGridSize[2])) {
    set_last_error(cudaErrorInvalidConfiguration, what + "grid (" + std::to_string(grid_.x) + "," +
                   std::to_string(grid_.y) + "," + std::to_string(grid_.z) + ") is empty or too large");
    return;
  }
  if (shared_bytes_ > p.sharedMemPerBlock) {
    set_last_error(cudaErrorInvalidValue, what + std::to_string(shared_bytes_) + " bytes of dynamic shared memory");
    return;
  }
  if (stream_ != nullptr && stream_device(stream_) != current_device_index()) {
    set_last_error(cudaErrorInvalidResourceHandle, what + "the stream belongs to device " +
                   std::to_string(stream_device(stream_)) + " but device " + std::to_string(current_device_index()) +
                   " is current");
    return;
  }
  log_launch(kernel_);
  const char* kernel = kernel_;
  const char* file = file_;
  const int line = line_;
  const dim3 grid = grid_, block = block_;
  mt_emu::enqueue(stream_, [body, kernel, file, line, grid, block] {
    const std::string error = run_grid(*body, kernel, file, line, grid, block);
    if (!error.empty()) fail_context(cudaErrorLaunchFailure, error);
  });
}

}  // namespace mt_emu
