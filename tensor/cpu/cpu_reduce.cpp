// CpuBackend::reduce: sum, max, min and argmax over a set of dims. out keeps in's rank with size 1
// on the reduced dims and is contiguous, so out's elements are in's kept dims in row-major order.
//
// Three strategies, picked from in's layout:
//   rows     in contiguous, reduced dims trailing: in = (outer, r). Each out[o] is one row, combined
//            in kLanes independent accumulators (vector registers). Loss means, softmax row sums.
//   columns  in contiguous, reduced dims leading or in the middle: in = (outer, r, inner). The r rows
//            of length `inner` are combined into out[o, :] one after another, a vectorised loop.
//            The bias gradient: sum over dim 0 of (N, D).
//   general  anything else (reduced dims not adjacent, or a strided input): strided_loop over in,
//            with out's strides set to 0 on the reduced dims so each input element is combined
//            into its output slot in place; dims are visited in in's memory order.
// ArgMax (exactly one dim) scans that dim with its stride, once per output element.
//
// Float32 sums accumulate in float32 as in PyTorch. Rows and columns are summed pairwise (halves
// summed separately, then added), so the rounding error grows like log(r) instead of r; the
// general path does that within each contiguous run and sums the runs sequentially.
// bfloat16 and float16 inputs are read as float32 and combined in float32 (an Op's In is the
// element type read, its Type the accumulator), into a float32 result rounded once at the end
// (Note [Low-precision compute type], tensor/dtype.h).
#include <algorithm>
#include <bit>
#include <cstdlib>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensor/cpu/cpu_backend.h"

