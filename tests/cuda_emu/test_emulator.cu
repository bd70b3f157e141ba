// The CUDA emulator's own semantics (Note [Emulated threads] in include/emu_kernel.h), with small
// kernels of its own: the block barrier, warp shuffles and votes, what a barrier or shuffle not all
// threads reach does (an error, never a hang), launch checks, stream and event ordering, and the
// reference cuBLAS's argument checks. Translated like tensor/cuda/*.cu (translate_launches).
#include <cublas_v2.h>
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

namespace {

template <typename T>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : n(n) { REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)) == cudaSuccess); }
  ~DeviceBuffer() { (void)cudaFree(p); }
  std::vector<T> read() const {
    std::vector<T> h(n);
    REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
  size_t n;
  T* p = nullptr;
};

// out[t] = the value thread t + 1 wrote before the barrier.
__global__ void rotate_kernel(int* out) {
  __shared__ int slots[256];
  const int t = threadIdx.x;
  slots[t] = 1000 * blockIdx.x + t;
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = slots[(t + 1) % blockDim.x];
}

__global__ void skipped_barrier_kernel(int* out) {
  if (threadIdx.x < 128) return;  // half the block never reaches the barrier
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void divergent_barriers_kernel(int* out) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

// One row per warp-operation result: xor, down, up, idx (width 32 and 16), ballot, any, all.
__global__ void warp_ops_kernel(int* out) {
  const int lane = threadIdx.x % 32;
  const int v = 100 + lane;
  int* row = out + lane;
  row[0 * 32] = __shfl_xor_sync(0xffffffffu, v, 5);
  row[1 * 32] = __shfl_down_sync(0xffffffffu, v, 3);
  row[2 * 32] = __shfl_up_sync(0xffffffffu, v, 3);
  row[3 * 32] = __shfl_sync(0xffffffffu, v, 7);
  row[4 * 32] = __shfl_sync(0xffffffffu, v, 2, 16);  // lane 2 of each 16-lane half
  row[5 * 32] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  row[6 * 32] = __any_sync(0xffffffffu, lane == 31);
  row[7 * 32] = __all_sync(0xffffffffu, lane < 31);
}

__global__ void exited_lane_kernel(int* out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

__global__ void count_kernel(unsigned long long* counter) { atomicAdd(counter, 1ull); }

__global__ void slow_write_kernel(int* x) {
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // host code is fine in an emulated kernel
  *x = 7;
}
__global__ void copy_one_kernel(int* out, const int* x) { *out = *x; }

// A launch failure poisons the context, as on a GPU; these tests end by clearing it so the cases
// after them in the same process still run.
std::string fault_text() {
  const cudaError_t e = cudaDeviceSynchronize();
  REQUIRE(e == cudaErrorLaunchFailure);
  const std::string text = cudaGetErrorString(e);
  mt_emu::reset_context();
  return text;
}

}  // namespace

TEST_CASE("emulator: __syncthreads is a barrier across the block, and __shared__ is one copy per block") {
  DeviceBuffer<int> out(3 * 256);
  rotate_kernel<<<3, 256>>>(out.p);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const std::vector<int> got = out.read();
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < 256; ++t) REQUIRE(got[b * 256 + t] == 1000 * b + (t + 1) % 256);
}

TEST_CASE("emulator: a barrier that not all threads reach is a launch failure naming it, not a hang") {
  DeviceBuffer<int> out(256);
  skipped_barrier_kernel<<<1, 256>>>(out.p);
  const std::string text = fault_text();
  CHECK(text.find("skipped_barrier_kernel") != std::string::npos);
  CHECK(text.find("is not reached by all threads") != std::string::npos);
  CHECK(text.find("test_emulator.cu") != std::string::npos);

  divergent_barriers_kernel<<<1, 64>>>(out.p);
  CHECK(fault_text().find("divergent __syncthreads") != std::string::npos);
}

TEST_CASE("emulator: warp shuffles and votes exchange values among the 32 lanes") {
  DeviceBuffer<int> out(8 * 32);
  warp_ops_kernel<<<1, 32>>>(out.p);
  const std::vector<int> got = out.read();
  unsigned ballot = 0;
  for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
  for (int l = 0; l < 32; ++l) {
    INFO("lane " << l);
    CHECK(got[0 * 32 + l] == 100 + (l ^ 5));
    CHECK(got[1 * 32 + l] == 100 + (l + 3 < 32 ? l + 3 : l));  // out of range: own value
    CHECK(got[2 * 32 + l] == 100 + (l >= 3 ? l - 3 : l));
    CHECK(got[3 * 32 + l] == 107);
    CHECK(got[4 * 32 + l] == 100 + (l / 16 * 16 + 2));
    CHECK(static_cast<unsigned>(got[5 * 32 + l]) == ballot);
    CHECK(got[6 * 32 + l] == 1);
    CHECK(got[7 * 32 + l] == 0);
  }
  // A lane of the mask that returned before the shuffle is an error.
  exited_lane_kernel<<<1, 32>>>(out.p);
  CHECK(fault_text().find("lane 3 has already returned") != std::string::npos);
}

