// CudaBackend::attention and attention_backward: scaled dot-product attention (formulas in
// tensor/backend.h) without the (Tq, Tk) score matrix, like the CPU kernels
// (tensor/cpu/cpu_attention.cpp).
//
// One warp per query row (or, for dk/dv, per key row), grid-striding over rows. Each lane holds
// d/32 of the row's values in registers (head size d <= kMaxHeadDim), a dot product is a per-lane
// partial sum plus warp shuffles, and the softmax is the online one (Milakov & Gimelshein, 2018):
// per key j, with running max m and sum l,
//   m' = max(m, s_j),  l = l·e^{m-m'} + e^{s_j-m'},  acc = acc·e^{m-m'} + e^{s_j-m'}·v_j
// so one pass over the keys gives out_i = acc/l and lse_i = m + log l.
// The backward runs two kernels instead of atomics: one per query row (D_i = dout_i·out_i, dq_i),
// one per key row (dk_j, dv_j, looping over the queries that see key j), so each output row is
// written by one warp, in a fixed order.
//
// Not yet tiled: each warp reads every k_j and v_j row it needs from global memory (through the
// cache), i.e. once per query row, not once per tile of queries staged in shared memory as
// FlashAttention does (Dao et al., 2022). That is the next step for long contexts; at the preset's
// context (64) the rows stay in L2 and the kernel is bound by launch and shuffle latency.
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_loops.cuh"

namespace mt::cuda {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kPerLane = kMaxHeadDim / kWarpSize;

// Row (b, h, i) of a (B, H, T, d) tensor with a unit last stride.
struct HeadLayout {
  int64_t H, sb, sh, st;
  __device__ int64_t offset(int64_t bh, int64_t i) const { return (bh / H) * sb + (bh % H) * sh + i * st; }
};
HeadLayout layout(const Tensor& t) { return {t.sizes()[1], t.strides()[0], t.strides()[1], t.strides()[2]}; }

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int delta = kWarpSize / 2; delta > 0; delta /= 2) v += __shfl_xor_sync(0xffffffffu, v, delta);
  return v;
}

// A row of d values spread over the warp: lane l holds elements l, l + 32, ...
template <typename T>
struct LaneRow {
  T v[kPerLane];
  __device__ void load(const T* row, int64_t d, int lane) {
    for (int c = 0; c < kPerLane; ++c) v[c] = lane + c * kWarpSize < d ? row[lane + c * kWarpSize] : T(0);
  }
  __device__ void fill(T x) {
    for (int c = 0; c < kPerLane; ++c) v[c] = x;
  }
  __device__ T dot(const T* row, int64_t d, int lane) const {  // the whole warp's sum
    T s = 0;
    for (int c = 0; c < kPerLane; ++c)
      if (lane + c * kWarpSize < d) s += v[c] * row[lane + c * kWarpSize];
    return warp_sum(s);
  }
  __device__ void axpy(T a, const T* row, int64_t d, int lane) {  // v += a·row
    for (int c = 0; c < kPerLane; ++c)
      if (lane + c * kWarpSize < d) v[c] += a * row[lane + c * kWarpSize];
  }
  __device__ void store(T* row, int64_t d, int lane, T scale) const {
    for (int c = 0; c < kPerLane; ++c)
      if (lane + c * kWarpSize < d) row[lane + c * kWarpSize] = v[c] * scale;
  }
};

struct Dims {
  int64_t BH, Tq, Tk, d;
};

