// CudaBackend::attention and attention_backward: scaled dot-product attention (formulas in
// tensor/backend.h) without the (Tq, Tk) score matrix, like the CPU kernels
// (tensor/cpu/cpu_attention.cpp), tiled as FlashAttention is (Dao et al., 2022, "FlashAttention:
// Fast and Memory-Efficient Exact Attention with IO-Awareness"): Note [Attention tiles].
//
// The softmax is the online one (Milakov & Gimelshein, 2018, "Online normalizer calculation for
// softmax"): per tile of keys, with running max m and sum l,
//   m' = max(m, max_j s_j),  l = l·e^{m-m'} + Σ_j e^{s_j-m'},  acc = acc·e^{m-m'} + Σ_j e^{s_j-m'}·v_j
// so one pass over the keys gives out_i = acc/l and lse_i = m + log l, at any context length: the
// kernels hold tiles, never a row of scores.
// The backward recomputes p_ij = exp(s_ij - lse_i) from the saved lse and runs two kernels instead
// of atomics: one per tile of query rows (D_i = dout_i·out_i, dq_i), one per tile of key rows
// (dk_j, dv_j, looping over the query tiles that see key j), so each output row is written by one
// warp, in a fixed order: the same bits on every run.
// bfloat16 and float16: Note [16-bit attention through float32 copies].
#include "tensor/cuda/cuda_device.h"
#include "tensor/cuda/cuda_loops.cuh"

namespace mt::cuda {
namespace {

// Note [Attention tiles]: a block of 8 warps takes a tile of kRows x 8 query rows (key rows, in
// the dk/dv kernel) of one (batch, head); each warp holds its rows in registers, lane l holding
// elements l, l + 32, ... (P = ceil(d / 32) per lane, a template parameter so that d <= 64 keeps
// two registers per row, not kMaxHeadDim / 32). The block then walks the other side in tiles of
// kTile = 32 rows, staged in shared memory once for all the block's rows:
//   - 32 rows per tile, one per lane: a tile's 32 dot products q_i·k_j are per-lane partial sums
//     over the lane's elements, then one "transposed" butterfly (transpose_sum: 31 shuffles, not
//     32 x 5) leaves s_ij in lane j; the softmax's exponentials are then one per lane, and the
//     running max one warp reduction per tile, not per key;
//   - the weights p_ij go through shared memory (one __syncwarp) to every lane, which adds
//     p_ij·v_j into its elements of acc;
//   - staged K and V (Q and dout in the dk/dv kernel) are 2 x 32 x 32P values: 16 KiB for d = 64
//     in float32. Heads whose tiles would pass kStageBytes (d > 128 in float32, d > 64 in float64)
//     read the rows from global memory (L2) instead: the tiling and the arithmetic are the same.
//   - kRows rows per warp (4 for d <= 64, 32 query rows per block) is the reuse of a staged tile:
//     each K/V value loaded from L2 serves 32 queries, for 2 or 3 x P x kRows row values in
//     registers per thread (q, acc, and dout in the backward). ptxas -v for sm_90: no local memory
//     for heads up to 128 in float32 and 64 in float64; larger heads spill in the backward. At
//     d = 64 in float32 the forward takes 110 registers (2 blocks per multiprocessor), the backward
//     168 (1 block): kRows is the first knob to try on a GPU if attention_ms misses its target.
// Each (query tile, key tile) pair is visited once, so K and V are read from L2 Tq / 32 times, not
// Tq times as a warp per query row reading its keys alone would. Key tiles past a row's last
// (causal) key are skipped whole, and so are query tiles before a key row's first.
constexpr int kMaxHeadDim = 256;
constexpr int kTile = kWarpSize;                      // rows of the walked side per tile: one per lane
constexpr int kWarps = kThreadsPerBlock / kWarpSize;  // 8
constexpr size_t kStageBytes = 40 * 1024;             // under the 48 KiB of static shared memory

template <typename T, int P>
constexpr bool kStaged = 2 * kTile * kWarpSize * P * sizeof(T) <= kStageBytes;
template <int P>
constexpr int kRows = P <= 2 ? 4 : 2;  // rows per warp
template <int P>
constexpr int64_t kBlockRows = kWarps * kRows<P>;

// Row (b, h, i) of a (B, H, T, d) tensor with a unit last stride: base(b·H + h) + i·st.
struct HeadLayout {
  int64_t H, sb, sh, st;
  __device__ int64_t base(int64_t bh) const { return (bh / H) * sb + (bh % H) * sh; }
};
HeadLayout layout(const Tensor& t) { return {t.sizes()[1], t.strides()[0], t.strides()[1], t.strides()[2]}; }

struct Dims {
  int64_t BH, Tq, Tk, d;
};

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int delta = kWarpSize / 2; delta > 0; delta /= 2) v += __shfl_xor_sync(0xffffffffu, v, delta);
  return v;
}
template <typename T>
__device__ inline T max_nan(T a, T b) { return (a > b || a != a) ? a : b; }  // NaN propagates, as on the CPU
template <typename T>
__device__ inline T warp_max(T v) {
  for (int delta = kWarpSize / 2; delta > 0; delta /= 2) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, delta));
  return v;
}

