// The kernel side of the CUDA emulator: what a .cu file may use inside a kernel, and the launch that
// tests/cuda_emu/translate_launches.cpp puts where the source says kernel<<<grid, block, smem, stream>>>(args).
//
// Note [Emulated threads]: a launch is queued on its stream like any other work; when the stream
// reaches it, its blocks are shared out among the stream's worker and a few helper host threads
// (MT_CUDA_EMU_BLOCK_THREADS, default up to 4), so blocks run concurrently as on a GPU. Each block's
// threads run as fibers (one stack each, ucontext) on one host thread, switched cooperatively: a
// thread runs until it reaches __syncthreads, a warp shuffle or vote, or its end. So
//   - __syncthreads is a real barrier: no thread passes it before all blockDim threads reached it;
//     a barrier some threads never reach (they returned, or wait at another one) is a launch
//     failure naming the kernel, the block, the line and the thread counts, never a hang;
//   - shuffles and votes exchange values among the 32 lanes of a warp named in the mask, at the
//     moment the last of them arrives; a lane of the mask that exited, or waits elsewhere, is a
//     launch failure too;
//   - __shared__ variables are one copy per block (static thread_local: a host thread runs one
//     block at a time), uninitialised between blocks as on a GPU;
//   - atomics are std::atomic_ref operations (streams run on different host threads).
// Threads of a warp do not run in lockstep (as with independent thread scheduling since Volta), so
// code that relies on implicit warp synchrony fails here as it may on a GPU. What no emulation
// shows: the GPU memory model's reorderings, timing, occupancy and speed (docs/gpu.md).
#pragma once

#include <math.h>  // the float overloads of exp, log, ... in the global namespace, as CUDA's math API

#include <atomic>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static thread_local
#define __launch_bounds__(...)

namespace mt_emu {


// The calling fiber's coordinates; only valid inside a kernel.
const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();

// Blocks the calling thread at the block barrier (Note [Emulated threads]).
void syncthreads(const char* file, int line);

// The warp exchange behind shuffles, votes and __syncwarp: every lane of `mask` deposits `bytes`
// bytes of `value` and the lane it reads from; returns once all of them arrived, with the source
// lane's bytes in `result` (its own when the source is outside the mask or the width).
enum class WarpOp { Shuffle, Vote, Sync };
void warp_exchange(WarpOp op, unsigned mask, const void* value, int bytes, int source_lane, void* result,
                   const char* file, int line);
unsigned warp_ballot(unsigned mask, bool predicate, const char* file, int line);
int lane_id();

// __shfl_sync's source: lane `source % width` of the calling lane's width-lane segment.
inline int segment_lane(int source, int width) {
  return lane_id() / width * width + ((source % width) + width) % width;
}

// source_lane: the absolute lane to read; outside the caller's width-lane segment it reads its own
// value (as __shfl_down_sync past the end of the segment does).
template <typename T>
T shuffle(unsigned mask, T v, int source_lane, int width, const char* file, int line) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 16, "shuffle: a value of at most 16 bytes");
  const int lane = lane_id(), base = lane / width * width;
  const int src = source_lane < base || source_lane >= base + width ? lane : source_lane;
  T out;
  warp_exchange(WarpOp::Shuffle, mask, &v, sizeof(T), src, &out, file, line);
  return out;
}

// For the emulator's own tests: clears a poisoned context (a launch failure or illegal address),
// which a GPU process could never do. Waits for every stream first.
void reset_context();

// For the emulator's own tests: how many times this process launched `name`, a kernel without its
// template arguments ("im2col_kernel") or "cublasGemmStridedBatchedEx", counted when accepted.
int64_t launch_count(const char* name);

// The launch that replaces kernel<<<grid, block, smem, stream>>>(args): the arguments are copied at
// the launch, as a GPU copies kernel parameters, and the kernel runs later on the stream.
class Launch {
 public:
  Launch(const char* kernel, const char* file, int line, dim3 grid, dim3 block, size_t shared_bytes = 0,
         cudaStream_t stream = nullptr)
      : kernel_(kernel), file_(file), line_(line), grid_(grid), block_(block), shared_bytes_(shared_bytes),
        stream_(stream) {}

  template <typename F, typename... Args>
  void operator()(F kernel, Args... args) {
    auto body = [kernel, params = std::make_tuple(args...)]() { std::apply(kernel, params); };
    enqueue(new Body<decltype(body)>(std::move(body)));
  }

  struct AnyBody {  // the kernel bound to its parameters, run once per emulated thread
    virtual ~AnyBody() = default;
    virtual void run() = 0;
  };

