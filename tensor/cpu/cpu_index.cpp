// CpuBackend index kernels: index_select / index_add (one index list for a whole dim: embedding
// lookups and their backward) and gather / scatter_add (one index per element: picking each
// sample's target logit in cross-entropy, and its backward).
// bfloat16 and float16 too: each addition of index_add and scatter_add in float32, rounded once
// (Note [Low-precision compute type], tensor/dtype.h), as PyTorch's.
//
// raw_ops.cpp views every operand as 3-D (outer, n, inner) around the indexed dim, so these kernels
// never see the original rank. Every index is bounds-checked here, before any write, so a bad label
// is an error naming the op, the index and the valid range, never a silent out-of-bounds write.
//
// Note [Parallel scatters]: index_select and gather write each output element once, so their rows
// split across the intra-op threads freely. index_add and scatter_add ADD into out, and repeated
// indices (the same token twice in a batch: embedding's backward) send several source rows to the
// same output row. Each output element must receive its additions in the same order j = 0, 1, ...,
// k-1 at any thread count (Note [Fixed chunks], tensor/parallel.h), with no atomics and no locks:
//   - index_add is split by output ROWS. One serial pass sorts the positions j by the block of
//     output rows index[j] falls in (a counting sort: stable, so each block's list stays in
//     ascending j), then a task owns one block of kRowBlock rows of one outer slice and adds its
//     source rows, whole and in that order. The blocks depend only on the shape.
//   - scatter_add (one index per element) is split by output COLUMNS: a task owns a block of
//     kColumnBlock columns i of one outer slice and adds every source row j into them in order.
// index_add was split by columns too, until a measurement showed the cost: two threads adding
// different column stripes of the same rows ran at 1.07x of one thread (dim 512) and two stripes
// of 256 at 0.75x, while two independent one-thread processes each kept full speed. Whole rows per
// task scale, and split any embedding width, also the GPT preset's 128, which a column split could
// not (bench/README.md, "Threads").
#include <algorithm>
#include <vector>

#include "tensor/cpu/cpu_backend.h"

namespace mt {
namespace {

struct Dims3 {
  int64_t outer, n, inner;
};

Dims3 dims3(const char* op, const char* what, const Tensor& t) {
  MT_CHECK(t.dim() == 3 && cpu::is_contiguous(t), op, ": CPU kernel needs ", what,
           " as a contiguous 3-D (outer, n, inner) view, got shape ", t.sizes());
  return {t.sizes()[0], t.sizes()[1], t.sizes()[2]};
}

void check_index_dtype(const char* op, const Tensor& index) {
  MT_CHECK(index.dtype() == kInt64 && cpu::is_contiguous(index), op,
           ": index must be a contiguous int64 tensor, got ", index.dtype());
}

// Every index in [0, n), or an error naming the first bad one. On the intra-op threads: max pooling's
// backward checks one index per pooled element, a pass as long as the scatter itself. Each chunk
// notes its first bad position, and the error names the lowest, at any thread count.
void check_bounds(const char* op, const int64_t* index, int64_t count, int64_t n) {
  const int64_t grain = cpu::kGrainElementwise;
  std::vector<int64_t> first_bad((count + grain - 1) / grain, count);  // one per chunk; count: none
  parallel_for(count, grain, [&](int64_t lo, int64_t hi) {
    bool ok = true;  // the whole chunk, branch-free, so the compiler vectorises it
    for (int64_t i = lo; i < hi; ++i)  // 0 <= index[i] < n, as one unsigned comparison
      ok &= static_cast<uint64_t>(index[i]) < static_cast<uint64_t>(n);
    const auto bad = [n](int64_t v) { return v < 0 || v >= n; };
    if (!ok) first_bad[lo / grain] = std::find_if(index + lo, index + hi, bad) - index;
  });
  const int64_t i = first_bad.empty() ? count : *std::min_element(first_bad.begin(), first_bad.end());
  MT_CHECK(i == count, op, ": index ", index[i], " at position ", i, " is out of range for a dim of size ", n,
           " (valid range [0, ", n, "))");
}

// Columns per scatter_add task (Note [Parallel scatters]): 512 bytes of float32. Each block is a
// pass over the k indices and rows, so narrower blocks cost at one thread (measured on the GPT
// preset's embedding backward when index_add split this way too: two blocks of 64 took 1.15-1.2x
// the time of one pass). Two tasks share a cache line only at a block's ends.
constexpr int64_t kColumnBlock = 128;

// Runs task(a, i0, i1) for every block [i0, i1) of kColumnBlock columns of every outer slice a, on
// the intra-op threads; `per_column` is the work one column costs (its k source elements).
template <typename F>
void for_column_blocks(int64_t outer, int64_t inner, int64_t per_column, F task) {
  const int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
  const int64_t work = std::max<int64_t>(per_column * std::min(inner, kColumnBlock), 1);
  parallel_for(outer * blocks, cpu::kGrainWork / work, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t a = t / blocks, i0 = t % blocks * kColumnBlock;
      task(a, i0, std::min(inner, i0 + kColumnBlock));
    }
  });
}

}  // namespace

