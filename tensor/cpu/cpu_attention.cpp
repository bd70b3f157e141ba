// CpuBackend::attention and attention_backward: scaled dot-product attention one (batch, head) at
// a time, the heads split across the intra-op threads (tensor/parallel.h). Formulas: tensor/backend.h.
//
// Each head's products are register-tiled small GEMMs (cpu::small_gemm, Note [Attention's products
// in registers], tensor/cpu/small_gemm.cpp) on the operands in place: q, k, v are read through
// their row strides (unit stride in the last dim), so the (B, H, T, d) head views of a fused qkv
// projection are not copied. The one exception is Kᵀ (and Vᵀ in the backward), transposed into a
// (d, Tk) scratch of the thread's, since small_gemm reads its right operand row by row. The
// float32 softmax runs in whole vectors of 8 lanes, its exponentials too (Note [Softmax rows in
// whole vectors]; Note [Vectorised float exp], tensor/cpu/vec_exp.h), a block's rows side by side
// (Note [Softmax rows side by side]).
// Nothing of size (Tq, Tk) is kept after the call: the forward saves only
// lse_i = m_i + log Σ_j e^{s_ij - m_i}, and the backward rebuilds p_ij = e^{s_ij - lse_i} from it.
// The composition (autograd/detail/reference_ops.h) instead keeps the whole (B, H, Tq, Tk) probability
// tensor for its backward, and makes a temporary of that size for each of its ops.
//
// The causal mask also skips work: Note [Causal row blocks].
//   forward, per head:   S = scale·Q·Kᵀ;  P = softmax over j < end(i);  O = P·V
//   backward, per head:  P from S and lse;  dP = dO·Vᵀ;  D_i = dO_i·O_i;  dS = P∘(dP - D)·scale
//                        dQ = dS·K;  dK = dSᵀ·Q;  dV = Pᵀ·dO
// with end(i) = i + 1 when causal (top-left aligned), else Tk. Masked entries of P are exactly 0.
//
// Note [Low-precision attention]: bfloat16 and float16 heads are computed in float32 (Note
// [Low-precision compute type]): each head's q, k, v (and dout, out) are widened into float32
// (T, d) buffers of the thread's, the float32 kernel runs on them, and out, dq, dk, dv are rounded
// once when the head is done. The scores, softmax and lse stay float32 throughout; lse is a float32
// tensor (raw_transformer.cpp makes it so), since the backward's p = e^{s - lse} would lose its
// digits to a 16-bit lse. For the same reason the backward's D_i = dO_i·O_i is taken as
// Σ_j p_ij·dp_ij from its float32 p and dp, not from the saved out, which was rounded to 16 bits:
// ds = p·(dp - D) cancels, and the rounded out put dq and dk more than one ulp off the float32
// gradients. Only one head's operands are ever widened, never a whole tensor.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/small_gemm.h"
#include "tensor/cpu/vec_exp.h"