// One step of transpose_sum: the lanes with bit W keep the upper W of their sums and send the lower
// W to their partner (lane ^ W), which does the opposite. W is a template parameter so that every
// loop has a constant trip count and unrolls: v then lives in registers (an index the compiler
// cannot resolve, or `upper ? v[i] : v[i + W]` as a select of addresses, puts v in local memory).
template <int W, typename T>
__device__ inline void transpose_step(T (&v)[kWarpSize], int lane) {
  const bool upper = (lane & W) != 0;
#pragma unroll
  for (int i = 0; i < W; ++i) {
    const T lo = v[i], hi = v[i + W];
    v[i] = (upper ? hi : lo) + __shfl_xor_sync(0xffffffffu, upper ? lo : hi, W);
  }
}

// v[j] is this lane's part of sum j (j < 32); returns the whole warp's sum number `lane`: after
// 16 + 8 + 4 + 2 + 1 shuffles lane l holds sum l.
template <typename T>
__device__ inline T transpose_sum(T (&v)[kWarpSize], int lane) {
  static_assert(kWarpSize == 32, "transpose_sum's steps are a 32-lane warp's");
  transpose_step<16>(v, lane);
  transpose_step<8>(v, lane);
  transpose_step<4>(v, lane);
  transpose_step<2>(v, lane);
  transpose_step<1>(v, lane);
  return v[0];
}

// A head row in one warp's registers: lane holds elements lane + 32c, c < P (0 past d).
template <typename T, int P>
struct LaneRow {
  T v[P];
  __device__ void load(const T* row, int64_t d, int lane) {
#pragma unroll
    for (int c = 0; c < P; ++c) v[c] = lane + c * kWarpSize < d ? row[lane + c * kWarpSize] : T(0);
  }
  __device__ void fill(T x) {
#pragma unroll
    for (int c = 0; c < P; ++c) v[c] = x;
  }
  __device__ T dot_part(const T* row, int64_t d, int lane) const {  // this lane's part of v·row
    T s = 0;
#pragma unroll
    for (int c = 0; c < P; ++c)
      if (lane + c * kWarpSize < d) s += v[c] * row[lane + c * kWarpSize];
    return s;
  }
  __device__ void axpy(T a, const T* row, int64_t d, int lane) {  // v += a·row
#pragma unroll
    for (int c = 0; c < P; ++c)
      if (lane + c * kWarpSize < d) v[c] += a * row[lane + c * kWarpSize];
  }
  __device__ void store(T* row, int64_t d, int lane, T scale) const {
#pragma unroll
    for (int c = 0; c < P; ++c)
      if (lane + c * kWarpSize < d) row[lane + c * kWarpSize] = v[c] * scale;
  }
};

// The walked side's tile: rows r0 .. r0 + 31 of one head (rows past `rows` are zeros in shared
// memory, or clamped to the last row when read in place; callers give them zero weight).
template <typename T, int P>
struct Tile {
  static constexpr int D = kWarpSize * P;
  T (*stage)[D];  // staged rows, or nullptr: read in place
  const T* head;  // the head's row 0
  int64_t st, rows, r0;
  __device__ const T* row(int j) const {
    if (stage != nullptr) return stage[j];
    return head + min(r0 + j, rows - 1) * st;
  }
  // Every warp of the block copies rows warp, warp + 8, ... into `stage` (between two __syncthreads).
  __device__ void fill(int64_t d, int warp, int lane) const {
    for (int j = warp; j < kTile; j += kWarps)
#pragma unroll
      for (int c = 0; c < P; ++c) {
        const int64_t col = lane + c * kWarpSize;
        stage[j][col] = r0 + j < rows && col < d ? head[(r0 + j) * st + col] : T(0);
      }
  }
};

