// MPI's process-wide side (see detail/mpi_runtime.h).
#include "distributed/process_group/mpi/detail/mpi_runtime.h"

#include <climits>

#include "tensor/half.h"

namespace mt::dist::detail {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(length));
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

namespace {

// The sum and max of 16-bit floats of one format, given its two conversions.
template <float (*widen)(uint16_t), uint16_t (*narrow)(float)>
void sum16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = narrow(widen(a[i]) + widen(b[i]));
}
template <float (*widen)(uint16_t)>
void max16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    if (widen(b[i]) < widen(a[i])) b[i] = a[i];
}
constexpr float half_to_float_fn(uint16_t h) { return half_to_float(h); }
constexpr uint16_t float_to_half_fn(float f) { return float_to_half(f); }
constexpr float bfloat16_to_float_fn(uint16_t b) { return bfloat16_to_float(b); }
constexpr uint16_t float_to_bfloat16_fn(float f) { return float_to_bfloat16(f); }

}  // namespace

Runtime& Runtime::get() {
  static Runtime runtime;
  return runtime;
}

Runtime::Runtime() {
  int initialized = 0, finalized = 0;
  MT_MPI_CHECK(MPI_Initialized(&initialized));
  MT_MPI_CHECK(MPI_Finalized(&finalized));
  MT_CHECK(!finalized, "ProcessGroupMPI: MPI was already finalized in this process, and MPI cannot be "
           "initialised twice; create the group before calling MPI_Finalize");
  if (initialized) {
    MT_MPI_CHECK(MPI_Query_thread(&provided));
  } else {
    MT_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    owns_ = true;
  }
  MT_CHECK(provided >= MPI_THREAD_SERIALIZED, "ProcessGroupMPI needs MPI_THREAD_SERIALIZED (its Works may be "
           "waited for from any thread), but MPI granted ", thread_level_name(provided), initialized ?
           "; initialise MPI with MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...)" : "; use an MPI built "
           "with thread support");
  MT_MPI_CHECK(MPI_Op_create(&sum16<half_to_float_fn, float_to_half_fn>, /*commute=*/1, &half_sum_op));
  MT_MPI_CHECK(MPI_Op_create(&max16<half_to_float_fn>, /*commute=*/1, &half_max_op));
  MT_MPI_CHECK(MPI_Op_create(&sum16<bfloat16_to_float_fn, float_to_bfloat16_fn>, /*commute=*/1, &bf16_sum_op));
  MT_MPI_CHECK(MPI_Op_create(&max16<bfloat16_to_float_fn>, /*commute=*/1, &bf16_max_op));
}
Runtime::~Runtime() { finalize(); }

void Runtime::finalize() {
  int finalized = 0;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  MPI_Op_free(&half_sum_op);
  MPI_Op_free(&half_max_op);
  MPI_Op_free(&bf16_sum_op);
  MPI_Op_free(&bf16_max_op);
  if (owns_ && !unfinished) MPI_Finalize();
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int64: return MPI_INT64_T;
    case DType::Float16: return MPI_UINT16_T;  // bits only; see sum16
    case DType::BFloat16: return MPI_UINT16_T;
    default: MT_FAIL("ProcessGroupMPI: dtype ", dtype, " is not supported");
  }
}

int mpi_count(const Tensor& t, const std::string& what) {
  MT_CHECK(t.numel() <= INT_MAX, what, ": ", t.numel(), " elements is more than MPI's int count holds; "
           "split the tensor");
  return static_cast<int>(t.numel());
}

MPI_Op mpi_op(DType dtype, ReduceOp op) {
  if (dtype == DType::Float16) return op == ReduceOp::Max ? Runtime::get().half_max_op : Runtime::get().half_sum_op;
  if (dtype == DType::BFloat16) return op == ReduceOp::Max ? Runtime::get().bf16_max_op : Runtime::get().bf16_sum_op;
  return op == ReduceOp::Max ? MPI_MAX : MPI_SUM;
}

void divide(const Tensor& t, int n) {
  const auto numel = static_cast<size_t>(t.numel());
  if (t.dtype() == DType::Float16) {
    auto* p = static_cast<uint16_t*>(t.raw_data());
    for (size_t i = 0; i < numel; ++i) p[i] = float_to_half(half_to_float(p[i]) / static_cast<float>(n));
  } else if (t.dtype() == DType::BFloat16) {
    auto* p = static_cast<uint16_t*>(t.raw_data());
    for (size_t i = 0; i < numel; ++i) p[i] = float_to_bfloat16(bfloat16_to_float(p[i]) / static_cast<float>(n));
  } else if (t.dtype() == kFloat32) {
    auto* p = static_cast<float*>(t.raw_data());
    for (size_t i = 0; i < numel; ++i) p[i] /= static_cast<float>(n);
  } else {
    auto* p = static_cast<double*>(t.raw_data());
    for (size_t i = 0; i < numel; ++i) p[i] /= n;
  }
}

}  // namespace mt::dist::detail
