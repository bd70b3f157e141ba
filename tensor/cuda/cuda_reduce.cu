// CudaBackend::reduce: sum, max, min and argmax over a set of dims, with the CPU backend's semantics
// (tensor/cpu/cpu_reduce.cpp): Max/Min propagate NaN, ArgMax returns the first occurrence of the
// maximum or the first NaN, and a sum over nothing is 0.
//
// On the host, in's dims are split into kept and reduced ones, each described by a StridedIndexer
// (so any strides and any set of dims work, with no copy):
//   out[o] = combine over j of in[kept_offset(o) + reduced_offset(j)]   o < outputs, j < r
// out is contiguous, so out's element o is the o-th kept position in row-major order.
// Two kernels:
//   rows     a warp (rows of up to 1024) or a block (longer rows) per output; its threads stride
//            over j and combine with warp shuffles (then shared memory across a block's warps).
//            Used when j walks memory with unit stride (loss means, softmax sums), or when there
//            are few outputs to share the GPU between.
//   columns  one thread per output, looping over j; neighbouring threads read neighbouring
//            addresses, so the loads are coalesced (the bias gradient: sum over dim 0 of (N, D)).
// With few outputs and long rows, either kernel works on chunks of each row spread over more
// blocks, and reduce_finish_kernel combines the chunks' partials (Note [Split reductions]).
// Sums accumulate in the tensor's compute type (float32 in float32, as PyTorch does; float32 for
// bfloat16 and float16, whose elements are widened as they are read and whose result is rounded
// once, on the store: Note [Low-precision compute type], tensor/dtype.h); the tree order differs
// from the CPU's, so float sums agree to rounding, not bit for bit.
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>

#include "tensor/cuda/cuda_allocator.h"
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_loops.cuh"