// Lane l's part of the 32 dot products a·tile_j, summed across the warp: s_j in lane j.
template <typename T, int P>
__device__ inline T tile_dots(const LaneRow<T, P>& a, const Tile<T, P>& tile, int64_t d, int lane) {
  T part[kWarpSize];
#pragma unroll
  for (int j = 0; j < kWarpSize; ++j) part[j] = a.dot_part(tile.row(j), d, lane);
  return transpose_sum(part, lane);
}

// out, lse: contiguous (B, H, Tq, d), (B, H, Tq). Block: kBlockRows query rows of one head.
template <typename T, int P>
__global__ void attention_kernel(T* out, T* lse, const T* q, const T* k, const T* v, HeadLayout lq, HeadLayout lk,
                                 HeadLayout lv, Dims n, AttentionParams p, int64_t q_tiles) {
  constexpr int R = kRows<P>, D = kWarpSize * P;
  constexpr bool kStage = kStaged<T, P>;
  __shared__ T ks[kStage ? kTile : 1][D], vs[kStage ? kTile : 1][D], weights[kWarps][kTile];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const T scale = T(p.scale);
  for (int64_t blk = blockIdx.x; blk < n.BH * q_tiles; blk += gridDim.x) {
    const int64_t bh = blk / q_tiles, i0 = (blk % q_tiles) * kBlockRows<P> + warp * R;
    LaneRow<T, P> qr[R], acc[R];
    T m[R], l[R];  // l: this lane's part of the running sum (the correction is the same for every lane)
    int64_t end[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t i = i0 + r;
      end[r] = i < n.Tq ? (p.causal ? min(i + 1, n.Tk) : n.Tk) : 0;
      if (i < n.Tq) qr[r].load(q + lq.base(bh) + i * lq.st, n.d, lane);
      acc[r].fill(T(0));
      m[r] = -INFINITY, l[r] = 0;
    }
    const int64_t first = (blk % q_tiles) * kBlockRows<P>;
    const int64_t keys = p.causal ? min(first + kBlockRows<P>, n.Tk) : n.Tk;  // the block's last key + 1
    for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
      const Tile<T, P> kt{kStage ? ks : nullptr, k + lk.base(bh), lk.st, n.Tk, j0};
      const Tile<T, P> vt{kStage ? vs : nullptr, v + lv.base(bh), lv.st, n.Tk, j0};
      if constexpr (kStage) {
        __syncthreads();  // the previous tile is no longer read
        kt.fill(n.d, warp, lane);
        vt.fill(n.d, warp, lane);
        __syncthreads();
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (j0 >= end[r]) continue;  // the whole warp: end[r] is the row's
        T s = scale * tile_dots(qr[r], kt, n.d, lane);
        if (j0 + lane >= end[r]) s = -INFINITY;
        const T m_new = max_nan(m[r], warp_max(s));
        const T correction = exp(m[r] - m_new), pj = exp(s - m_new);
        l[r] = l[r] * correction + pj;
        for (int c = 0; c < P; ++c) acc[r].v[c] *= correction;
        weights[warp][lane] = pj;
        __syncwarp();
        const int64_t count = min(int64_t{kTile}, end[r] - j0);
        for (int j = 0; j < count; ++j) acc[r].axpy(weights[warp][j], vt.row(j), n.d, lane);
        __syncwarp();  // weights is rewritten by the next row
        m[r] = m_new;
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (i0 + r >= n.Tq) continue;
      const int64_t row = bh * n.Tq + i0 + r;
      const T sum = warp_sum(l[r]);
      acc[r].store(out + row * n.d, n.d, lane, T(1) / sum);
      if (lane == 0) lse[row] = m[r] + ::log(sum);
    }
  }
}