namespace mt {
namespace {

struct AttentionDims {
  int64_t B, H, Tq, Tk, d;
};

// A (rows, d) head: row i at p + i·ld, unit stride along the row.
template <typename C>
struct Head {
  C* p;
  int64_t ld;
  C* row(int64_t i) const { return p + i * ld; }
};

void check_head_tensor(const char* op, const char* what, const Tensor& t, const Shape& want) {
  MT_CHECK(t.sizes() == want && t.strides()[3] == 1, op, ": CPU kernel needs ", what, " of shape ", want,
           " with a unit last stride, got ", t.sizes(), " with strides ", t.strides());
}

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

// Note [Causal row blocks]: with a causal mask, queries [first, first + kCausalBlock) see only keys
// [0, first + kCausalBlock), so each block of query rows multiplies against that prefix of K and V
// alone: the products skip most of the masked upper triangle (at T = 64 in blocks of 8, 7/16 of the
// full products' work). The backward's dK and dV go the other way, by blocks of kCausalBlock keys:
// keys [first, first + kCausalBlock) are seen by queries [first, Tq) only, so their sums over the
// queries start there. A block's columns past a row's end(i) are computed and then set to 0, so
// every entry a key block reads is a row's probability or exactly 0. kCausalBlock is a multiple of
// small_gemm's vector length (8 floats, 4 doubles): the prefixes end on whole vectors. Without a
// mask there is one block of all rows and all keys.
constexpr int64_t kCausalBlock = 8;
struct Block {
  int64_t first, count, others;  // rows (keys) [first, first + count), with their keys [0, others) (rows [others, Tq))
};
// Blocks of query rows: each with its keys [0, others).
std::vector<Block> row_blocks(const AttentionDims& n, const AttentionParams& p) {
  if (!p.causal) return {{0, n.Tq, n.Tk}};
  std::vector<Block> blocks;
  for (int64_t first = 0; first < n.Tq; first += kCausalBlock)
    blocks.push_back({first, std::min(kCausalBlock, n.Tq - first), std::min(first + kCausalBlock, n.Tk)});
  return blocks;
}
// Blocks of keys: each seen by the rows [others, Tq), all rows when not causal.
std::vector<Block> key_blocks(const AttentionDims& n, const AttentionParams& p) {
  if (!p.causal) return {{0, n.Tk, 0}};
  std::vector<Block> blocks;
  for (int64_t first = 0; first < n.Tk; first += kCausalBlock)
    blocks.push_back({first, std::min(kCausalBlock, n.Tk - first), std::min(first, n.Tq)});
  return blocks;
}

// Note [Softmax rows in whole vectors]: at d = 32 a row's softmax costs about what its share of
// the two forward products does (a vector exp is some 30 instructions per 8 scores, the products 8
// FMAs), so its loops matter: 8192 rows a layer at the preset's sizes. A causal row i ends at key
// i + 1, mostly inside a vector; scalar loops for the last i mod 8 keys of each row and a pass to
// zero the masked ones made the forward kernel about 12 % slower (bench_transformer,
// attention_kernel_forward_us). So the float32 rows run in whole vectors to the block's width, a
// lane past end(i) set to -inf before the max and the exponential (e^-inf = 0, exactly the masked
// probability) and its gradient to 0; the lanes are reduced in halving rounds. float64 (gradcheck,
// the 1e-13 comparisons) keeps the plain loops and std::exp.

// The lanes' max, sum, and whether any is set, in three rounds of halving (a shuffle and an op
// each) where vec::lane_sum adds the 8 lanes one after another.
cpu::vec::F8 swap_halves(cpu::vec::F8 v, int width) {
  using cpu::vec::F8;
  if (width == 4) return __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3);
  if (width == 2) return __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5);
  return __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6);
}
float lane_max(cpu::vec::F8 v) {
  for (const int width : {4, 2, 1}) {
    const cpu::vec::F8 w = swap_halves(v, width);
    v = w > v ? w : v;
  }
  return v[0];
}
float lane_total(cpu::vec::F8 v) {
  for (const int width : {4, 2, 1}) v += swap_halves(v, width);
  return v[0];
}
bool any_lane(cpu::vec::I8 mask) {
  uint64_t bits[4];
  std::memcpy(bits, &mask, sizeof bits);
  return (bits[0] | bits[1] | bits[2] | bits[3]) != 0;
}

// A row of a block's scores, `width` keys wide, in whole vectors: the last one read and written in
// part when width is not a multiple of 8, and lanes at or past a row's end(i) masked.
struct RowVectors {
  int64_t width;
  cpu::vec::F8 get(const float* x, int64_t j) const {
    return j + cpu::vec::kLanes <= width ? cpu::vec::load(x + j) : cpu::vec::load_tail(x + j, width - j, 0.0f);
  }
  void put(float* x, int64_t j, cpu::vec::F8 v) const {
    j + cpu::vec::kLanes <= width ? cpu::vec::store(x + j, v) : cpu::vec::store_tail(x + j, v, width - j);
  }
  static cpu::vec::I8 masked(int64_t j, int64_t end) {
    const cpu::vec::I8 lane{0, 1, 2, 3, 4, 5, 6, 7};
    return lane + static_cast<int32_t>(j) >= static_cast<int32_t>(end);
  }
};