namespace mt::cuda {
namespace {

// Each op: Acc (what is combined), identity, make(value, j), combine (commutative and associative,
// so any tree order gives the same value), and result (what out stores). T is the element type
// read; values are combined in C = compute_t<T>.
template <typename T, typename C = compute_t<T>>
struct SumOp {
  using Acc = C;
  using Out = T;
  __device__ static Acc identity() { return C(0); }
  __device__ static Acc make(T x, int64_t) { return C(x); }
  __device__ static Acc combine(Acc a, Acc b) { return a + b; }
  __device__ static Out result(Acc a) { return T(a); }
};

template <typename T>
__device__ inline bool is_nan(T x) {
  return x != x;  // false for integers
}

template <typename T, typename C = compute_t<T>>
struct MaxOp {
  using Acc = C;
  using Out = T;
  __device__ static Acc identity() {
    if constexpr (std::numeric_limits<C>::has_infinity) return -std::numeric_limits<C>::infinity();
    else return std::numeric_limits<C>::lowest();
  }
  __device__ static Acc make(T x, int64_t) { return C(x); }
  __device__ static Acc combine(Acc a, Acc b) { return is_nan(a) ? a : (b > a || is_nan(b)) ? b : a; }
  __device__ static Out result(Acc a) { return T(a); }
};

template <typename T, typename C = compute_t<T>>
struct MinOp {
  using Acc = C;
  using Out = T;
  __device__ static Acc identity() {
    if constexpr (std::numeric_limits<C>::has_infinity) return std::numeric_limits<C>::infinity();
    else return std::numeric_limits<C>::max();
  }
  __device__ static Acc make(T x, int64_t) { return C(x); }
  __device__ static Acc combine(Acc a, Acc b) { return is_nan(a) ? a : (b < a || is_nan(b)) ? b : a; }
  __device__ static Out result(Acc a) { return T(a); }
};

// (value, index): NaN beats everything, then the larger value, then the smaller index. The index of
// the identity is "past the end", so a real element always wins a tie against it.
template <typename T>
struct ArgMaxAcc {
  T value;
  int64_t index;
};
template <typename T, typename C = compute_t<T>>
struct ArgMaxOp {
  using Acc = ArgMaxAcc<C>;
  using Out = int64_t;
  __device__ static Acc identity() { return {MaxOp<T>::identity(), std::numeric_limits<int64_t>::max()}; }
  __device__ static Acc make(T x, int64_t j) { return {C(x), j}; }
  __device__ static Acc combine(Acc a, Acc b) {
    const bool a_nan = is_nan(a.value), b_nan = is_nan(b.value);
    if (a_nan || b_nan) {
      if (a_nan && b_nan) return a.index < b.index ? a : b;
      return a_nan ? a : b;
    }
    if (a.value != b.value) return a.value > b.value ? a : b;
    return a.index < b.index ? a : b;
  }
  __device__ static Out result(Acc a) { return a.index; }
};

template <typename T>
__device__ inline T shuffle_down(T v, int delta) {
  return __shfl_down_sync(0xffffffffu, v, delta);
}
template <typename T>
__device__ inline ArgMaxAcc<T> shuffle_down(ArgMaxAcc<T> v, int delta) {
  return {__shfl_down_sync(0xffffffffu, v.value, delta), __shfl_down_sync(0xffffffffu, v.index, delta)};
}

// Lane 0 ends with the combination of the warp's 32 values.
template <typename Op>
__device__ inline typename Op::Acc warp_combine(typename Op::Acc v) {
  for (int delta = kWarpSize / 2; delta > 0; delta /= 2) v = Op::combine(v, shuffle_down(v, delta));
  return v;
}

// Both kernels work on units: unit u = (output o, split s) combines j in [s * chunk, (s + 1) * chunk)
// of o's row, u = o * splits + s. With splits == 1 a unit is a whole row and its result goes to
// out[o]; otherwise the accumulator goes to partial[u] and reduce_finish_kernel combines each
// output's partials (Note [Split reductions] in launch.h). j stays the index within the whole row,
// so argmax's indices are right in either case.
struct Units {
  int64_t outputs, r, splits, chunk;
  __device__ int64_t count() const { return outputs * splits; }
  __device__ int64_t begin(int64_t u) const { return u % splits * chunk; }
  __device__ int64_t end(int64_t u) const { return begin(u) + chunk < r ? begin(u) + chunk : r; }
};

template <typename Op>
__device__ inline void store(typename Op::Out* out, typename Op::Acc* partial, const Units& units, int64_t u,
                             typename Op::Acc acc) {
  if (units.splits == 1) out[u] = Op::result(acc);
  else partial[u] = acc;
}

// kThreadsPerOutput = kWarpSize (several units per block, one per warp) or kThreadsPerBlock.
template <typename Op, typename T, int kThreadsPerOutput>
__global__ void reduce_rows_kernel(typename Op::Out* out, typename Op::Acc* partial, const T* in, Units units,
                                   StridedIndexer<1> kept, StridedIndexer<1> reduced) {
  using Acc = typename Op::Acc;
  constexpr int kOutputsPerBlock = kThreadsPerBlock / kThreadsPerOutput;
  __shared__ Acc scratch[kThreadsPerBlock / kWarpSize];
  const int lane = threadIdx.x % kThreadsPerOutput;
  const int64_t first = int64_t(blockIdx.x) * kOutputsPerBlock + threadIdx.x / kThreadsPerOutput;
  const int64_t step = int64_t(gridDim.x) * kOutputsPerBlock;
  // Every thread runs the same number of iterations, so the __syncthreads below are reached by all.
  const int64_t rounds = (units.count() + step - 1) / step;
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t u = first + round * step;
    Acc acc = Op::identity();
    if (u < units.count()) {
      int64_t base[1];
      kept.offsets(u / units.splits, base);
      for (int64_t j = units.begin(u) + lane; j < units.end(u); j += kThreadsPerOutput) {
        int64_t off[1];
        reduced.offsets(j, off);
        acc = Op::combine(acc, Op::make(in[base[0] + off[0]], j));
      }
    }
    acc = warp_combine<Op>(acc);
    if constexpr (kThreadsPerOutput == kWarpSize) {
      if (lane == 0 && u < units.count()) store<Op>(out, partial, units, u, acc);
    } else {
      const int warp = threadIdx.x / kWarpSize;
      if (threadIdx.x % kWarpSize == 0) scratch[warp] = acc;
      __syncthreads();
      if (warp == 0) {
        acc = threadIdx.x < kThreadsPerBlock / kWarpSize ? scratch[threadIdx.x] : Op::identity();
        acc = warp_combine<Op>(acc);
        if (threadIdx.x == 0 && u < units.count()) store<Op>(out, partial, units, u, acc);
      }
      __syncthreads();  // scratch is reused by the next round
    }
  }
}

// One thread per unit; neighbouring threads take neighbouring outputs of one split (coalesced).
template <typename Op, typename T>
__global__ void reduce_columns_kernel(typename Op::Out* out, typename Op::Acc* partial, const T* in, Units units,
                                      StridedIndexer<1> kept, StridedIndexer<1> reduced) {
  for (int64_t e = global_thread(); e < units.count(); e += grid_threads()) {
    const int64_t o = e % units.outputs, u = o * units.splits + e / units.outputs;
    int64_t base[1];
    kept.offsets(o, base);
    typename Op::Acc acc = Op::identity();
    for (int64_t j = units.begin(u); j < units.end(u); ++j) {
      int64_t off[1];
      reduced.offsets(j, off);
      acc = Op::combine(acc, Op::make(in[base[0] + off[0]], j));
    }
    store<Op>(out, partial, units, u, acc);
  }
}

// Pass 2 of a split reduction: out[o] = result(combine over s of partial[o * splits + s]), one warp
// per output (splits <= kMaxSplits), grid-striding in whole rounds so every lane reaches the shuffles.
template <typename Op>
__global__ void reduce_finish_kernel(typename Op::Out* out, const typename Op::Acc* partial, int64_t outputs,
                                     int64_t splits) {
  constexpr int kWarpsPerBlock = kThreadsPerBlock / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int64_t first = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  const int64_t step = int64_t(gridDim.x) * kWarpsPerBlock;
  const int64_t rounds = (outputs + step - 1) / step;
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t o = first + round * step;
    typename Op::Acc acc = Op::identity();
    for (int64_t s = lane; o < outputs && s < splits; s += kWarpSize) acc = Op::combine(acc, partial[o * splits + s]);
    acc = warp_combine<Op>(acc);
    if (lane == 0 && o < outputs) out[o] = Op::result(acc);
  }
}