namespace mt {
namespace {

constexpr int64_t kLanes = 16;          // independent row accumulators: 1-2 vector registers
// Rows longer than this are split in halves, so each lane adds at most 2048 / 16 = 128 numbers in
// sequence. Measured, 2048 sums twice as fast as NumPy's 128 (fewer lane folds and calls) and the
// error bound stays ~128 ulps instead of growing with the row.
constexpr int64_t kPairwiseRow = 2048;
constexpr int64_t kPairwiseRows = 64;   // column sums over more rows than this are split
// Parallel splits (Note [Parallel reductions]).
constexpr int64_t kParallelRow = 65536;  // rows longer than this are split into subtrees
constexpr int64_t kColumnBlock = 256;    // columns per task of a column reduction
constexpr int64_t kUnitStrideChunk = 1024;  // at least, per chunk of the general path along in's unit stride

// Each reduction is an identity and a combine step. NaN handling for Max/Min: the result is NaN if
// any input is (PyTorch's rule). "x != x" is true only for NaN, so once acc is NaN no later x
// replaces it, and a NaN x always does.
template <typename T, typename InT = T>
struct SumOp {
  using Type = T;
  using In = InT;
  static constexpr bool kPairwise = true;
  static T identity() { return T(0); }
  static T combine(T acc, T x) { return acc + x; }
};
template <typename T, typename InT = T>
struct MaxOp {
  using Type = T;
  using In = InT;
  static constexpr bool kPairwise = false;
  static T identity() {
    if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  static T combine(T acc, T x) { return (x > acc || x != x) ? x : acc; }
};
template <typename T, typename InT = T>
struct MinOp {
  using Type = T;
  using In = InT;
  static constexpr bool kPairwise = false;
  static T identity() {
    if constexpr (std::numeric_limits<T>::has_infinity) return std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::max();
  }
  static T combine(T acc, T x) { return (x < acc || x != x) ? x : acc; }
};

// Where the pairwise trees split: reduce_row's n values at a whole number of lanes, reduce_columns'
// r rows in half. The parallel paths (split_tree, combine_pieces, combine_column_pieces) cut and
// recombine at the same points, so their sums keep the serial bits.
int64_t row_half(int64_t n) { return n / 2 / kLanes * kLanes; }
int64_t column_half(int64_t r) { return r / 2; }

// Combines x[0 .. n) into one value.
template <typename Op, typename T = typename Op::Type, typename In = typename Op::In>
T reduce_row(const In* x, int64_t n) {
  if constexpr (Op::kPairwise) {
    if (n > kPairwiseRow) {
      const int64_t half = row_half(n);
      return Op::combine(reduce_row<Op>(x, half), reduce_row<Op>(x + half, n - half));
    }
  }
  T acc[kLanes];
  std::fill(acc, acc + kLanes, Op::identity());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    // Kept as a loop (not unrolled into 16 statements) so GCC's loop vectoriser, which handles
    // Max/Min's NaN-aware select, turns it into whole-register operations.
#pragma GCC unroll 1
    for (int64_t j = 0; j < kLanes; ++j) acc[j] = Op::combine(acc[j], x[i + j]);
  }
  for (; i < n; ++i) acc[0] = Op::combine(acc[0], x[i]);
  for (int64_t width = kLanes / 2; width > 0; width /= 2)  // fold the lanes as a tree
    for (int64_t j = 0; j < width; ++j) acc[j] = Op::combine(acc[j], acc[j + width]);
  return acc[0];
}

// out(inner) = the r rows of x(r, inner) combined; row k starts at x + k·ld (ld >= inner: a block of
// columns of a wider matrix). Pairwise sums need one scratch row per level of halving (see
// scratch_rows), handed down as a stack: level 0 first.
template <typename Op, typename T = typename Op::Type, typename In = typename Op::In>
void reduce_columns(T* out, const In* x, int64_t r, int64_t inner, int64_t ld, T* scratch) {
  if constexpr (Op::kPairwise) {
    if (r > kPairwiseRows) {
      const int64_t half = column_half(r);
      reduce_columns<Op>(out, x, half, inner, ld, scratch);
      reduce_columns<Op>(scratch, x + half * ld, r - half, inner, ld, scratch + inner);
      for (int64_t j = 0; j < inner; ++j) out[j] = Op::combine(out[j], scratch[j]);
      return;
    }
  }
  if (r == 0) {
    std::fill(out, out + inner, Op::identity());
    return;
  }
  std::copy(x, x + inner, out);
  for (int64_t k = 1; k < r; ++k) {
    const In* row = x + k * ld;
    for (int64_t j = 0; j < inner; ++j) out[j] = Op::combine(out[j], row[j]);
  }
}

int64_t scratch_rows(int64_t r) {
  int64_t levels = 0;
  for (; r > kPairwiseRows; r = (r + 1) / 2) ++levels;
  return levels;
}

// in viewed as (outer, r, inner) with the reduced dims in the middle. False when the reduced dims
// are not adjacent (size-1 dims count as either, so they never break adjacency).
struct Block {
  int64_t outer = 1, r = 1, inner = 1;
};
bool as_block(const Shape& sizes, uint32_t dim_mask, Block& b) {
  enum { kLeading, kReduced, kTrailing } phase = kLeading;
  for (int d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if ((dim_mask >> d) & 1u) {
      if (phase == kTrailing) return false;
      phase = kReduced;
      b.r *= sizes[d];
    } else if (phase == kLeading) {
      b.outer *= sizes[d];
    } else {
      phase = kTrailing;
      b.inner *= sizes[d];
    }
  }
  return true;
}

// The general path's loop: in's dims sorted by in's stride, largest first, each with in's and out's
// stride (out's 0 on the reduced dims, so each input element is combined into its output slot).
struct GeneralLoop {
  Shape sizes, in_strides, out_strides;
};
GeneralLoop general_loop(const Tensor& out, const Tensor& in, uint32_t dim_mask) {
  const int ndim = in.dim();
  int order[kMaxDims];
  for (int d = 0; d < ndim; ++d) order[d] = d;
  std::stable_sort(order, order + ndim, [&](int x, int y) {
    return std::abs(in.strides()[x]) > std::abs(in.strides()[y]);
  });
  GeneralLoop l;
  for (int i = 0; i < ndim; ++i) {
    const int d = order[i];
    l.sizes.push_back(in.sizes()[d]);
    l.in_strides.push_back(in.strides()[d]);
    l.out_strides.push_back(((dim_mask >> d) & 1u) ? 0 : out.strides()[d]);
  }
  return l;
}

// Combines the loop's elements of x into o (already holding the identity, or a partial result).
template <typename Op, typename T = typename Op::Type, typename In = typename Op::In>
void combine_into(const GeneralLoop& l, T* o, const In* x) {
  cpu::strided_loop(
      l.sizes,
      [](int64_t n, const std::array<int64_t, 2>& s, T* o, const In* x) {
        if (s[0] == 0 && s[1] == 1) {  // a contiguous run along reduced dims: one output slot
          *o = Op::combine(*o, reduce_row<Op>(x, n));
        } else if (s[0] == 0) {
          T acc = *o;
          for (int64_t i = 0; i < n; ++i) acc = Op::combine(acc, x[i * s[1]]);
          *o = acc;
        } else {
          for (int64_t i = 0; i < n; ++i) o[i * s[0]] = Op::combine(o[i * s[0]], x[i * s[1]]);
        }
      },
      cpu::Operand<T>{o, l.out_strides.begin()}, cpu::Operand<const In>{x, l.in_strides.begin()});
}

// Any layout. The loop runs over in's dims sorted by in's stride, largest first, so its innermost
// run walks in's memory in order: summing dim 0 of a transposed matrix then reads contiguous runs
// that reduce_row can vectorise, instead of jumping a whole row per element. On the intra-op
// threads as Note [Parallel reductions] says (the general path).
template <typename Op, typename T = typename Op::Type, typename In = typename Op::In>
void reduce_general(const Tensor& out, const Tensor& in, uint32_t dim_mask) {
  T* o = cpu::data<T>(out);
  const In* x = cpu::data<const In>(in);
  const GeneralLoop loop = general_loop(out, in, dim_mask);
  // The loop dim to split: the outermost kept one longer than 1, else the outermost one longer
  // than 1 (every dim reduced); none when in has one element.
  const int ndim = loop.sizes.size();
  int split = -1;
  for (int i = 0; i < ndim && split < 0; ++i)
    if (loop.out_strides[i] != 0 && loop.sizes[i] > 1) split = i;
  const bool kept = split >= 0;
  for (int i = 0; i < ndim && split < 0; ++i)
    if (loop.sizes[i] > 1) split = i;
  const int64_t size = split >= 0 ? loop.sizes[split] : 1;
  int64_t grain = std::max<int64_t>(cpu::kGrainWork / std::max<int64_t>(in.numel() / size, 1), 1);
  // Split along in's unit-stride dim, a chunk reads a piece of every row: at least kUnitStrideChunk
  // elements of it (a 4 KB page of float32), or the pieces cost more in misses than a thread saves.
  if (split >= 0 && std::abs(loop.in_strides[split]) == 1) grain = std::max(grain, kUnitStrideChunk);
  const int64_t chunks = (size + grain - 1) / grain;  // parallel_for's chunks
  // Each chunk: the loop with the split dim narrowed to [lo, hi), into out itself (a kept dim: the
  // chunks' output slots are disjoint) or into its own partial slot (a reduced dim).
  std::vector<T> partial(kept ? 0 : chunks, Op::identity());
  if (kept) std::fill(o, o + out.numel(), Op::identity());
  parallel_for(size, grain, [&](int64_t lo, int64_t hi) {
    GeneralLoop part = loop;
    if (split >= 0) part.sizes[split] = hi - lo;
    const In* from = split >= 0 ? x + lo * loop.in_strides[split] : x;
    T* to = kept ? o + lo * loop.out_strides[split] : &partial[lo / grain];
    combine_into<Op>(part, to, from);
  });
  if (kept) return;
  T acc = partial[0];  // the partial results in chunk order
  for (int64_t c = 1; c < chunks; ++c) acc = Op::combine(acc, partial[c]);
  *o = acc;
}

// Note [Parallel reductions]: every split here is fixed by the shapes, so sums are the same bits
// for any thread count; all but one also combine each output element in the same order as the
// serial code did before the threads came:
//   - rows of a (outer, r) reduction, and blocks of kColumnBlock columns of an (outer, r, inner)
//     one, are independent outputs: chunks of them run on different threads;
//   - a column block with more than a grain of work (b.r · width > cpu::kGrainWork) is cut, the
//     same way, into the subtrees of reduce_columns' pairwise tree over its rows (reduce_tall_columns);
//   - a single row longer than kParallelRow is cut into the subtrees of reduce_row's own pairwise
//     tree (split_tree); the subtrees are reduced in parallel and then combined up the same tree;
//   - the general path (reduce_general: any strides, reduced dims anywhere) splits one dim of its
//     loop: its outermost KEPT dim when it has one, so each output element is combined by one
//     chunk, in the loop's order. A chunk along in's unit-stride dim holds at least
//     kUnitStrideChunk elements: summing dim 1 of a transposed 1024x1024 in chunks of 32 columns
//     (a narrow piece of every 4 KB row each) took 8x the serial time at one thread, in chunks of
//     256 still 1.4x;
//   - the exception: when every dim is reduced (a whole strided tensor into one value), the general
//     path splits its outermost dim, each chunk into a partial result of its own, combined in chunk
//     order afterwards: a different tree than one loop over everything, so such a sum changed in
//     its last bits when the split came (thread counts still agree).
// Max and Min are exact, so any split gives the same value.

// The pieces (first, count) of [begin, begin + n) that a pairwise tree splitting at half(n) reaches
// at or below `leaf`, left to right: whole subtrees of reduce_row's tree (row_half, leaf
// kParallelRow) or of reduce_columns' (column_half, leaf >= kPairwiseRows).
void split_tree(int64_t begin, int64_t n, int64_t leaf, int64_t (*half)(int64_t),
                std::vector<std::pair<int64_t, int64_t>>& pieces) {
  if (n <= leaf) {
    pieces.emplace_back(begin, n);
    return;
  }
  const int64_t h = half(n);
  split_tree(begin, h, leaf, half, pieces);
  split_tree(begin + h, n - h, leaf, half, pieces);
}

// Combines the pieces' results up the tree split_tree walked down; `next` counts pieces consumed.
template <typename Op, typename T = typename Op::Type>
T combine_pieces(int64_t n, const std::vector<T>& part, size_t& next) {
  if (n <= kParallelRow) return part[next++];
  const int64_t half = row_half(n);
  const T left = combine_pieces<Op>(half, part, next);
  return Op::combine(left, combine_pieces<Op>(n - half, part, next));
}

// reduce_row(x, n) with the subtrees of its pairwise tree on the intra-op threads.
template <typename Op, typename T = typename Op::Type, typename In = typename Op::In>
T reduce_long_row(const In* x, int64_t n) {
  std::vector<std::pair<int64_t, int64_t>> pieces;
  split_tree(0, n, kParallelRow, row_half, pieces);
  std::vector<T> part(pieces.size());
  parallel_for(static_cast<int64_t>(pieces.size()), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) part[i] = reduce_row<Op>(x + pieces[i].first, pieces[i].second);
  });
  size_t next = 0;
  return combine_pieces<Op>(n, part, next);
}