// out(outer, k, inner)[o, j, :] = in(outer, n, inner)[o, index[j], :]
void CpuBackend::index_select(const Tensor& out, const Tensor& in, const Tensor& index) {
  const Dims3 d = dims3("index_select", "in", in);
  const Dims3 o = dims3("index_select", "out", out);
  check_index_dtype("index_select", index);
  const int64_t k = index.numel();
  MT_CHECK(o.outer == d.outer && o.n == k && o.inner == d.inner, "index_select: out ", out.sizes(),
           " does not match in ", in.sizes(), " and ", k, " indices");
  const int64_t* idx = cpu::data<const int64_t>(index);
  check_bounds("index_select", idx, k, d.n);
  MT_DISPATCH_ALL_AND_LOWP(in.dtype(), "index_select", [&]<typename T>() {
    const T* x = cpu::data<const T>(in);
    T* y = cpu::data<T>(out);
    // Output rows (a, j) are written once each: any split is safe (Note [Parallel scatters]).
    // row = a·k + j, stepped without a division per row: with inner = 1 (an index along the last
    // dim: flip, pad) a row is one element, and the division cost more than the copy.
    parallel_for(d.outer * k, cpu::kGrainElementwise / std::max<int64_t>(d.inner, 1), [=](int64_t lo, int64_t hi) {
      int64_t a = lo / k, j = lo % k;
      for (int64_t row = lo; row < hi; ++row) {
        const T* src = x + (a * d.n + idx[j]) * d.inner;
        if (d.inner == 1) y[row] = *src;
        else std::copy(src, src + d.inner, y + row * d.inner);
        if (++j == k) j = 0, ++a;
      }
    });
  });
}

namespace {

// Rows of out per index_add task (Note [Parallel scatters]): 256 rows of a GPT preset's
// embedding table are 32 tasks, enough for the threads to balance uneven token counts.
constexpr int64_t kRowBlock = 8;

// The positions j = 0..k-1 grouped by the row block index[j] falls in, each group in ascending j:
// group b is order[start[b] .. start[b + 1]).
struct RowBuckets {
  std::vector<int64_t> order, start;
};
RowBuckets bucket_by_row_block(const int64_t* index, int64_t k, int64_t blocks) {
  RowBuckets r{std::vector<int64_t>(k), std::vector<int64_t>(blocks + 1, 0)};
  for (int64_t j = 0; j < k; ++j) ++r.start[index[j] / kRowBlock + 1];
  for (int64_t b = 0; b < blocks; ++b) r.start[b + 1] += r.start[b];
  std::vector<int64_t> next(r.start.begin(), r.start.end() - 1);
  for (int64_t j = 0; j < k; ++j) r.order[next[index[j] / kRowBlock]++] = j;
  return r;
}

}  // namespace

// out(outer, n, inner)[o, index[j], :] += src(outer, k, inner)[o, j, :], in order of j
void CpuBackend::index_add(const Tensor& out, const Tensor& index, const Tensor& src) {
  const Dims3 d = dims3("index_add", "out", out);
  const Dims3 s = dims3("index_add", "src", src);
  check_index_dtype("index_add", index);
  const int64_t k = index.numel();
  MT_CHECK(s.outer == d.outer && s.n == k && s.inner == d.inner, "index_add: src ", src.sizes(),
           " does not match out ", out.sizes(), " and ", k, " indices");
  const int64_t* idx = cpu::data<const int64_t>(index);
  check_bounds("index_add", idx, k, d.n);
  if (k == 0 || d.inner == 0 || d.outer == 0) return;
  MT_DISPATCH_ALL_AND_LOWP(out.dtype(), "index_add", [&]<typename T>() {
    const T* x = cpu::data<const T>(src);
    T* y = cpu::data<T>(out);
    const auto add_row = [=](int64_t a, int64_t j) {  // out row index[j] += src row j, of slice a
      const T* from = x + (a * k + j) * d.inner;
      T* to = y + (a * d.n + idx[j]) * d.inner;
      for (int64_t i = 0; i < d.inner; ++i) to[i] = T(compute_t<T>(to[i]) + compute_t<T>(from[i]));
    };
    // One thread: the rows in order j, no buckets. The same additions in the same order reach
    // every element as through the buckets below, so the bits do not depend on the path.
    if (get_num_threads() == 1 || d.outer * k * d.inner <= cpu::kGrainWork) {
      for (int64_t a = 0; a < d.outer; ++a)
        for (int64_t j = 0; j < k; ++j) add_row(a, j);
      return;
    }
    // Repeated indices add into the same row: split by rows, j in order (Note [Parallel scatters]).
    const int64_t blocks = (d.n + kRowBlock - 1) / kRowBlock;
    const RowBuckets buckets = bucket_by_row_block(idx, k, blocks);
    const int64_t work = std::max<int64_t>(k / blocks * d.inner, 1);  // a block's share, on average
    parallel_for(d.outer * blocks, cpu::kGrainWork / work, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        const int64_t a = t / blocks, b = t % blocks;
        for (int64_t q = buckets.start[b]; q < buckets.start[b + 1]; ++q) add_row(a, buckets.order[q]);
      }
    });
  });
}

