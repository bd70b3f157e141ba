// CpuBackend::attention and attention_backward: scaled dot-product attention one (batch, head) at
// a time, the heads split across the intra-op threads (tensor/parallel.h). Formulas: tensor/backend.h.
//
// Each head's (Tq, Tk) scores live in one scratch matrix while that head is computed, and the
// products are Eigen GEMMs on the operands in place (q, k, v are read through their row strides,
// unit stride in the last dim, so the (B, H, T, d) head views of a fused qkv projection are not
// copied). They go through cpu::eigen_gemm, whose templates compile once, in cpu_gemm.cpp: written
// here as Eigen product expressions, the seven products made this file the slowest of the library
// to compile (74 s of CPU in CI's sanitizer build on the 2-core AMD host, 20 s in Release). Nothing
// of size (Tq, Tk) is kept after the call: the forward saves only
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
// once when the head is done (dk and dv sum over the causal row blocks in float32 first). The
// scores, softmax and lse stay float32 throughout; lse is a float32 tensor (raw_transformer.cpp
// makes it so), since the backward's p = e^{s - lse} would lose its digits to a 16-bit lse. For the
// same reason the backward's D_i = dO_i·O_i is taken as Σ_j p_ij·dp_ij from its float32 p and dp,
// not from the saved out, which was rounded to 16 bits: ds = p·(dp - D) cancels, and the rounded
// out put dq and dk more than one ulp off the float32 gradients. Only one head's operands are ever
// widened, never a whole tensor.
#include <cmath>
#include <type_traits>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/eigen_core.h"