// Combines the pieces' column results (piece p's in part + p·width) up the tree split_tree
// walked down, in place; returns the row that holds the result. `next` counts pieces consumed.
template <typename Op, typename T = typename Op::Type>
T* combine_column_pieces(int64_t r, int64_t rows, T* part, int64_t width, int64_t cols, int64_t& next) {
  if (r <= rows) return part + next++ * width;
  const int64_t half = column_half(r);
  T* left = combine_column_pieces<Op>(half, rows, part, width, cols, next);
  const T* right = combine_column_pieces<Op>(r - half, rows, part, width, cols, next);
  for (int64_t j = 0; j < cols; ++j) left[j] = Op::combine(left[j], right[j]);
  return left;
}

// A column reduction whose column blocks each hold more than a grain of work: each block's
// rows are cut into the subtrees of reduce_columns' tree (Note [Parallel reductions]), the subtrees
// reduced in parallel and combined up the same tree. Linear's bias gradient is this: the GPT
// preset's dy of 2048 rows and 128 columns is a single column block, one task without the cut.
template <typename Op, typename T = typename Op::Type, typename In = typename Op::In>
void reduce_tall_columns(T* o, const In* x, const Block& b, int64_t blocks, int64_t width) {
  const int64_t rows = std::max(cpu::kGrainWork / width, kPairwiseRows);  // at most, per piece
  std::vector<std::pair<int64_t, int64_t>> pieces;
  split_tree(0, b.r, rows, column_half, pieces);  // whole subtrees: rows >= kPairwiseRows
  const int64_t per_task = static_cast<int64_t>(pieces.size()), tasks = b.outer * blocks;
  std::vector<T> part(tasks * per_task * width);  // one row of results per (task, piece)
  parallel_for(tasks * per_task, 1, [&](int64_t lo, int64_t hi) {
    std::vector<T> scratch(scratch_rows(rows) * width);
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t t = u / per_task, i = t / blocks, j0 = t % blocks * kColumnBlock;
      const int64_t cols = std::min(kColumnBlock, b.inner - j0);
      const auto [row0, n] = pieces[u % per_task];
      reduce_columns<Op>(part.data() + u * width, x + (i * b.r + row0) * b.inner + j0, n, cols, b.inner,
                         scratch.data());
    }
  });
  parallel_for(tasks, cpu::kGrainWork / (per_task * width), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t i = t / blocks, j0 = t % blocks * kColumnBlock, cols = std::min(kColumnBlock, b.inner - j0);
      int64_t next = 0;
      const T* sum = combine_column_pieces<Op>(b.r, rows, part.data() + t * per_task * width, width, cols, next);
      std::copy(sum, sum + cols, o + i * b.inner + j0);
    }
  });
}