// out[o, j, i] = in[o, index[o, j, i], i]. in: (outer, n, inner); index, out: (outer, k, inner).
void CpuBackend::gather(const Tensor& out, const Tensor& in, const Tensor& index) {
  const Dims3 d = dims3("gather", "in", in);
  const Dims3 o = dims3("gather", "out", out);
  check_index_dtype("gather", index);
  MT_CHECK(index.sizes() == out.sizes() && o.outer == d.outer && o.inner == d.inner, "gather: index ",
           index.sizes(), " and out ", out.sizes(), " do not match in ", in.sizes());
  const int64_t* idx = cpu::data<const int64_t>(index);
  check_bounds("gather", idx, index.numel(), d.n);
  MT_DISPATCH_ALL_AND_LOWP(in.dtype(), "gather", [&]<typename T>() {
    const T* x = cpu::data<const T>(in);
    T* y = cpu::data<T>(out);
    // Output rows (a, j) are written once each: any split is safe (Note [Parallel scatters]).
    // row = a·n + j, stepped as index_select's rows are (one division per chunk, not per row).
    parallel_for(o.outer * o.n, cpu::kGrainElementwise / std::max<int64_t>(o.inner, 1), [=](int64_t lo, int64_t hi) {
      int64_t a = lo / o.n, j = lo % o.n;
      for (int64_t row = lo; row < hi; ++row) {
        for (int64_t i = 0; i < o.inner; ++i) {
          const int64_t pos = row * o.inner + i;
          y[pos] = x[(a * d.n + idx[pos]) * d.inner + i];
        }
        if (++j == o.n) j = 0, ++a;
      }
    });
  });
}

namespace {

// out[o, index[o, j, i], i] += src[o, j, i]. out: (outer, n, inner); index, src: (outer, k, inner).
// With `zero_first` out is uninitialised, and each task zeroes the part of it that it owns just
// before adding into it, while that part is in cache: max pooling's backward (inner 1, a task per
// run of planes) then writes each plane once, instead of a zero fill of the whole gradient and a
// second pass over it.
void scatter_add_impl(const Tensor& out, const Tensor& index, const Tensor& src, bool zero_first) {
  const Dims3 d = dims3("scatter_add", "out", out);
  const Dims3 s = dims3("scatter_add", "src", src);
  check_index_dtype("scatter_add", index);
  MT_CHECK(index.sizes() == src.sizes() && s.outer == d.outer && s.inner == d.inner, "scatter_add: index ",
           index.sizes(), " and src ", src.sizes(), " do not match out ", out.sizes());
  const int64_t* idx = cpu::data<const int64_t>(index);
  check_bounds("scatter_add", idx, index.numel(), d.n);
  MT_DISPATCH_ALL_AND_LOWP(out.dtype(), "scatter_add", [&]<typename T>() {
    const T* x = cpu::data<const T>(src);
    T* y = cpu::data<T>(out);
    // Column i of src only ever reaches column i of out: split by columns, j in order (Note
    // [Parallel scatters]). Max pooling's backward is this with inner 1 and one slice per plane.
    const int64_t per_column = s.n + (zero_first ? d.n : 0);
    for_column_blocks(s.outer, s.inner, per_column, [=](int64_t a, int64_t i0, int64_t i1) {
      T* slice = y + a * d.n * d.inner;
      if (zero_first && i1 - i0 == d.inner) {  // whole rows: one run
        std::fill(slice, slice + d.n * d.inner, T(0));
      } else if (zero_first) {
        for (int64_t r = 0; r < d.n; ++r) std::fill(slice + r * d.inner + i0, slice + r * d.inner + i1, T(0));
      }
      for (int64_t j = 0; j < s.n; ++j)
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t pos = (a * s.n + j) * s.inner + i;
          T& to = slice[idx[pos] * d.inner + i];
          to = T(compute_t<T>(to) + compute_t<T>(x[pos]));
        }
    });
  });
}

}  // namespace

void CpuBackend::scatter_add(const Tensor& out, const Tensor& index, const Tensor& src) {
  scatter_add_impl(out, index, src, /*zero_first=*/false);
}

void CpuBackend::scatter_add_zeros(const Tensor& out, const Tensor& index, const Tensor& src) {
  scatter_add_impl(out, index, src, /*zero_first=*/true);
}

}  // namespace mt
