// CpuBackend::attention and attention_backward: scaled dot-product attention for one (batch, head)
// at a time, one query row at a time, without the (Tq, Tk) score matrix that the composition
// (matmul, mask, softmax, matmul: autograd/reference_ops.h) materialises per head.
//
// Forward, per query row i (formulas in tensor/backend.h): the row's scores go into a scratch row of
// Tk values, softmax'ed in place (max subtracted first, as in cpu_softmax.cpp), then out_i = Σ p_j v_j.
// lse_i = m + log Σ e^{s_j - m} is all the backward needs to rebuild p_ij = e^{s_ij - lse_i}.
// Backward, per query row i: D_i = dout_i·out_i, then one pass over j that adds to dq_i, dk_j and
// dv_j together (the CPU runs rows in order, so nothing races; the CUDA kernels split this into a
// pass over queries and one over keys instead).
//
// q, k, v (and dout) are read through their strides (unit stride in the last dim only), so the
// (B, H, T, d) head views of a fused (B, T, 3·C) qkv projection are used in place.
#include <cmath>
#include <vector>

#include "tensor/cpu/cpu_backend.h"

namespace mt {
namespace {

// Row (b, h, i) of a (B, H, T, d) tensor with a unit last stride.
template <typename T>
struct HeadRows {
  T* base;
  int64_t sb, sh, st;
  HeadRows(const Tensor& t) : base(cpu::data<T>(t)), sb(t.strides()[0]), sh(t.strides()[1]), st(t.strides()[2]) {}
  T* row(int64_t b, int64_t h, int64_t i) const { return base + b * sb + h * sh + i * st; }
};

template <typename T>
T dot(const T* a, const T* b, int64_t d) {
  T s = 0;
  for (int64_t c = 0; c < d; ++c) s += a[c] * b[c];
  return s;
}

void check_head_tensor(const char* op, const char* what, const Tensor& t, const Shape& want) {
  MT_CHECK(t.sizes() == want && t.strides()[3] == 1, op, ": CPU kernel needs ", what, " of shape ", want,
           " with a unit last stride, got ", t.sizes(), " with strides ", t.strides());
}

struct AttentionDims {
  int64_t B, H, Tq, Tk, d;
};

AttentionDims check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  MT_CHECK(q.dim() == 4, op, ": q must be (B, H, T, d), got ", q.sizes());
  const AttentionDims n{q.sizes()[0], q.sizes()[1], q.sizes()[2], k.sizes()[2], q.sizes()[3]};
  check_head_tensor(op, "q", q, q.sizes());
  check_head_tensor(op, "k", k, Shape{n.B, n.H, n.Tk, n.d});
  check_head_tensor(op, "v", v, Shape{n.B, n.H, n.Tk, n.d});
  return n;
}

// Keys query i attends to: [0, end).
int64_t key_end(int64_t i, const AttentionDims& n, const AttentionParams& p) {
  return p.causal ? std::min(i + 1, n.Tk) : n.Tk;
}

}  // namespace

void CpuBackend::attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionParams& params) {
  const AttentionDims n = check_attention("attention", q, k, v);
  const Shape lse_shape{n.B, n.H, n.Tq};
  MT_CHECK(cpu::is_contiguous(out) && out.sizes() == q.sizes() && cpu::is_contiguous(lse) && lse.sizes() == lse_shape,
           "attention: out and lse must be contiguous (B, H, Tq, d) and (B, H, Tq), got ", out.sizes(), " and ",
           lse.sizes());
  MT_DISPATCH_FLOAT(q.dtype(), "attention", [&]<typename T>() {
    const HeadRows<const T> qs(q), ks(k), vs(v);
    const HeadRows<T> os(out);
    T* l = cpu::data<T>(lse);
    const T scale = T(params.scale);
    std::vector<T> p(n.Tk);
    for (int64_t b = 0; b < n.B; ++b)
      for (int64_t h = 0; h < n.H; ++h)
        for (int64_t i = 0; i < n.Tq; ++i) {
          const T* qi = qs.row(b, h, i);
          const int64_t end = key_end(i, n, params);
          T m = -INFINITY;
          for (int64_t j = 0; j < end; ++j) {
            p[j] = scale * dot(qi, ks.row(b, h, j), n.d);
            m = (p[j] > m || p[j] != p[j]) ? p[j] : m;  // NaN propagates
          }
          T sum = 0;
          for (int64_t j = 0; j < end; ++j) sum += (p[j] = std::exp(p[j] - m));
          T* oi = os.row(b, h, i);
          std::fill(oi, oi + n.d, T(0));
          const T inv = T(1) / sum;
          for (int64_t j = 0; j < end; ++j) {
            const T* vj = vs.row(b, h, j);
            const T pj = p[j] * inv;
            for (int64_t c = 0; c < n.d; ++c) oi[c] += pj * vj[c];
          }
          l[(b * n.H + h) * n.Tq + i] = m + std::log(sum);
        }
  });
}

void CpuBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& lse, const AttentionParams& params) {
  const AttentionDims n = check_attention("attention_backward", q, k, v);
  check_head_tensor("attention_backward", "dout", dout, q.sizes());
  check_head_tensor("attention_backward", "out", out, q.sizes());
  MT_CHECK(cpu::is_contiguous(dq) && cpu::is_contiguous(dk) && cpu::is_contiguous(dv) && dq.sizes() == q.sizes() &&
               dk.sizes() == k.sizes() && dv.sizes() == v.sizes() && cpu::is_contiguous(lse),
           "attention_backward: dq, dk, dv must be contiguous and shaped like q, k, v");
  MT_DISPATCH_FLOAT(q.dtype(), "attention_backward", [&]<typename T>() {
    const HeadRows<const T> qs(q), ks(k), vs(v), os(out), gs(dout);
    const HeadRows<T> dqs(dq), dks(dk), dvs(dv);
    const T* l = cpu::data<const T>(lse);
    const T scale = T(params.scale);
    std::fill(dq.data_ptr<T>(), dq.data_ptr<T>() + dq.numel(), T(0));
    std::fill(dk.data_ptr<T>(), dk.data_ptr<T>() + dk.numel(), T(0));
    std::fill(dv.data_ptr<T>(), dv.data_ptr<T>() + dv.numel(), T(0));
    for (int64_t b = 0; b < n.B; ++b)
      for (int64_t h = 0; h < n.H; ++h)
        for (int64_t i = 0; i < n.Tq; ++i) {
          const T* qi = qs.row(b, h, i);
          const T* gi = gs.row(b, h, i);
          T* dqi = dqs.row(b, h, i);
          const T lse_i = l[(b * n.H + h) * n.Tq + i];
          const T D = dot(gi, os.row(b, h, i), n.d);
          const int64_t end = key_end(i, n, params);
          for (int64_t j = 0; j < end; ++j) {
            const T* kj = ks.row(b, h, j);
            const T* vj = vs.row(b, h, j);
            const T p = std::exp(scale * dot(qi, kj, n.d) - lse_i);
            const T ds = p * (dot(gi, vj, n.d) - D) * scale;  // scale folded in: dq, dk both need it
            T* dkj = dks.row(b, h, j);
            T* dvj = dvs.row(b, h, j);
            for (int64_t c = 0; c < n.d; ++c) {
              dqi[c] += ds * kj[c];
              dkj[c] += ds * qi[c];
              dvj[c] += p * gi[c];
            }
          }
        }
  });
}

}  // namespace mt