// Row i of the forward: scores s[0, end) -> softmax(scale·s), s[end, width) = 0; returns lse_i.
template <typename C>
C softmax_row(C* s, int64_t end, int64_t width, C scale) {
  C m = -std::numeric_limits<C>::infinity();
  for (int64_t j = 0; j < end; ++j) {
    s[j] *= scale;
    m = s[j] > m || std::isnan(s[j]) ? s[j] : m;  // NaN wins, as it does in the composition
  }
  C sum = 0;
  for (int64_t j = 0; j < end; ++j) sum += s[j] = std::exp(s[j] - m);
  for (int64_t j = 0; j < end; ++j) s[j] /= sum;
  for (int64_t j = end; j < width; ++j) s[j] = 0;
  return m + std::log(sum);
}
// Rows [first, first + count) of a block, row r at s + r·ld with its keys [0, width): each row's
// softmax as above, lse_i into lse[r].
template <typename C>
void softmax_rows(C* s, int64_t ld, int64_t first, int64_t count, int64_t width, const AttentionDims& n,
                  const AttentionParams& params, C scale, C* lse) {
  for (int64_t r = 0; r < count; ++r) lse[r] = softmax_row(s + r * ld, key_end(first + r, n, params), width, scale);
}
// Note [Softmax rows side by side]: one row's softmax is three passes of a few vectors (at T = 64
// in causal blocks, 4.5 on average), each waiting on the one before (the max before the
// exponentials, their sum before the division), and an exponential is a chain of some twenty
// dependent operations. Row by row, the softmax was 39 % of the forward kernel's time (perf on
// bench_transformer's shapes, one thread). So the float32 rows go in groups of kSideBySide, each
// pass over every row of the group before the next pass begins: the rows' chains are independent
// and the core overlaps them. The forward kernel took 0.88x its time (attention_kernel_forward_us,
// interleaved runs). Every row's arithmetic is the same as alone, so are its bits.
constexpr int64_t kSideBySide = 8;
template <>
void softmax_rows(float* s, int64_t ld, int64_t first, int64_t count, int64_t width, const AttentionDims& n,
                  const AttentionParams& params, float scale, float* lse) {  // Note [Softmax rows in whole vectors]
  using namespace cpu::vec;
  const RowVectors row{width};
  for (int64_t g = 0; g < count; g += kSideBySide) {
    const int64_t rows = std::min(kSideBySide, count - g);
    int64_t end[kSideBySide];
    float m[kSideBySide], total[kSideBySide];
    for (int64_t r = 0; r < rows; ++r) {  // scaled scores, masked lanes -inf; the row's max
      float* x = s + (g + r) * ld;
      end[r] = key_end(first + g + r, n, params);
      F8 mx = splat(-INFINITY);
      I8 nan{};
      for (int64_t j = 0; j < width; j += kLanes) {
        const F8 v = row.masked(j, end[r]) ? splat(-INFINITY) : row.get(x, j) * splat(scale);
        row.put(x, j, v);
        nan |= v != v;
        mx = v > mx ? v : mx;
      }
      m[r] = any_lane(nan) ? NAN : lane_max(mx);
    }
    for (int64_t r = 0; r < rows; ++r) {  // exponentials and their sum
      float* x = s + (g + r) * ld;
      F8 sum{};
      for (int64_t j = 0; j < width; j += kLanes) {
        const F8 e = exp_lanes(row.get(x, j) - splat(m[r]));  // 0 where masked (-inf)
        row.put(x, j, e);
        sum += row.masked(j, end[r]) ? splat(0.0f) : e;
      }
      total[r] = lane_total(sum);
    }
    for (int64_t r = 0; r < rows; ++r) {  // probabilities, lse
      float* x = s + (g + r) * ld;
      const float inv = 1.0f / total[r];
      for (int64_t j = 0; j < width; j += kLanes) row.put(x, j, row.get(x, j) * splat(inv));
      lse[g + r] = m[r] + std::log(total[r]);
    }
  }
}

