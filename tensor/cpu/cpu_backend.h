// CpuBackend: the Backend (tensor/backend.h) for host memory, and the small helpers its kernels
// share. Private to tensor/cpu/: the rest of the library reaches it through mt::backend(kCPU).
//
// The methods are spread over one file per kind of kernel:
//   cpu_copy.cpp      copy, fill                  cpu_elementwise.cpp  unary, binary, where
//   cpu_reduce.cpp    reduce                      cpu_softmax.cpp      softmax, log_softmax
//   cpu_scan.cpp      cumsum
//   cpu_gemm.cpp      gemm (BLAS/Eigen + loops)   cpu_index.cpp        index_select/add, gather, scatter_add
//   cpu_random.cpp    uniform, normal             cpu_allocator.cpp    the 64-byte aligned allocator
//   cpu_sort.cpp      argsort
//   cpu_layer_norm.cpp, cpu_gelu.cpp, cpu_attention.cpp: the fused transformer kernels
//   cpu_conv.cpp      im2col, col2im, max_pool2d
//   cpu_winograd.cpp  Winograd F(2x2, 3x3) input and output transforms
//   cpu_interpolate.cpp  bilinear resampling and its adjoint
//   cpu_group_norm.cpp   group norm and its backward (norm_rows.h: what it shares with layer norm)
//   cpu_batch_norm_relu.cpp  batch norm + ReLU (+ max pool) fused, forward and backward
// and backend_registry.cpp holds the device-type -> Backend table. Shared loops: strided_loop.h
// (any strides) and elementwise.h (with the contiguous and broadcast-scalar fast paths).
// Kernels above a size threshold split their loops across the intra-op threads with parallel_for
// (tensor/parallel.h), in chunks fixed by the shapes, so results do not depend on the thread count
// (Note [Fixed chunks]); GEMM too, as blocks of single-threaded BLAS calls (Note [GEMM on the pool]).
#pragma once

#include <type_traits>

#include "tensor/backend.h"
#include "tensor/detail/layout.h"
#include "tensor/parallel.h"
#include "tensor/cpu/strided_loop.h"

namespace mt {

class CpuBackend final : public Backend {
 public:
  constexpr CpuBackend() = default;

