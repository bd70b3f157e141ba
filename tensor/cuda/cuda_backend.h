// CudaBackend: the Backend (tensor/backend.h) for one CUDA device. There is one object per device
// (cuda:0, cuda:1, ...), made on first use, so every method knows its device, compute stream and
// allocator without asking the tensors. Private to tensor/cuda/: the rest of the library reaches it
// through mt::backend(cuda_device(i)) (tensor/cpu/backend_registry.cpp calls backend_for_device).
//
// Methods only enqueue work on the device's compute stream and return (Backend's contract for
// asynchronous devices); copies to the host wait, because the caller reads the result.
// The methods are spread over one file per kind of kernel, mirroring tensor/cpu/:
//   cuda_copy.cpp        copy between host and device (staging, peer copies)
//   cuda_copy.cu         the on-device copy/cast kernels and fill
//   cuda_elementwise.cu  unary, binary, where          cuda_reduce.cu   reduce (sum, max, min, argmax)
//   cuda_softmax.cu      softmax, log_softmax          cuda_index.cu    index_select/add, gather, scatter_add
//   cuda_random.cu       uniform, normal (Philox)      cuda_gemm.cu     gemm (cuBLAS; int64 by a plain kernel)
//   cuda_layer_norm.cu, cuda_gelu.cu, cuda_attention.cu: the transformer kernels
//   cuda_conv.cu         im2col, col2im, max_pool2d
//   cuda_sort.cu         argsort
// Shared device loops: cuda_loops.cuh. Index math and launch geometry: indexer.h, launch.h.
// Only compiled into CUDA builds.
#pragma once

#include <cuda_runtime.h>

#include "tensor/backend.h"
#include "tensor/detail/layout.h"  // is_dense, blas_layout: shared with the CPU backend

namespace mt::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);

  Allocator& allocator() override { return *allocator_; }
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
  void argsort(const Tensor& indices, const Tensor& x, bool descending) override;  // cuda_sort.cu
  void uniform(const Tensor& out, Generator& gen, double low, double high) override;
  void normal(const Tensor& out, Generator& gen, double mean, double std) override;
  // Transformer kernels: cuda_layer_norm.cu, cuda_gelu.cu, cuda_attention.cu.
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
  // Waits for this device's compute stream, then reports kernel-side errors (Note [Device errors]).
  void synchronize() override;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  int multiprocessors() const { return multiprocessors_; }

  // dst[i] = cast(src[i]) for two tensors on this device: any strides, any dtypes (cuda_copy.cu).
  void copy_on_device(const Tensor& dst, const Tensor& src);

 private:
  void copy_from_host(const Tensor& dst, const Tensor& src);
  void copy_to_host(const Tensor& dst, const Tensor& src);
  void copy_from_peer(const Tensor& dst, const Tensor& src);

  int device_;
  cudaStream_t stream_;
  int multiprocessors_;
  Allocator* allocator_;
};

namespace detail {
// The backend of cuda:`index`: made on first use; throws a clear error for a device that does not exist.
Backend& backend_for_device(int index);
}  // namespace detail

}  // namespace mt::cuda