// Row i of the backward: p[0, end) = e^{scale·s - lse} from the unscaled scores, dp[0, end) ->
// ds = p·(dp - D)·scale (scale folded in: dq and dk both need it), both 0 on [end, width). D_i is
// given, or (widened) taken as Σ_j p_ij·dp_ij.
template <typename C>
void gradient_row(C* p, C* dp, int64_t end, int64_t width, C scale, C lse, const C* given_D) {
  C D = given_D ? *given_D : C(0);
  for (int64_t j = 0; j < end; ++j) {
    p[j] = std::exp(p[j] * scale - lse);
    if (!given_D) D += p[j] * dp[j];
  }
  for (int64_t j = 0; j < end; ++j) dp[j] = p[j] * (dp[j] - D) * scale;
  for (int64_t j = end; j < width; ++j) p[j] = dp[j] = 0;
}
template <>
void gradient_row(float* p, float* dp, int64_t end, int64_t width, float scale, float lse, const float* given_D) {
  using namespace cpu::vec;  // Note [Softmax rows in whole vectors]
  const RowVectors row{width};
  const auto prob = [&](int64_t j) {  // p_ij, 0 where masked
    return exp_lanes(row.masked(j, end) ? splat(-INFINITY) : row.get(p, j) * splat(scale) - splat(lse));
  };
  if (given_D) {  // one pass: D is known, so nothing waits on a sum over the row
    const F8 D = splat(*given_D);
    for (int64_t j = 0; j < width; j += kLanes) {
      const F8 e = prob(j);
      row.put(p, j, e);
      row.put(dp, j, row.masked(j, end) ? splat(0.0f) : e * (row.get(dp, j) - D) * splat(scale));
    }
    return;
  }
  F8 pdp{};
  for (int64_t j = 0; j < width; j += kLanes) {
    const F8 e = prob(j);
    row.put(p, j, e);
    pdp += row.masked(j, end) ? splat(0.0f) : e * row.get(dp, j);
  }
  const F8 D = splat(lane_total(pdp));
  for (int64_t j = 0; j < width; j += kLanes) {
    const F8 ds = row.get(p, j) * (row.get(dp, j) - D) * splat(scale);
    row.put(dp, j, row.masked(j, end) ? splat(0.0f) : ds);
  }
}

// Σ_c a[c]·b[c], c < n: D_i = dO_i·O_i.
template <typename C>
C dot(const C* a, const C* b, int64_t n) {
  C sum = 0;
  for (int64_t c = 0; c < n; ++c) sum += a[c] * b[c];
  return sum;
}
template <>
float dot(const float* a, const float* b, int64_t n) {
  using namespace cpu::vec;
  F8 sum{};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) sum += load(a + c) * load(b + c);
  float total = lane_total(sum);
  for (; c < n; ++c) total += a[c] * b[c];
  return total;
}

// dst (cols, rows) = srcᵀ for src (rows, cols): Kᵀ and Vᵀ, small_gemm's right operand.
template <typename C>
void transpose_into(std::vector<C>& dst, Head<const C> src, int64_t rows, int64_t cols) {
  dst.resize(rows * cols);
  cpu::transpose(rows, cols, src.p, src.ld, dst.data(), rows);
}

// Head (b, h) of a (B, H, T, d) tensor of storage type T, read as compute type C: the tensor's own
// memory when T is C, else widened into buf (Note [Low-precision attention]).
template <typename T, typename C = compute_t<T>>
Head<const C> head_as(const Tensor& t, int64_t b, int64_t h, std::vector<C>& buf) {
  const int64_t rows = t.sizes()[2], cols = t.sizes()[3], ld = t.strides()[2];
  const T* p = cpu::data<const T>(t) + b * t.strides()[0] + h * t.strides()[1];
  if constexpr (std::is_same_v<T, C>) {
    return {p, ld};
  } else {
    buf.resize(rows * cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) buf[i * cols + j] = C(p[i * ld + j]);
    return {buf.data(), cols};
  }
}