namespace mt {
namespace {

template <typename T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using HeadMap = Eigen::Map<RowMajor<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using ConstHeadMap = Eigen::Map<const RowMajor<T>, 0, Eigen::OuterStride<>>;

struct AttentionDims {
  int64_t B, H, Tq, Tk, d;
};

// Head (b, h) of a (B, H, T, d) tensor with a unit last stride, as a (T, d) row-major matrix.
template <typename T>
ConstHeadMap<T> head(const Tensor& t, int64_t b, int64_t h) {
  const T* p = cpu::data<const T>(t) + b * t.strides()[0] + h * t.strides()[1];
  return ConstHeadMap<T>(p, t.sizes()[2], t.sizes()[3], Eigen::OuterStride<>(t.strides()[2]));
}
template <typename T>
HeadMap<T> head_out(const Tensor& t, int64_t b, int64_t h) {  // t contiguous
  T* p = cpu::data<T>(t) + (b * t.sizes()[1] + h) * t.sizes()[2] * t.sizes()[3];
  return HeadMap<T>(p, t.sizes()[2], t.sizes()[3], Eigen::OuterStride<>(t.sizes()[3]));
}

void check_head_tensor(const char* op, const char* what, const Tensor& t, const Shape& want) {
  MT_CHECK(t.sizes() == want && t.strides()[3] == 1, op, ": CPU kernel needs ", what, " of shape ", want,
           " with a unit last stride, got ", t.sizes(), " with strides ", t.strides());
}

// C (+)= op(A)·op(B) for Eigen blocks of row-major matrices, each read in place (transposed: as the
// column-major matrix its storage already is).
template <typename T, typename MC, typename MA, typename MB>
void product(MC&& C, const MA& A, bool a_transposed, const MB& B, bool b_transposed, bool accumulate = false) {
  const int64_t k = a_transposed ? A.rows() : A.cols();
  cpu::eigen_gemm<T>(C.rows(), C.cols(), k, A.data(), MatrixLayout{a_transposed, A.outerStride()}, B.data(),
                     MatrixLayout{b_transposed, B.outerStride()}, accumulate, C.data(), C.outerStride());
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

// Note [Causal row blocks]: with a causal mask, queries [first, first + rows) see only keys
// [0, first + rows), so each block of kCausalBlock query rows multiplies against that prefix of K
// and V alone: the GEMMs skip most of the masked upper triangle (at T = 64 in blocks of 16, 5/8 of
// the full products' work). Without a mask there is one block of all rows and all keys.
constexpr int64_t kCausalBlock = 16;
struct RowBlock {
  int64_t first, rows, keys;
};
std::vector<RowBlock> row_blocks(const AttentionDims& n, const AttentionParams& p) {
  if (!p.causal) return {{0, n.Tq, n.Tk}};
  std::vector<RowBlock> blocks;
  for (int64_t first = 0; first < n.Tq; first += kCausalBlock) {
    const int64_t rows = std::min(kCausalBlock, n.Tq - first);
    blocks.push_back({first, rows, std::min(first + rows, n.Tk)});
  }
  return blocks;
}

// Head (b, h) of a (B, H, T, d) tensor of storage type T, read as compute type C: the tensor's own
// memory when T is C, else widened into buf (Note [Low-precision attention]).
template <typename T, typename C = compute_t<T>>
ConstHeadMap<C> head_as(const Tensor& t, int64_t b, int64_t h, RowMajor<C>& buf) {
  if constexpr (std::is_same_v<T, C>) {
    return head<T>(t, b, h);
  } else {
    const int64_t rows = t.sizes()[2], cols = t.sizes()[3], ld = t.strides()[2];
    const T* p = cpu::data<const T>(t) + b * t.strides()[0] + h * t.strides()[1];
    buf.resize(rows, cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) buf(i, j) = C(p[i * ld + j]);
    return ConstHeadMap<C>(buf.data(), rows, cols, Eigen::OuterStride<>(cols));
  }
}

// Head (b, h) of a contiguous result, written as compute type C: in place when T is C, else into
// buf, which store_head then rounds into the tensor once.
template <typename T, typename C = compute_t<T>>
HeadMap<C> head_out_as(const Tensor& t, int64_t b, int64_t h, RowMajor<C>& buf) {
  if constexpr (std::is_same_v<T, C>) {
    return head_out<T>(t, b, h);
  } else {
    buf.resize(t.sizes()[2], t.sizes()[3]);
    return HeadMap<C>(buf.data(), buf.rows(), buf.cols(), Eigen::OuterStride<>(buf.cols()));
  }
}
template <typename T, typename C = compute_t<T>>
void store_head(const Tensor& t, int64_t b, int64_t h, const RowMajor<C>& buf) {
  if constexpr (!std::is_same_v<T, C>) {
    T* p = cpu::data<T>(t) + (b * t.sizes()[1] + h) * t.sizes()[2] * t.sizes()[3];
    const C* from = buf.data();
    for (int64_t i = 0; i < buf.size(); ++i) p[i] = T(from[i]);
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
    // Heads are independent: chunks of (b, h) on the intra-op threads, each with its own scratch.
    parallel_for(n.B * n.H, cpu::kGrainWork / (n.Tq * n.Tk * n.d + 1), [&](int64_t lo, int64_t hi) {
      RowMajor<C> S(n.Tq, n.Tk);  // one head's scores, then probabilities
      RowMajor<C> wq, wk, wv, wo;  // 16-bit heads widened (unused for float and double)
      for (int64_t bh = lo; bh < hi; ++bh) {
        const int64_t b = bh / n.H, h = bh % n.H;
        const ConstHeadMap<C> Q = head_as<T>(q, b, h, wq), K = head_as<T>(k, b, h, wk), V = head_as<T>(v, b, h, wv);
        HeadMap<C> O = head_out_as<T>(out, b, h, wo);
        for (const RowBlock& rb : row_blocks(n, params)) {
          auto Sb = S.block(rb.first, 0, rb.rows, rb.keys);
          product<C>(Sb, Q.middleRows(rb.first, rb.rows), false, K.topRows(rb.keys), true);
          Sb *= C(params.scale);
          for (int64_t r = 0; r < rb.rows; ++r) {
            const int64_t i = rb.first + r, end = key_end(i, n, params);
            auto row = Sb.row(r).head(end).array();
            const C m = row.template maxCoeff<Eigen::PropagateNaN>();
            row = (row - m).exp();  // Eigen's vectorised exp
            const C sum = row.sum();
            row *= C(1) / sum;
            Sb.row(r).tail(rb.keys - end).setZero();
            l[bh * n.Tq + i] = m + std::log(sum);
          }
          product<C>(O.middleRows(rb.first, rb.rows), Sb, false, V.topRows(rb.keys), false);
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
    parallel_for(n.B * n.H, cpu::kGrainWork / (n.Tq * n.Tk * n.d + 1), [&](int64_t lo, int64_t hi) {
      RowMajor<C> P(n.Tq, n.Tk), dS(n.Tq, n.Tk);
      RowMajor<C> wq, wk, wv, wdo, wo, wdq, wdk, wdv;  // 16-bit heads widened (unused for float and double)
      for (int64_t bh = lo; bh < hi; ++bh) {
        const int64_t b = bh / n.H, h = bh % n.H;
        const ConstHeadMap<C> Q = head_as<T>(q, b, h, wq), K = head_as<T>(k, b, h, wk), V = head_as<T>(v, b, h, wv);
        const ConstHeadMap<C> dO = head_as<T>(dout, b, h, wdo), O = head_as<T>(out, b, h, wo);
        HeadMap<C> dQ = head_out_as<T>(dq, b, h, wdq), dK = head_out_as<T>(dk, b, h, wdk);
        HeadMap<C> dV = head_out_as<T>(dv, b, h, wdv);
        dK.setZero(), dV.setZero();
        for (const RowBlock& rb : row_blocks(n, params)) {
          auto Pb = P.block(rb.first, 0, rb.rows, rb.keys);
          auto dSb = dS.block(rb.first, 0, rb.rows, rb.keys);
          const auto Qb = Q.middleRows(rb.first, rb.rows);
          const auto dOb = dO.middleRows(rb.first, rb.rows);
          product<C>(Pb, Qb, false, K.topRows(rb.keys), true);
          Pb *= scale;
          product<C>(dSb, dOb, false, V.topRows(rb.keys), true);  // dP
          for (int64_t r = 0; r < rb.rows; ++r) {
            const int64_t i = rb.first + r, end = key_end(i, n, params);
            auto p = Pb.row(r).head(end).array();
            auto ds = dSb.row(r).head(end).array();
            const C lse_i = l[bh * n.Tq + i];
            p = (p - lse_i).exp();
            // D_i = dO_i·O_i = Σ_j p_ij·dp_ij; 16-bit: the second form, in float32 (out was rounded).
            const C D = widened ? (p * ds).sum() : dO.row(i).dot(O.row(i));
            ds = p * (ds - D) * scale;  // scale folded in: dq and dk both need it
            Pb.row(r).tail(rb.keys - end).setZero();
            dSb.row(r).tail(rb.keys - end).setZero();
          }
          product<C>(dQ.middleRows(rb.first, rb.rows), dSb, false, K.topRows(rb.keys), false);
          product<C>(dK.topRows(rb.keys), dSb, true, Qb, false, /*accumulate=*/true);
          product<C>(dV.topRows(rb.keys), Pb, true, dOb, false, /*accumulate=*/true);
        }
        store_head<T>(dq, b, h, wdq), store_head<T>(dk, b, h, wdk), store_head<T>(dv, b, h, wdv);
      }
    });
  });
}

}  // namespace mt