 private:
  template <typename B>
  struct Body final : AnyBody {
    explicit Body(B b) : body(std::move(b)) {}
    void run() override { body(); }
    B body;
  };
  void enqueue(AnyBody* body);  // takes ownership (emu_kernel.cpp)

  const char* kernel_;
  const char* file_;
  int line_;
  dim3 grid_, block_;
  size_t shared_bytes_;
  cudaStream_t stream_;
};

}  // namespace mt_emu

#define threadIdx (::mt_emu::thread_idx())
#define blockIdx (::mt_emu::block_idx())
#define blockDim (::mt_emu::block_dim())
#define gridDim (::mt_emu::grid_dim())
inline constexpr int warpSize = 32;  // a builtin variable in CUDA, not a macro

#define __syncthreads() ::mt_emu::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) ::mt_emu::warp_exchange(::mt_emu::WarpOp::Sync, (__VA_ARGS__ + 0) ? (__VA_ARGS__ + 0) : 0xffffffffu, nullptr, 0, 0, nullptr, __FILE__, __LINE__)
#define __shfl_sync(mask, v, lane, ...) \
  ::mt_emu::shuffle((mask), (v), ::mt_emu::segment_lane((lane), ::mt_emu::detail_width(__VA_ARGS__ + 0)), \
                    ::mt_emu::detail_width(__VA_ARGS__ + 0), __FILE__, __LINE__)
#define __shfl_xor_sync(mask, v, lane_mask, ...) \
  ::mt_emu::shuffle((mask), (v), ::mt_emu::lane_id() ^ (lane_mask), ::mt_emu::detail_width(__VA_ARGS__ + 0), __FILE__, __LINE__)
#define __shfl_down_sync(mask, v, delta, ...) \
  ::mt_emu::shuffle((mask), (v), ::mt_emu::lane_id() + (delta), ::mt_emu::detail_width(__VA_ARGS__ + 0), __FILE__, __LINE__)
#define __shfl_up_sync(mask, v, delta, ...) \
  ::mt_emu::shuffle((mask), (v), ::mt_emu::lane_id() - static_cast<int>(delta), ::mt_emu::detail_width(__VA_ARGS__ + 0), __FILE__, __LINE__)
#define __ballot_sync(mask, predicate) ::mt_emu::warp_ballot((mask), (predicate), __FILE__, __LINE__)
#define __any_sync(mask, predicate) (::mt_emu::warp_ballot((mask), (predicate), __FILE__, __LINE__) != 0u)
#define __all_sync(mask, predicate) \
  ((::mt_emu::warp_ballot((mask), (predicate), __FILE__, __LINE__) & (mask)) == (mask))

namespace mt_emu {
constexpr int detail_width(int width) { return width == 0 ? 32 : width; }  // the default width is warpSize
}  // namespace mt_emu

// ---- atomics: one read-modify-write each, visible to every host thread ---------------------------------
template <typename T>
inline T mt_emu_atomic_add(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value);
}
inline int atomicAdd(int* a, int v) { return mt_emu_atomic_add(a, v); }
inline unsigned atomicAdd(unsigned* a, unsigned v) { return mt_emu_atomic_add(a, v); }
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) { return mt_emu_atomic_add(a, v); }
inline float atomicAdd(float* a, float v) { return mt_emu_atomic_add(a, v); }
inline double atomicAdd(double* a, double v) { return mt_emu_atomic_add(a, v); }
template <typename T>
inline T atomicCAS(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value);
  return compare;  // the old value, whether or not it was swapped
}
template <typename T>
inline T atomicExch(T* address, T value) {
  return std::atomic_ref<T>(*address).exchange(value);
}
template <typename T>
inline T atomicMax(T* address, T value) {
  std::atomic_ref<T> a(*address);
  T old = a.load();
  while (old < value && !a.compare_exchange_weak(old, value)) {
  }
  return old;
}
template <typename T>
inline T atomicMin(T* address, T value) {
  std::atomic_ref<T> a(*address);
  T old = a.load();
  while (value < old && !a.compare_exchange_weak(old, value)) {
  }
  return old;
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// CUDA's device min/max: global overloads for each integer width and float/double (math_functions.h),
// so kernels may call min(a, b) unqualified as they do under nvcc.
#define MT_EMU_MINMAX(T)                                \
  inline T min(T a, T b) { return b < a ? b : a; }      \
  inline T max(T a, T b) { return a < b ? b : a; }
MT_EMU_MINMAX(int)
MT_EMU_MINMAX(unsigned)
MT_EMU_MINMAX(long)
MT_EMU_MINMAX(unsigned long)
MT_EMU_MINMAX(long long)
MT_EMU_MINMAX(unsigned long long)
#undef MT_EMU_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