// Head (b, h) of a contiguous result, written as compute type C: in place when T is C, else into
// buf, which store_head then rounds into the tensor once.
template <typename T, typename C = compute_t<T>>
Head<C> head_out_as(const Tensor& t, int64_t b, int64_t h, std::vector<C>& buf) {
  const int64_t rows = t.sizes()[2], cols = t.sizes()[3];
  if constexpr (std::is_same_v<T, C>) {
    return {cpu::data<T>(t) + (b * t.sizes()[1] + h) * rows * cols, cols};
  } else {
    buf.resize(rows * cols);
    return {buf.data(), cols};
  }
}
template <typename T, typename C = compute_t<T>>
void store_head(const Tensor& t, int64_t b, int64_t h, const std::vector<C>& buf) {
  if constexpr (!std::is_same_v<T, C>) {
    T* p = cpu::data<T>(t) + (b * t.sizes()[1] + h) * t.sizes()[2] * t.sizes()[3];
    for (size_t i = 0; i < buf.size(); ++i) p[i] = T(buf[i]);
  }
}

void check_lse(const char* op, const Tensor& lse, DType want) {
  MT_CHECK(lse.dtype() == want, op, ": lse must be ", want, " (the compute type), got ", lse.dtype());
}

}  // namespace

void CpuBackend::attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                           const AttentionParams& params) {
  const AttentionDims n = check_attention("attention", q, k, v);
  const Shape lse_shape{n.B, n.H, n.Tq};
  MT_CHECK(cpu::is_contiguous(out) && out.sizes() == q.sizes() && cpu::is_contiguous(lse) && lse.sizes() == lse_shape,
           "attention: out and lse must be contiguous (B, H, Tq, d) and (B, H, Tq), got ", out.sizes(), " and ",
           lse.sizes());
  MT_DISPATCH_FLOAT_AND_LOWP(q.dtype(), "attention", [&]<typename T>() {
    using C = compute_t<T>;  // Note [Low-precision attention]
    check_lse("attention", lse, dtype_of<C>::value);
    C* l = cpu::data<C>(lse);
    const C scale = C(params.scale);
    const int64_t Tk = n.Tk, d = n.d;
    // Heads are independent: chunks of (b, h) on the intra-op threads, each with its own scratch.
    parallel_for(n.B * n.H, cpu::kGrainWork / (n.Tq * n.Tk * n.d + 1), [&](int64_t lo, int64_t hi) {
      std::vector<C> S(n.Tq * Tk), Kt;  // one head's scores, then probabilities; Kᵀ: (d, Tk)
      std::vector<C> wq, wk, wv, wo;    // 16-bit heads widened (unused for float and double)
      for (int64_t bh = lo; bh < hi; ++bh) {
        const int64_t b = bh / n.H, h = bh % n.H;
        const Head<const C> Q = head_as<T>(q, b, h, wq), K = head_as<T>(k, b, h, wk), V = head_as<T>(v, b, h, wv);
        const Head<C> O = head_out_as<T>(out, b, h, wo);
        transpose_into(Kt, K, Tk, d);
        for (const Block& rb : row_blocks(n, params)) {
          C* Sb = S.data() + rb.first * Tk;  // rows [first, first + count), keys [0, others)
          cpu::small_gemm(rb.count, rb.others, d, Q.row(rb.first), Q.ld, 1, Kt.data(), Tk, Sb, Tk, false);
          softmax_rows(Sb, Tk, rb.first, rb.count, rb.others, n, params, scale, l + bh * n.Tq + rb.first);
          cpu::small_gemm(rb.count, d, rb.others, Sb, Tk, 1, V.p, V.ld, O.row(rb.first), O.ld, false);
        }
        store_head<T>(out, b, h, wo);
      }
    });
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
  MT_DISPATCH_FLOAT_AND_LOWP(q.dtype(), "attention_backward", [&]<typename T>() {
    using C = compute_t<T>;  // Note [Low-precision attention]
    constexpr bool widened = !std::is_same_v<T, C>;
    check_lse("attention_backward", lse, dtype_of<C>::value);
    const C* l = cpu::data<const C>(lse);
    const C scale = C(params.scale);
    const int64_t Tq = n.Tq, Tk = n.Tk, d = n.d;
    parallel_for(n.B * n.H, cpu::kGrainWork / (n.Tq * n.Tk * n.d + 1), [&](int64_t lo, int64_t hi) {
      std::vector<C> P(Tq * Tk), dS(Tq * Tk), Kt, Vt, D(Tq);  // P, then dP -> dS: (Tq, Tk); Kᵀ, Vᵀ: (d, Tk)
      std::vector<C> wq, wk, wv, wdo, wo, wdq, wdk, wdv;  // 16-bit heads widened (unused for float and double)
      for (int64_t bh = lo; bh < hi; ++bh) {
        const int64_t b = bh / n.H, h = bh % n.H;
        const Head<const C> Q = head_as<T>(q, b, h, wq), K = head_as<T>(k, b, h, wk), V = head_as<T>(v, b, h, wv);
        const Head<const C> dO = head_as<T>(dout, b, h, wdo);
        const Head<C> dQ = head_out_as<T>(dq, b, h, wdq), dK = head_out_as<T>(dk, b, h, wdk);
        const Head<C> dV = head_out_as<T>(dv, b, h, wdv);
        transpose_into(Kt, K, Tk, d);
        transpose_into(Vt, V, Tk, d);
        if constexpr (!widened) {  // D_i = dO_i·O_i; 16-bit: Σ_j p_ij·dp_ij in gradient_row (out was rounded)
          const Head<const C> O = head_as<T>(out, b, h, wo);
          for (int64_t i = 0; i < Tq; ++i) D[i] = dot(dO.row(i), O.row(i), d);
        }
        for (const Block& rb : row_blocks(n, params)) {
          C* Pb = P.data() + rb.first * Tk;
          C* dSb = dS.data() + rb.first * Tk;
          cpu::small_gemm(rb.count, rb.others, d, Q.row(rb.first), Q.ld, 1, Kt.data(), Tk, Pb, Tk, false);
          cpu::small_gemm(rb.count, rb.others, d, dO.row(rb.first), dO.ld, 1, Vt.data(), Tk, dSb, Tk, false);  // dP
          for (int64_t r = 0; r < rb.count; ++r) {
            const int64_t i = rb.first + r;
            gradient_row(Pb + r * Tk, dSb + r * Tk, key_end(i, n, params), rb.others, scale, l[bh * Tq + i],
                         widened ? nullptr : &D[i]);
          }
          cpu::small_gemm(rb.count, d, rb.others, dSb, Tk, 1, K.p, K.ld, dQ.row(rb.first), dQ.ld, false);
        }
        // dK = dSᵀ·Q and dV = Pᵀ·dO by key blocks, each over the rows that see it: A read transposed.
        for (const Block& kb : key_blocks(n, params)) {
          const int64_t i0 = kb.others, rows = Tq - i0, at = i0 * Tk + kb.first;  // entry (i0, first) of P, dS
          cpu::small_gemm(kb.count, d, rows, dS.data() + at, 1, Tk, Q.row(i0), Q.ld, dK.row(kb.first), dK.ld, false);
          cpu::small_gemm(kb.count, d, rows, P.data() + at, 1, Tk, dO.row(i0), dO.ld, dV.row(kb.first), dV.ld, false);
        }
        store_head<T>(dq, b, h, wdq), store_head<T>(dk, b, h, wdk), store_head<T>(dv, b, h, wdv);
      }
    });
  });
}

}  // namespace mt
