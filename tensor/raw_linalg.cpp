// Raw ops, part 2: matmul and the fused linear, softmax, the indexing ops and random fills.
#include <algorithm>

#include "tensor/detail/borrowed_view.h"
#include "tensor/generator.h"
#include "tensor/raw_ops.h"

namespace mt::raw {

namespace {

void check_pair(const Tensor& a, const Tensor& b, const char* op) {
  MT_CHECK(a.device() == b.device(), op, ": tensors are on different devices (", a.device(), " and ",
           b.device(), ")");
  MT_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ (", a.dtype(), " and ", b.dtype(),
           "); cast one with .to(dtype)");
}

// A (B, R, C) batch of matrices that a GEMM can read: unit stride in one of the last two dims.
Tensor gemm_operand(const Tensor& m) {
  const int64_t sr = m.strides()[1], sc = m.strides()[2];
  const bool row_major = sc == 1 || m.sizes()[2] == 1;
  const bool col_major = sr == 1 || m.sizes()[1] == 1;
  return row_major || col_major ? m : contiguous(m);
}

// Note [Batched matmul on head views]: attention multiplies (B, H, T, d) tensors that are views of
// a (B, T, H, d) (or (B, T, 3, H, d)) projection: their B and H dims have strides that cannot merge
// into the one batch stride a GEMM call takes, and flattening them would copy every operand. Instead
// matmul then calls the GEMM once per index of the leading batch dims, each call batched over the
// last batch dim (which always has a single stride). Batch dims that do merge keep the one call.

// The batch dims of t (all but the last two) can be viewed as one dim with a single stride.
bool batch_merges(const Tensor& t) {
  int64_t expected = -1;  // the stride the next outer non-trivial dim must have
  for (int d = t.dim() - 3; d >= 0; --d) {
    if (t.sizes()[d] == 1) continue;
    if (expected >= 0 && t.strides()[d] != expected) return false;
    expected = t.strides()[d] * t.sizes()[d];
  }
  return true;
}

// Batch o of t's leading batch dims (all but the last batch dim): (inner, R, C), a view.
Tensor batch_slice(const Tensor& t, int64_t o) {
  const int nd = t.dim() - 2;
  int64_t offset = t.storage_offset();
  for (int d = nd - 2; d >= 0; --d) {
    offset += (o % t.sizes()[d]) * t.strides()[d];
    o /= t.sizes()[d];
  }
  const int last = nd - 1;
  return as_strided(t, Shape{t.sizes()[last], t.sizes()[nd], t.sizes()[nd + 1]},
                    Shape{t.strides()[last], t.strides()[nd], t.strides()[nd + 1]}, offset);
}

// A 2-D matrix as a batch of one with batch stride 0, for one gemm call (Note [Borrowed views]).
detail::BorrowedView as_batch(const Tensor& m) {
  return {m, Shape{1, m.sizes()[0], m.sizes()[1]}, Shape{0, m.strides()[0], m.strides()[1]}, m.storage_offset()};
}

// The same for mᵀ: a transposed view read in place, with no transpose object of its own.
detail::BorrowedView transposed_batch(const Tensor& m) {
  return {m, Shape{1, m.sizes()[1], m.sizes()[0]}, Shape{0, m.strides()[1], m.strides()[0]}, m.storage_offset()};
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "matmul");
  MT_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dim, got ", a.sizes(),
           " and ", b.sizes());
  // 1-D operands: a vector on the left is a row, on the right a column; the added dim goes away.
  if (a.dim() == 1 || b.dim() == 1) {
    const Tensor a2 = a.dim() == 1 ? unsqueeze(a, 0) : a;
    const Tensor b2 = b.dim() == 1 ? unsqueeze(b, 1) : b;
    Tensor r = matmul(a2, b2);
    if (a.dim() == 1) r = squeeze(r, -2);
    if (b.dim() == 1) r = squeeze(r, -1);
    return r;
  }
  const int64_t m = a.sizes()[a.dim() - 2], k = a.sizes()[a.dim() - 1];
  const int64_t k2 = b.sizes()[b.dim() - 2], n = b.sizes()[b.dim() - 1];
  MT_CHECK(k == k2, "matmul: inner dims differ: ", a.sizes(), " @ ", b.sizes(), " (", k, " vs ", k2, ")");
  if (a.dim() == 2 && b.dim() == 2) {
    Tensor out = empty(Shape{m, n}, {.dtype = a.dtype(), .device = a.device()});
    backend(a.device()).gemm(as_batch(out), gemm_operand(as_batch(a)), gemm_operand(as_batch(b)), false);
    return out;
  }
  // Batched: broadcast the batch dims, then flatten them into one.
  const Shape batch_a(a.sizes().begin(), a.sizes().end() - 2), batch_b(b.sizes().begin(), b.sizes().end() - 2);
  const Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  Shape shape_a = batch, shape_b = batch, shape_out = batch;
  shape_a.push_back(m), shape_a.push_back(k);
  shape_b.push_back(k), shape_b.push_back(n);
  shape_out.push_back(m), shape_out.push_back(n);
  const int64_t nb = batch.numel();
  const Tensor ae = expand(a, shape_a), be = expand(b, shape_b);
  Tensor out = empty(Shape{nb, m, n}, {.dtype = a.dtype(), .device = a.device()});
  Backend& bk = backend(a.device());
  if (batch_merges(ae) && batch_merges(be)) {
    bk.gemm(out, gemm_operand(reshape(ae, Shape{nb, m, k})), gemm_operand(reshape(be, Shape{nb, k, n})), false);
  } else {
    // One GEMM per index of the leading batch dims (Note [Batched matmul on head views]).
    const auto nd = static_cast<int>(batch.size());
    const int64_t inner = batch[nd - 1], outer = nb / std::max<int64_t>(inner, 1);
    for (int64_t o = 0; o < outer; ++o) {
      const Tensor out3 = as_strided(out, Shape{inner, m, n}, Shape{m * n, n, 1}, o * inner * m * n);
      bk.gemm(out3, gemm_operand(batch_slice(ae, o)), gemm_operand(batch_slice(be, o)), false);
    }
  }
  return view(out, shape_out);
}