// Per query row: D_i = dout_i·out_i (kept in `delta` for the key kernel) and
// dq_i = scale·Σ_j p_ij·(dout_i·v_j - D_i)·k_j. Block: kBlockRows query rows of one head.
template <typename T, int P>
__global__ void attention_dq_kernel(T* dq, T* delta, const T* dout, const T* q, const T* k, const T* v, const T* out,
                                    const T* lse, HeadLayout lg, HeadLayout lq, HeadLayout lk, HeadLayout lv,
                                    HeadLayout lo, Dims n, AttentionParams p, int64_t q_tiles) {
  constexpr int R = kRows<P>, D = kWarpSize * P;
  constexpr bool kStage = kStaged<T, P>;
  __shared__ T ks[kStage ? kTile : 1][D], vs[kStage ? kTile : 1][D], weights[kWarps][kTile];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const T scale = T(p.scale);
  for (int64_t blk = blockIdx.x; blk < n.BH * q_tiles; blk += gridDim.x) {
    const int64_t bh = blk / q_tiles, i0 = (blk % q_tiles) * kBlockRows<P> + warp * R;
    LaneRow<T, P> qr[R], gr[R], acc[R];
    T D_i[R], lse_i[R];
    int64_t end[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t i = i0 + r;
      end[r] = i < n.Tq ? (p.causal ? min(i + 1, n.Tk) : n.Tk) : 0;
      acc[r].fill(T(0));
      D_i[r] = lse_i[r] = 0;
      if (i >= n.Tq) continue;
      qr[r].load(q + lq.base(bh) + i * lq.st, n.d, lane);
      gr[r].load(dout + lg.base(bh) + i * lg.st, n.d, lane);
      D_i[r] = warp_sum(gr[r].dot_part(out + lo.base(bh) + i * lo.st, n.d, lane));
      lse_i[r] = lse[bh * n.Tq + i];
    }
    const int64_t first = (blk % q_tiles) * kBlockRows<P>;
    const int64_t keys = p.causal ? min(first + kBlockRows<P>, n.Tk) : n.Tk;
    for (int64_t j0 = 0; j0 < keys; j0 += kTile) {
      const Tile<T, P> kt{kStage ? ks : nullptr, k + lk.base(bh), lk.st, n.Tk, j0};
      const Tile<T, P> vt{kStage ? vs : nullptr, v + lv.base(bh), lv.st, n.Tk, j0};
      if constexpr (kStage) {
        __syncthreads();
        kt.fill(n.d, warp, lane);
        vt.fill(n.d, warp, lane);
        __syncthreads();
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (j0 >= end[r]) continue;
        const T s = scale * tile_dots(qr[r], kt, n.d, lane);
        const T dp = tile_dots(gr[r], vt, n.d, lane);
        weights[warp][lane] = j0 + lane < end[r] ? exp(s - lse_i[r]) * (dp - D_i[r]) : T(0);  // ds_ij
        __syncwarp();
        const int64_t count = min(int64_t{kTile}, end[r] - j0);
        for (int j = 0; j < count; ++j) acc[r].axpy(weights[warp][j], kt.row(j), n.d, lane);
        __syncwarp();
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (i0 + r >= n.Tq) continue;
      const int64_t row = bh * n.Tq + i0 + r;
      acc[r].store(dq + row * n.d, n.d, lane, scale);
      if (lane == 0) delta[row] = D_i[r];
    }
  }
}

// Per key row j: dk_j = scale·Σ_i p_ij·(dout_i·v_j - D_i)·q_i,  dv_j = Σ_i p_ij·dout_i, over the
// queries i that see key j (all, or i >= j when causal). Block: kBlockRows key rows of one head,
// walking tiles of query rows (q and dout staged, their lse and D beside them).
template <typename T, int P>
__global__ void attention_dkv_kernel(T* dk, T* dv, const T* delta, const T* dout, const T* q, const T* k, const T* v,
                                     const T* lse, HeadLayout lg, HeadLayout lq, HeadLayout lk, HeadLayout lv, Dims n,
                                     AttentionParams p, int64_t k_tiles) {
  constexpr int R = kRows<P>, D = kWarpSize * P;
  constexpr bool kStage = kStaged<T, P>;
  __shared__ T qs[kStage ? kTile : 1][D], gs[kStage ? kTile : 1][D];
  __shared__ T probs[kWarps][kTile], grads[kWarps][kTile];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const T scale = T(p.scale);
  for (int64_t blk = blockIdx.x; blk < n.BH * k_tiles; blk += gridDim.x) {
    const int64_t bh = blk / k_tiles, first = (blk % k_tiles) * kBlockRows<P>, j0 = first + warp * R;
    LaneRow<T, P> kr[R], vr[R], acc_k[R], acc_v[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      acc_k[r].fill(T(0));
      acc_v[r].fill(T(0));
      if (j0 + r >= n.Tk) continue;
      kr[r].load(k + lk.base(bh) + (j0 + r) * lk.st, n.d, lane);
      vr[r].load(v + lv.base(bh) + (j0 + r) * lv.st, n.d, lane);
    }
    // Causal: key j is seen by queries i >= j, so the block starts at the tile holding its first key.
    for (int64_t t0 = p.causal ? first / kTile * kTile : 0; t0 < n.Tq; t0 += kTile) {
      const Tile<T, P> qt{kStage ? qs : nullptr, q + lq.base(bh), lq.st, n.Tq, t0};
      const Tile<T, P> gt{kStage ? gs : nullptr, dout + lg.base(bh), lg.st, n.Tq, t0};
      if constexpr (kStage) {
        __syncthreads();
        qt.fill(n.d, warp, lane);
        gt.fill(n.d, warp, lane);
        __syncthreads();
      }
      const int64_t i = t0 + lane;  // this lane's query row
      const T lse_i = i < n.Tq ? lse[bh * n.Tq + i] : T(0), D_i = i < n.Tq ? delta[bh * n.Tq + i] : T(0);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int64_t j = j0 + r;
        if (j >= n.Tk || (p.causal && t0 + kTile <= j)) continue;  // no query of this tile sees key j
        const T s = scale * tile_dots(kr[r], qt, n.d, lane);
        const T dp = tile_dots(vr[r], gt, n.d, lane);
        const bool seen = i < n.Tq && (!p.causal || i >= j);
        const T pij = seen ? exp(s - lse_i) : T(0);
        probs[warp][lane] = pij;
        grads[warp][lane] = seen ? pij * (dp - D_i) : T(0);
        __syncwarp();
        const int64_t count = min(int64_t{kTile}, n.Tq - t0);
        for (int c = 0; c < count; ++c) {
          acc_k[r].axpy(grads[warp][c], qt.row(c), n.d, lane);
          acc_v[r].axpy(probs[warp][c], gt.row(c), n.d, lane);
        }
        __syncwarp();
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (j0 + r >= n.Tk) continue;
      const int64_t row = bh * n.Tk + j0 + r;
      acc_k[r].store(dk + row * n.d, n.d, lane, scale);
      acc_v[r].store(dv + row * n.d, n.d, lane, T(1));
    }
  }
}

// Calls fn.template operator()<P>() with P = values per lane for head size d: 1, 2, 4 or 8.
template <typename F>
void with_lanes(int64_t d, F&& fn) {
  if (d <= kWarpSize) return fn.template operator()<1>();
  if (d <= 2 * kWarpSize) return fn.template operator()<2>();
  if (d <= 4 * kWarpSize) return fn.template operator()<4>();
  return fn.template operator()<8>();
}

// Blocks of a grid over BH x tiles (grid-striding past 2^31 - 1, which no real tensor reaches).
unsigned tile_blocks(int64_t count) { return static_cast<unsigned>(std::clamp<int64_t>(count, 1, INT32_MAX)); }

Dims check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  const Dims n{q.sizes()[0] * q.sizes()[1], q.sizes()[2], k.sizes()[2], q.sizes()[3]};
  MT_CHECK(n.d <= kMaxHeadDim, op, ": the CUDA kernel holds a head in registers and takes head sizes up to ",
           kMaxHeadDim, ", got ", n.d);
  for (const Tensor* t : {&q, &k, &v})
    MT_CHECK(t->dim() == 4 && t->strides()[3] == 1, op, ": CUDA kernel needs (B, H, T, d) operands with a unit last "
             "stride, got ", t->sizes(), " with strides ", t->strides());
  return n;
}