// Below this many outputs the column kernel leaves most of the GPU idle; rows then parallelise
// over j instead, at the cost of strided loads.
constexpr int64_t kMinColumnOutputs = 1024;

template <typename Op, typename T>
void launch_reduce(const CudaBackend& be, const Tensor& out, const Tensor& in, uint32_t dim_mask) {
  using Acc = typename Op::Acc;
  Shape kept_sizes, kept_strides, reduced_sizes, reduced_strides;
  for (int d = 0; d < in.dim(); ++d) {
    if ((dim_mask >> d) & 1u) {
      reduced_sizes.push_back(in.sizes()[d]);
      reduced_strides.push_back(in.strides()[d]);
    } else {
      kept_sizes.push_back(in.sizes()[d]);
      kept_strides.push_back(in.strides()[d]);
    }
  }
  const int64_t outputs = kept_sizes.numel(), r = reduced_sizes.numel();
  const auto kept = make_indexer<1>(kept_sizes, {kept_strides.begin()});
  const auto reduced = make_indexer<1>(reduced_sizes, {reduced_strides.begin()});
  auto* o = static_cast<typename Op::Out*>(out.raw_data());
  const T* x = static_cast<const T*>(in.raw_data());
  const bool unit_stride_rows = reduced.ndim == 0 || reduced.strides[0][0] == 1;
  const bool columns = !unit_stride_rows && outputs >= kMinColumnOutputs;
  const int sms = be.multiprocessors();
  const RowGeometry rows = row_geometry(outputs, r, sms);
  // Blocks the one-pass kernel would keep busy (before the grid cap): what a split must improve on.
  const int64_t outputs_per_block = columns ? kThreadsPerBlock : kThreadsPerBlock / rows.threads_per_row;
  const int64_t unsplit_blocks = (outputs + outputs_per_block - 1) / outputs_per_block;
  const SplitGeometry split = split_geometry(unsplit_blocks, r, sms, columns ? kMinColumnChunk : kMinSplitChunk);
  const Units units{outputs, r, split.splits, split.chunk};
  // The partials live in a block of the caching allocator, freed once both passes are queued: the
  // allocator hands it out again only to later work on the same stream (Note [Caching allocator]).
  Allocator& allocator = device_allocator(be.device());
  const size_t partial_bytes = split.splits > 1 ? static_cast<size_t>(outputs * split.splits) * sizeof(Acc) : 0;
  Acc* partial = partial_bytes ? static_cast<Acc*>(allocator.allocate(partial_bytes)) : nullptr;
  if (columns) {
    const auto g = elementwise_geometry(outputs * split.splits, sms);
    reduce_columns_kernel<Op, T><<<g.blocks, g.threads, 0, be.stream()>>>(o, partial, x, units, kept, reduced);
  } else if (split.splits > 1) {  // a block per unit: each chunk is kMinSplitChunk or longer
    const auto g = row_geometry(outputs * split.splits, kWarpPerRowLimit + 1, sms);
    reduce_rows_kernel<Op, T, kThreadsPerBlock><<<g.blocks, g.threads, 0, be.stream()>>>(o, partial, x, units, kept,
                                                                                       reduced);
  } else if (rows.threads_per_row == kWarpSize) {
    reduce_rows_kernel<Op, T, kWarpSize><<<rows.blocks, rows.threads, 0, be.stream()>>>(o, partial, x, units, kept,
                                                                                       reduced);
  } else {
    reduce_rows_kernel<Op, T, kThreadsPerBlock><<<rows.blocks, rows.threads, 0, be.stream()>>>(o, partial, x, units,
                                                                                             kept, reduced);
  }
  MT_CUDA_CHECK_LAUNCH();
  if (partial) {
    const auto g = row_geometry(outputs, split.splits, sms);  // a warp per output
    reduce_finish_kernel<Op><<<g.blocks, g.threads, 0, be.stream()>>>(o, partial, outputs, split.splits);
    allocator.deallocate(partial, partial_bytes);
    MT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void CudaBackend::reduce(ReductionOp op, const Tensor& out, const Tensor& in, uint32_t dim_mask) {
  const char* name = op_name(op);
  MT_CHECK(out.dim() == in.dim(), name, ": out has rank ", out.dim(), ", in has rank ", in.dim());
  MT_CHECK(is_dense(out), name, ": CUDA kernel needs a contiguous out, got strides ", out.strides());
  if (out.numel() == 0) return;
  MT_CHECK(op == ReductionOp::Sum || in.numel() > 0, name, ": cannot reduce over an empty dim (input shape ",
           in.sizes(), ")");
  DeviceGuard guard(device_);
  MT_DISPATCH_ALL_AND_LOWP(in.dtype(), name, [&]<typename T>() {
    switch (op) {
      case ReductionOp::Sum: return launch_reduce<SumOp<T>, T>(*this, out, in, dim_mask);
      case ReductionOp::Max: return launch_reduce<MaxOp<T>, T>(*this, out, in, dim_mask);
      case ReductionOp::Min: return launch_reduce<MinOp<T>, T>(*this, out, in, dim_mask);
      case ReductionOp::ArgMax:
        MT_CHECK(std::popcount(dim_mask) == 1 && std::countr_zero(dim_mask) < in.dim(),
                 "argmax: reduces exactly one dim, got dim mask ", dim_mask);
        MT_CHECK(out.dtype() == kInt64, "argmax: out must be int64, got ", out.dtype());
        return launch_reduce<ArgMaxOp<T>, T>(*this, out, in, dim_mask);
    }
  });
}

}  // namespace mt::cuda