Tensor transposed_matmul(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "transposed_matmul");
  MT_CHECK(a.dim() == 2 && b.dim() == 2 && a.sizes()[0] == b.sizes()[0], "transposed_matmul: needs (K, M) and "
           "(K, N), got ", a.sizes(), " and ", b.sizes());
  Tensor out = empty(Shape{a.sizes()[1], b.sizes()[1]}, {.dtype = a.dtype(), .device = a.device()});
  backend(a.device()).gemm(as_batch(out), gemm_operand(transposed_batch(a)), gemm_operand(as_batch(b)), false);
  return out;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_pair(x, w, "linear");
  MT_CHECK(w.dim() == 2, "linear: weight must be 2-D (out, in), got ", w.sizes());
  MT_CHECK(x.dim() >= 1 && x.sizes().back() == w.sizes()[1], "linear: input ", x.sizes(),
           " does not end in the weight's in-features ", w.sizes()[1], " (weight ", w.sizes(), ")");
  const int64_t out_features = w.sizes()[0];
  if (b.defined()) {
    check_pair(x, b, "linear");
    MT_CHECK(b.dim() == 1 && b.sizes()[0] == out_features, "linear: bias ", b.sizes(), " must be (",
             out_features, ") for weight ", w.sizes());
  }
  // x: (N, in)  wᵀ: (in, out) read in place  y: (N, out)
  // A 2-D x is used as it is and y returned as it is, and the views the backend calls take are
  // borrowed (Note [Borrowed views]): on small models the view objects cost more than the
  // arithmetic (bench/ seed_step).
  const bool flat = x.dim() == 2;
  const Tensor x2 = flat ? x : reshape(x, Shape{-1, w.sizes()[1]});
  const int64_t rows = x2.sizes()[0];
  Tensor y = empty(Shape{rows, out_features}, {.dtype = x.dtype(), .device = x.device()});
  Backend& be = backend(x.device());
  if (b.defined()) {  // y = b, then the GEMM adds x·wᵀ onto it; b: (out) broadcast over the rows
    be.copy(y, detail::BorrowedView(b, Shape{rows, out_features}, Shape{0, b.strides()[0]}, b.storage_offset()));
  }
  be.gemm(as_batch(y), gemm_operand(as_batch(x2)), gemm_operand(transposed_batch(w)), b.defined());
  if (flat) return y;
  Shape shape = x.sizes();
  shape[shape.size() - 1] = out_features;
  return view(y, shape);
}

// ---- softmax ----------------------------------------------------------------------------------