// Note [16-bit attention through float32 copies]: for bfloat16 and float16 operands the backend
// widens q, k, v (and dout, out in the backward) into float32 tensors, runs the float32 kernels and
// rounds out, dq, dk, dv into their 16-bit tensors once; lse is float32 already (the raw op makes
// it so: a logsumexp rounded to 16 bits would move every weight p = e^{s - lse} the backward
// rebuilds by up to 2^-8). Every sum is float32, as Note [Low-precision compute type] asks, at the
// cost of the copies (twice the operands' bytes, for as long as the call) where a kernel reading
// 16-bit tiles would need none: the next step for this file, measured with attention_ms.
Tensor widened(CudaBackend& be, const Tensor& t) {
  Tensor wide = empty(t.sizes(), {.dtype = kFloat32, .device = t.device()});
  be.copy_on_device(wide, t);
  return wide;
}

}  // namespace

void CudaBackend::attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                            const AttentionParams& params) {
  if (is_low_precision(q.dtype())) {  // Note [16-bit attention through float32 copies]
    MT_CHECK(lse.dtype() == kFloat32, "attention: ", q.dtype(), " operands need a float32 lse, got ", lse.dtype());
    const Tensor wide_out = empty(out.sizes(), {.dtype = kFloat32, .device = out.device()});
    attention(wide_out, lse, widened(*this, q), widened(*this, k), widened(*this, v), params);
    copy_on_device(out, wide_out);
    return;
  }
  const Dims n = check_attention("attention", q, k, v);
  MT_CHECK(is_dense(out) && is_dense(lse), "attention: out and lse must be contiguous");
  if (n.BH * n.Tq == 0) return;
  DeviceGuard guard(device_);
  MT_DISPATCH_FLOAT(q.dtype(), "attention", [&]<typename T>() {
    with_lanes(n.d, [&]<int P>() {
      const int64_t tiles = (n.Tq + kBlockRows<P> - 1) / kBlockRows<P>;
      attention_kernel<T, P><<<tile_blocks(n.BH * tiles), kThreadsPerBlock, 0, stream_>>>(
          static_cast<T*>(out.raw_data()), static_cast<T*>(lse.raw_data()), static_cast<const T*>(q.raw_data()),
          static_cast<const T*>(k.raw_data()), static_cast<const T*>(v.raw_data()), layout(q), layout(k), layout(v),
          n, params, tiles);
      MT_CUDA_CHECK_LAUNCH();
    });
  });
}