// out, lse: contiguous (B, H, Tq, d), (B, H, Tq)
template <typename T>
__global__ void attention_kernel(T* out, T* lse, const T* q, const T* k, const T* v, HeadLayout lq, HeadLayout lk,
                                 HeadLayout lv, Dims n, AttentionParams p) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = grid_threads() / kWarpSize;
  for (int64_t row = global_thread() / kWarpSize; row < n.BH * n.Tq; row += warps) {
    const int64_t bh = row / n.Tq, i = row % n.Tq;
    const int64_t end = p.causal ? min(i + 1, n.Tk) : n.Tk;
    LaneRow<T> qi, acc;
    qi.load(q + lq.offset(bh, i), n.d, lane);
    acc.fill(T(0));
    T m = -INFINITY, l = 0;
    for (int64_t j = 0; j < end; ++j) {
      const T s = T(p.scale) * qi.dot(k + lk.offset(bh, j), n.d, lane);
      const T m_new = (s > m || s != s) ? s : m;  // NaN propagates, as on the CPU
      const T correction = exp(m - m_new), pj = exp(s - m_new);
      l = l * correction + pj;
      for (int c = 0; c < kPerLane; ++c) acc.v[c] *= correction;
      acc.axpy(pj, v + lv.offset(bh, j), n.d, lane);
      m = m_new;
    }
    acc.store(out + row * n.d, n.d, lane, T(1) / l);
    if (lane == 0) lse[row] = m + ::log(l);
  }
}

// Per query row: D_i = dout_i·out_i (kept in `delta` for the key kernel) and
// dq_i = scale·Σ_j p_ij·(dout_i·v_j - D_i)·k_j.
template <typename T>
__global__ void attention_dq_kernel(T* dq, T* delta, const T* dout, const T* q, const T* k, const T* v, const T* out,
                                    const T* lse, HeadLayout lg, HeadLayout lq, HeadLayout lk, HeadLayout lv,
                                    HeadLayout lo, Dims n, AttentionParams p) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = grid_threads() / kWarpSize;
  for (int64_t row = global_thread() / kWarpSize; row < n.BH * n.Tq; row += warps) {
    const int64_t bh = row / n.Tq, i = row % n.Tq;
    const int64_t end = p.causal ? min(i + 1, n.Tk) : n.Tk;
    LaneRow<T> qi, gi, acc;
    qi.load(q + lq.offset(bh, i), n.d, lane);
    gi.load(dout + lg.offset(bh, i), n.d, lane);
    acc.fill(T(0));
    const T D = gi.dot(out + lo.offset(bh, i), n.d, lane), lse_i = lse[row];
    for (int64_t j = 0; j < end; ++j) {
      const T* kj = k + lk.offset(bh, j);
      const T pij = exp(T(p.scale) * qi.dot(kj, n.d, lane) - lse_i);
      const T ds = pij * (gi.dot(v + lv.offset(bh, j), n.d, lane) - D);
      acc.axpy(ds, kj, n.d, lane);
    }
    acc.store(dq + row * n.d, n.d, lane, T(p.scale));
    if (lane == 0) delta[row] = D;
  }
}

// Per key row j: dk_j = scale·Σ_i p_ij·(dout_i·v_j - D_i)·q_i,  dv_j = Σ_i p_ij·dout_i,
// over the queries i that see key j (all, or i >= j when causal).
template <typename T>
__global__ void attention_dkv_kernel(T* dk, T* dv, const T* delta, const T* dout, const T* q, const T* k, const T* v,
                                     const T* lse, HeadLayout lg, HeadLayout lq, HeadLayout lk, HeadLayout lv, Dims n,
                                     AttentionParams p) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t warps = grid_threads() / kWarpSize;
  for (int64_t row = global_thread() / kWarpSize; row < n.BH * n.Tk; row += warps) {
    const int64_t bh = row / n.Tk, j = row % n.Tk;
    LaneRow<T> kj, vj, acc_k, acc_v;
    kj.load(k + lk.offset(bh, j), n.d, lane);
    vj.load(v + lv.offset(bh, j), n.d, lane);
    acc_k.fill(T(0));
    acc_v.fill(T(0));
    for (int64_t i = p.causal ? j : 0; i < n.Tq; ++i) {
      const T* qi = q + lq.offset(bh, i);
      const T* gi = dout + lg.offset(bh, i);
      const int64_t r = bh * n.Tq + i;
      const T pij = exp(T(p.scale) * kj.dot(qi, n.d, lane) - lse[r]);
      const T ds = pij * (vj.dot(gi, n.d, lane) - delta[r]);
      acc_k.axpy(ds, qi, n.d, lane);
      acc_v.axpy(pij, gi, n.d, lane);
    }
    acc_k.store(dk + row * n.d, n.d, lane, T(p.scale));
    acc_v.store(dv + row * n.d, n.d, lane, T(1));
  }
}