  Allocator& allocator() override { return cpu_allocator(); }
  void copy(const Tensor& dst, const Tensor& src) override;
  void fill(const Tensor& dst, double value) override;
  void unary(UnaryOp op, const Tensor& out, const Tensor& in, double scalar) override;
  void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b) override;
  void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) override;
  void reduce(ReductionOp op, const Tensor& out, const Tensor& in, uint32_t dim_mask) override;
  void gemm(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate) override;
  void softmax(const Tensor& out, const Tensor& in, bool log) override;
  void index_select(const Tensor& out, const Tensor& in, const Tensor& index) override;
  void index_add(const Tensor& out, const Tensor& index, const Tensor& src) override;
  void gather(const Tensor& out, const Tensor& in, const Tensor& index) override;
  void scatter_add(const Tensor& out, const Tensor& index, const Tensor& src) override;
  void scatter_add_zeros(const Tensor& out, const Tensor& index, const Tensor& src) override;
  void argsort(const Tensor& indices, const Tensor& x, bool descending) override;  // cpu_sort.cpp
  void cumsum(const Tensor& out, const Tensor& in, bool reverse) override;           // cpu_scan.cpp
  void uniform(const Tensor& out, Generator& gen, double low, double high) override;
  void normal(const Tensor& out, Generator& gen, double mean, double std) override;
  // Transformer kernels: cpu_layer_norm.cpp, cpu_gelu.cpp, cpu_attention.cpp.
  void layer_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                  const Tensor& bias, double eps) override;
  void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                           const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd) override;
  void gelu(const Tensor& out, const Tensor& x, GeluApproximate approximate) override;
  void gelu_backward(const Tensor& dx, const Tensor& dy, const Tensor& x, GeluApproximate approximate) override;
  void attention(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                 const AttentionParams& params) override;
  void attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                          const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                          const AttentionParams& params) override;
  void im2col(const Tensor& cols, const Tensor& x, const Window2d& w) override;
  void col2im(const Tensor& x, const Tensor& cols, const Window2d& w) override;
  void max_pool2d(const Tensor& out, const Tensor& indices, const Tensor& x, const Window2d& w) override;
  // cpu_winograd.cpp
  bool has_winograd() const override { return true; }
  void winograd_input(const Tensor& v, const Tensor& x, const Window2d& w) override;
  void winograd_output(const Tensor& y, const Tensor& m, const Tensor& bias) override;
  void winograd_output_backward(const Tensor& m, const Tensor& dy) override;
  // cpu_interpolate.cpp
  bool has_bilinear() const override { return true; }
  void bilinear(const Tensor& out, const Tensor& x, const LinearTaps& rows, const LinearTaps& cols) override;
  void bilinear_backward(const Tensor& dx, const Tensor& dy, const LinearTaps& rows, const LinearTaps& cols) override;
  // cpu_group_norm.cpp
  bool has_group_norm() const override { return true; }
  void group_norm(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                  const Tensor& bias, double eps) override;
  void group_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                           const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd) override;
  // cpu_batch_norm_relu.cpp
  bool has_batch_norm_relu() const override { return true; }
  void batch_norm_stats(const Tensor& mean, const Tensor& var, const Tensor& x) override;
  void batch_norm_relu(const Tensor& out, const Tensor& indices, const Tensor& x, const Tensor& mean,
                       const Tensor& scale, const Tensor& shift, const Window2d* pool) override;
  void batch_norm_relu_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                                const Tensor& out, const Tensor& indices, const Tensor& x, const Tensor& mean,
                                const Tensor& inv, const Tensor& scale, const Window2d* pool,
                                bool batch_stats) override;
};

namespace cpu {

// Grains for parallel_for (Note [Fixed chunks]): the elements (or, for reductions and the fused
// kernels, elements of work) a chunk holds; a tensor up to one grain runs on the calling thread
// alone. bench/bench_parallel.cpp measures where two chunks beat one (bench/README.md, "Threads"):
// on this 2-core machine, under load, add broke even around 8-32 K elements and won clearly from
// 64 K; exp won from about 4 K.
constexpr int64_t kGrainElementwise = 32768;    // add, mul, relu, copy: a fraction of a ns per element
constexpr int64_t kGrainTranscendental = 4096;  // exp, log, tanh, erf, pow, softmax, GELU: a libm call each
constexpr int64_t kGrainWork = 32768;           // rows of reductions, layer norm, im2col and Winograd planes,
                                                // heads, index_add / scatter_add column blocks

// Row-major dense (tensor/detail/layout.h): the elements are data[0 .. numel) in order.
inline bool is_contiguous(const Tensor& t) { return is_dense(t); }

// Every element is the same memory location: a scalar broadcast by expand (all strides 0).
inline bool is_broadcast_scalar(const Tensor& t) {
  const Shape& sizes = t.sizes();
  const Shape& strides = t.strides();
  for (int d = 0; d < sizes.size(); ++d)
    if (sizes[d] != 1 && strides[d] != 0) return false;
  return true;
}

// The typed first element of t; T may be const. Checks that T matches t's dtype.
template <typename T>
T* data(const Tensor& t) {
  return t.data_ptr<std::remove_const_t<T>>();
}

template <typename T>
Operand<T> operand(const Tensor& t) {
  return {data<T>(t), t.strides().begin()};
}

// The reference GEMM (tensor/cpu/cpu_gemm.cpp): three plain loops, any strides, any dtype, same
// contract as Backend::gemm. gemm() runs it for tiny problems; tests check the BLAS path against it.
void gemm_reference(const Tensor& out, const Tensor& a, const Tensor& b, bool accumulate);

}  // namespace cpu
}  // namespace mt