void CudaBackend::attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                                     const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                     const Tensor& lse, const AttentionParams& params) {
  if (is_low_precision(q.dtype())) {  // Note [16-bit attention through float32 copies]
    MT_CHECK(lse.dtype() == kFloat32, "attention_backward: ", q.dtype(), " operands need a float32 lse, got ",
             lse.dtype());
    const TensorOptions wide{.dtype = kFloat32, .device = q.device()};
    const Tensor wdq = empty(dq.sizes(), wide), wdk = empty(dk.sizes(), wide), wdv = empty(dv.sizes(), wide);
    attention_backward(wdq, wdk, wdv, widened(*this, dout), widened(*this, q), widened(*this, k), widened(*this, v),
                       widened(*this, out), lse, params);
    copy_on_device(dq, wdq);
    copy_on_device(dk, wdk);
    copy_on_device(dv, wdv);
    return;
  }
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
    with_lanes(n.d, [&]<int P>() {
      const int64_t q_tiles = (n.Tq + kBlockRows<P> - 1) / kBlockRows<P>;
      const int64_t k_tiles = (n.Tk + kBlockRows<P> - 1) / kBlockRows<P>;
      attention_dq_kernel<T, P><<<tile_blocks(n.BH * q_tiles), kThreadsPerBlock, 0, stream_>>>(
          static_cast<T*>(dq.raw_data()), d, g, qs, ks, vs, static_cast<const T*>(out.raw_data()), l, layout(dout),
          layout(q), layout(k), layout(v), layout(out), n, params, q_tiles);
      MT_CUDA_CHECK_LAUNCH();
      attention_dkv_kernel<T, P><<<tile_blocks(n.BH * k_tiles), kThreadsPerBlock, 0, stream_>>>(
          static_cast<T*>(dk.raw_data()), static_cast<T*>(dv.raw_data()), d, g, qs, ks, vs, l, layout(dout),
          layout(q), layout(k), layout(v), n, params, k_tiles);
      MT_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace mt::cuda