Dims check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  const Dims n{q.sizes()[0] * q.sizes()[1], q.sizes()[2], k.sizes()[2], q.sizes()[3]};
  MT_CHECK(n.d <= kMaxHeadDim, op, ": the CUDA kernel holds a head in registers and takes head sizes up to ",
           kMaxHeadDim, ", got ", n.d);
  for (const Tensor* t : {&q, &k, &v})
    MT_CHECK(t->dim() == 4 && t->strides()[3] == 1, op, ": CUDA kernel needs (B, H, T, d) operands with a unit last "
             "stride, got ", t->sizes(), " with strides ", t->strides());
  return n;
}

unsigned warp_per_row_blocks(int64_t rows, int multiprocessors) { return row_geometry(rows, 1, multiprocessors).blocks; }

}  // namespace

void CudaBackend::attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionParams& params) {
  const Dims n = check_attention("attention", q, k, v);
  MT_CHECK(is_dense(out) && is_dense(lse), "attention: out and lse must be contiguous");
  if (n.BH * n.Tq == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_FLOAT(q.dtype(), "attention", [&]<typename T>() {
    attention_kernel<T><<<warp_per_row_blocks(n.BH * n.Tq, multiprocessors_), kThreadsPerBlock, 0, stream_>>>(
        static_cast<T*>(out.raw_data()), static_cast<T*>(lse.raw_data()), static_cast<const T*>(q.raw_data()),
        static_cast<const T*>(k.raw_data()), static_cast<const T*>(v.raw_data()), layout(q), layout(k), layout(v), n,
        params);
    MT_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                     const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                     const Tensor& lse, const AttentionParams& params) {
  const Dims n = check_attention("attention_backward", q, k, v);
  MT_CHECK(is_dense(dq) && is_dense(dk) && is_dense(dv) && is_dense(lse) && dout.strides()[3] == 1 &&
               out.strides()[3] == 1,
           "attention_backward: dq, dk, dv and lse must be contiguous, dout and out need a unit last stride");
  if (n.BH * (n.Tq + n.Tk) == 0) return;
  const Tensor delta = empty(lse.sizes(), {.dtype = q.dtype(), .device = q.device()});  // D_i, (B, H, Tq)
  DeviceGuard guard(device_);
  MT_DISPATCH_FLOAT(q.dtype(), "attention_backward", [&]<typename T>() {
    const T *g = static_cast<const T*>(dout.raw_data()), *qs = static_cast<const T*>(q.raw_data());
    const T *ks = static_cast<const T*>(k.raw_data()), *vs = static_cast<const T*>(v.raw_data());
    const T* l = static_cast<const T*>(lse.raw_data());
    T* d = static_cast<T*>(delta.raw_data());
    attention_dq_kernel<T><<<warp_per_row_blocks(n.BH * n.Tq, multiprocessors_), kThreadsPerBlock, 0, stream_>>>(
        static_cast<T*>(dq.raw_data()), d, g, qs, ks, vs, static_cast<const T*>(out.raw_data()), l, layout(dout),
        layout(q), layout(k), layout(v), layout(out), n, params);
    MT_CUDA_CHECK_LAUNCH();
    attention_dkv_kernel<T><<<warp_per_row_blocks(n.BH * n.Tk, multiprocessors_), kThreadsPerBlock, 0, stream_>>>(
        static_cast<T*>(dk.raw_data()), static_cast<T*>(dv.raw_data()), d, g, qs, ks, vs, l, layout(dout), layout(q),
        layout(k), layout(v), n, params);
    MT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mt::cuda