namespace {
Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  MT_CHECK(is_floating(x.dtype()), name, ": needs a floating dtype, got ", x.dtype());
  if (x.dim() == 0) return view(softmax_impl(unsqueeze(x, 0), 0, log), Shape{});
  const int d = wrap_dim(dim, x.dim(), name);
  const int last = x.dim() - 1;
  // The backend works on rows; move `dim` last, run, move it back.
  const Tensor rows = contiguous(d == last ? x : transpose(x, d, last));
  Tensor out = empty(rows.sizes(), {.dtype = x.dtype(), .device = x.device()});
  backend(x.device()).softmax(out, rows, log);
  return d == last ? out : contiguous(transpose(out, d, last));
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }

// ---- indexing ---------------------------------------------------------------------------------

namespace {
// (outer, n, inner) around dim d of shape.
Shape around(const Shape& shape, int d, int64_t n) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= shape[i];
  for (int i = d + 1; i < shape.size(); ++i) inner *= shape[i];
  return Shape{outer, n, inner};
}

void check_index(const Tensor& x, const Tensor& index, const char* op) {
  MT_CHECK(index.dtype() == kInt64, op, ": index must be int64, got ", index.dtype());
  MT_CHECK(index.device() == x.device(), op, ": index is on ", index.device(), " but the input on ", x.device());
}
}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index(x, index, "index_select");
  MT_CHECK(index.dim() <= 1, "index_select: index must be 0-D or 1-D, got ", index.sizes());
  MT_CHECK(x.dim() > 0, "index_select: input must have at least 1 dim");
  const int d = wrap_dim(dim, x.dim(), "index_select");
  const int64_t k = index.numel();
  Shape out_shape = x.sizes();
  out_shape[d] = k;
  Tensor out = empty(out_shape, {.dtype = x.dtype(), .device = x.device()});
  backend(x.device()).index_select(view(out, around(out_shape, d, k)), view(contiguous(x), around(x.sizes(), d, x.sizes()[d])),
                                   reshape(index, Shape{k}));
  return out;
}

Tensor index_add_zeros(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src) {
  const int d = wrap_dim(dim, shape.size(), "index_add");
  const int64_t k = index.numel();
  Tensor out = zeros(shape, {.dtype = src.dtype(), .device = src.device()});
  backend(src.device()).index_add(view(out, around(shape, d, shape[d])), reshape(index, Shape{k}),
                                  view(contiguous(src), around(src.sizes(), d, k)));
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index(x, index, "gather");
  MT_CHECK(index.dim() == x.dim(), "gather: index ", index.sizes(), " must have as many dims as the input ",
           x.sizes());
  const int d = wrap_dim(dim, x.dim(), "gather");
  for (int i = 0; i < x.dim(); ++i)
    MT_CHECK(i == d || index.sizes()[i] == x.sizes()[i], "gather: index ", index.sizes(),
             " must match the input ", x.sizes(), " in every dim but ", d);
  if (x.dim() == 0) return clone(x);
  Tensor out = empty(index.sizes(), {.dtype = x.dtype(), .device = x.device()});
  const int64_t k = index.sizes()[d];
  backend(x.device()).gather(view(out, around(index.sizes(), d, k)), view(contiguous(x), around(x.sizes(), d, x.sizes()[d])),
                             view(contiguous(index), around(index.sizes(), d, k)));
  return out;
}

Tensor scatter_add_zeros(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = empty(shape, {.dtype = src.dtype(), .device = src.device()});
  if (shape.size() == 0) {
    copy_(out, src);
    return out;
  }
  const int d = wrap_dim(dim, shape.size(), "scatter_add");
  const int64_t k = index.sizes()[d];
  backend(src.device()).scatter_add_zeros(view(out, around(shape, d, shape[d])),
                                          view(contiguous(index), around(index.sizes(), d, k)),
                                          view(contiguous(src), around(src.sizes(), d, k)));
  return out;
}

// ---- random -----------------------------------------------------------------------------------

void uniform_(const Tensor& t, Generator& gen, double low, double high) {
  MT_CHECK(t.is_contiguous(), "uniform_: needs a contiguous tensor");
  MT_CHECK(low <= high, "uniform_: low ", low, " is above high ", high);
  backend(t.device()).uniform(t, gen, low, high);
  t.storage()->bump_version();
}

void normal_(const Tensor& t, Generator& gen, double mean, double std) {
  MT_CHECK(t.is_contiguous(), "normal_: needs a contiguous tensor");
  MT_CHECK(std >= 0, "normal_: std must be non-negative, got ", std);
  backend(t.device()).normal(t, gen, mean, std);
  t.storage()->bump_version();
}

}  // namespace mt::raw