TEST_CASE("emulator: launch checks, atomics, and streams ordered by events") {
  DeviceBuffer<unsigned long long> counter(1);
  REQUIRE(cudaMemset(counter.p, 0, 8) == cudaSuccess);
  count_kernel<<<2048, 1025>>>(counter.p);  // too many threads per block
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  CHECK(cudaGetLastError() == cudaSuccess);  // not sticky: the launch never started
  count_kernel<<<37, 96>>>(counter.p);
  CHECK(counter.read()[0] == 37ull * 96);

  // s2 waits on an event recorded on s1 after a slow kernel: it must see that kernel's write.
  cudaStream_t s1, s2;
  REQUIRE(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t written;
  REQUIRE(cudaEventCreateWithFlags(&written, cudaEventDisableTiming) == cudaSuccess);
  DeviceBuffer<int> x(1), y(1);
  slow_write_kernel<<<1, 1, 0, s1>>>(x.p);
  REQUIRE(cudaEventRecord(written, s1) == cudaSuccess);
  CHECK(cudaEventQuery(written) == cudaErrorNotReady);  // the kernel is still sleeping
  REQUIRE(cudaStreamWaitEvent(s2, written, 0) == cudaSuccess);
  copy_one_kernel<<<1, 1, 0, s2>>>(y.p, x.p);
  REQUIRE(cudaStreamSynchronize(s2) == cudaSuccess);
  CHECK(y.read()[0] == 7);
  CHECK(cudaEventQuery(written) == cudaSuccess);
  // A stream of device 1 used while device 0 is current is refused at the launch.
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaStream_t other;
  REQUIRE(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  copy_one_kernel<<<1, 1, 0, other>>>(y.p, x.p);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  for (cudaStream_t s : {s1, s2, other}) CHECK(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(cudaEventDestroy(written) == cudaSuccess);
  // Fresh device memory reads as NaN, so a kernel that forgets to write shows.
  DeviceBuffer<float> fresh(4);
  for (float v : fresh.read()) CHECK(std::isnan(v));
}

TEST_CASE("emulator: the reference cuBLAS checks leading dimensions and never reads C when beta is 0") {
  cublasHandle_t handle;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cublasSetStream(handle, stream) == CUBLAS_STATUS_SUCCESS);
  // Column-major A (2x3), B (3x2): C = A·B (2x2).
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, -1, 2, 1, 0};
  DeviceBuffer<float> A(6), B(6), C(4);
  REQUIRE(cudaMemcpy(A.p, a.data(), 24, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(B.p, b.data(), 24, cudaMemcpyHostToDevice) == cudaSuccess);
  const float one = 1, zero = 0;
  auto gemm = [&](int lda, int ldb, int ldc, long long stride_c, int batch) {
    return cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, A.p, CUDA_R_32F, lda, 0, B.p,
                                      CUDA_R_32F, ldb, 0, &zero, C.p, CUDA_R_32F, ldc, stride_c, batch,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  REQUIRE(gemm(2, 3, 2, 4, 1) == CUBLAS_STATUS_SUCCESS);  // C starts as NaN (fresh memory): beta 0 ignores it
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  // A·B: [1 3 5; 2 4 6]·[1 2; 0 1; -1 0] = [-4 5; -4 8], column-major {-4, -4, 5, 8}
  CHECK(C.read() == std::vector<float>{-4, -4, 5, 8});
  CHECK(gemm(1, 3, 2, 4, 1) == CUBLAS_STATUS_INVALID_VALUE);  // lda below A's 2 rows
  CHECK(gemm(2, 2, 2, 4, 1) == CUBLAS_STATUS_INVALID_VALUE);  // ldb below B's 3 rows
  CHECK(gemm(2, 3, 1, 4, 1) == CUBLAS_STATUS_INVALID_VALUE);  // ldc below m
  CHECK(gemm(2, 3, 2, 2, 2) == CUBLAS_STATUS_INVALID_VALUE);  // the two output batches overlap
  // A second batch of C would lie past C's allocation: an illegal address, as on a GPU.
  REQUIRE(gemm(2, 3, 2, 4, 2) == CUBLAS_STATUS_SUCCESS);
  CHECK(cudaStreamSynchronize(stream) == cudaErrorIllegalAddress);
  CHECK(std::string(cudaGetErrorString(cudaErrorIllegalAddress)).find("C reaches outside") != std::string::npos);
  mt_emu::reset_context();
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
  CHECK(cublasDestroy(handle) == CUBLAS_STATUS_SUCCESS);
}