template <typename Op, typename T = typename Op::Type, typename In = typename Op::In>
void reduce_impl(const Tensor& out, const Tensor& in, uint32_t dim_mask) {
  Block b;
  if (!cpu::is_contiguous(in) || !as_block(in.sizes(), dim_mask, b)) {
    reduce_general<Op>(out, in, dim_mask);
    return;
  }
  T* o = cpu::data<T>(out);
  const In* x = cpu::data<const In>(in);
  if (b.inner == 1) {
    if (b.r > kParallelRow) {
      for (int64_t i = 0; i < b.outer; ++i) o[i] = reduce_long_row<Op>(x + i * b.r, b.r);
      return;
    }
    parallel_for(b.outer, cpu::kGrainWork / std::max<int64_t>(b.r, 1), [=](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) o[i] = reduce_row<Op>(x + i * b.r, b.r);
    });
    return;
  }
  // Tasks: (outer index, block of columns), in row-major order.
  const int64_t blocks = (b.inner + kColumnBlock - 1) / kColumnBlock;
  const int64_t width = std::min(b.inner, kColumnBlock);
  if (b.r * width > cpu::kGrainWork) {
    reduce_tall_columns<Op>(o, x, b, blocks, width);
    return;
  }
  parallel_for(b.outer * blocks, cpu::kGrainWork / std::max<int64_t>(b.r * width, 1), [=](int64_t lo, int64_t hi) {
    std::vector<T> scratch(Op::kPairwise ? scratch_rows(b.r) * width : 0);
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t i = t / blocks, j0 = t % blocks * kColumnBlock, cols = std::min(kColumnBlock, b.inner - j0);
      reduce_columns<Op>(o + i * b.inner + j0, x + i * b.r * b.inner + j0, b.r, cols, b.inner, scratch.data());
    }
  });
}

// The index of the largest of x[0], x[stride], ..., x[(n-1)*stride]: the first one on ties, the
// first NaN if there is one. n >= 1.
template <typename T, typename C = compute_t<T>>
int64_t argmax_scan(const T* x, int64_t n, int64_t stride) {
  C best = x[0];
  if (best != best) return 0;
  int64_t arg = 0;
  for (int64_t k = 1; k < n; ++k) {
    const C v = x[k * stride];
    if (v != v) return k;
    if (v > best) {
      best = v;
      arg = k;
    }
  }
  return arg;
}

// The loop runs over out's shape, which is 1 along `dim`, with in's strides: each visited in
// element is the start of one scan.
template <typename T>
void argmax(const Tensor& out, const Tensor& in, int dim) {
  const int64_t n = in.sizes()[dim], stride = in.strides()[dim];
  cpu::strided_loop(
      out.sizes(),
      [n, stride](int64_t count, const std::array<int64_t, 2>& s, int64_t* o, const T* x) {
        for (int64_t i = 0; i < count; ++i) o[i * s[0]] = argmax_scan(x + i * s[1], n, stride);
      },
      cpu::operand<int64_t>(out), cpu::operand<const T>(in));
}

}  // namespace

void CpuBackend::reduce(ReductionOp op, const Tensor& out, const Tensor& in, uint32_t dim_mask) {
  const char* name = op_name(op);
  MT_CHECK(out.dim() == in.dim(), name, ": out has rank ", out.dim(), ", in has rank ", in.dim());
  if (out.numel() == 0) return;
  // Sum over nothing is 0; the others have no identity a user would expect.
  MT_CHECK(op == ReductionOp::Sum || in.numel() > 0, name, ": cannot reduce over an empty dim (input shape ",
           in.sizes(), ")");
  MT_DISPATCH_ALL_AND_LOWP(in.dtype(), name, [&]<typename T>() {
    using C = compute_t<T>;
    // A low-precision input combines into a float32 result, rounded into out once at the end.
    const bool widened = op != ReductionOp::ArgMax && !std::is_same_v<C, T>;
    const Tensor acc = widened ? empty(out.sizes(), {.dtype = dtype_of<C>::value}) : out;
    switch (op) {
      case ReductionOp::Sum: reduce_impl<SumOp<C, T>>(acc, in, dim_mask); break;
      case ReductionOp::Max: reduce_impl<MaxOp<C, T>>(acc, in, dim_mask); break;
      case ReductionOp::Min: reduce_impl<MinOp<C, T>>(acc, in, dim_mask); break;
      case ReductionOp::ArgMax:
        MT_CHECK(std::popcount(dim_mask) == 1 && std::countr_zero(dim_mask) < in.dim(),
                 "argmax: reduces exactly one dim, got dim mask ", dim_mask);
        return argmax<T>(out, in, std::countr_zero(dim_mask));
    }
    if (widened) copy(out, acc);
  });
}

}  // namespace mt
