// cublas(): libcublas looked up by dlopen/dlsym on first use (Note [cuBLAS on first use] in
// cublas_library.h). Tries the soname first (LD_LIBRARY_PATH, the program's RUNPATH, ld.so.cache),
// then the file CMake found at configure time (MT_CUBLAS_PATH), when it found one.
#include "tensor/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>

#include "tensor/check.h"

// The exported name of a cuBLAS function: the macro's expansion (cublasCreate -> "cublasCreate_v2").
#define MT_CUBLAS_NAME_OF(fn) MT_CUBLAS_STRINGIFY(fn)
#define MT_CUBLAS_STRINGIFY(fn) #fn

namespace mt::cuda {
namespace {

#if defined(MT_CUDA_EMULATOR)

CublasLibrary load() {
  return {.create = &cublasCreate, .set_stream = &cublasSetStream, .set_workspace = &cublasSetWorkspace,
          .set_math_mode = &cublasSetMathMode,
          .gemm_strided_batched_ex = static_cast<CublasLibrary::GemmStridedBatchedEx>(&cublasGemmStridedBatchedEx)};
}

#else

void* open_library() {
  void* handle = dlopen(MT_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) return handle;
  const std::string by_soname = dlerror();
  // MT_CUBLAS_PATH is "" when CMake found no file (Note [cuBLAS path is a hint], CMakeLists.txt).
  constexpr bool kHavePath = sizeof(MT_CUBLAS_PATH) > 1;
  if (kHavePath) handle = dlopen(MT_CUBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
  MT_CHECK(handle != nullptr, "cuBLAS could not be loaded for a GEMM on the GPU: dlopen(\"", MT_CUBLAS_SONAME,
           "\"): ", by_soname,
           kHavePath ? std::string("; dlopen(\"") + MT_CUBLAS_PATH + "\"): " + dlerror() : std::string(),
           " (put the CUDA toolkit's library folder on LD_LIBRARY_PATH)");
  return handle;
}

template <typename Fn>
Fn symbol(void* library, const char* name) {
  void* address = dlsym(library, name);
  MT_CHECK(address != nullptr, "cuBLAS (", MT_CUBLAS_SONAME, ") has no function ", name,
           ": it is older than the toolkit minitrain was built with");
  return reinterpret_cast<Fn>(address);
}

CublasLibrary load() {
  void* library = open_library();  // never closed: handles made from it live until exit
  using L = CublasLibrary;
  return {.create = symbol<decltype(L::create)>(library, MT_CUBLAS_NAME_OF(cublasCreate)),
          .set_stream = symbol<decltype(L::set_stream)>(library, MT_CUBLAS_NAME_OF(cublasSetStream)),
          .set_workspace = symbol<decltype(L::set_workspace)>(library, MT_CUBLAS_NAME_OF(cublasSetWorkspace)),
          .set_math_mode = symbol<decltype(L::set_math_mode)>(library, MT_CUBLAS_NAME_OF(cublasSetMathMode)),
          .gemm_strided_batched_ex =
              symbol<decltype(L::gemm_strided_batched_ex)>(library, MT_CUBLAS_NAME_OF(cublasGemmStridedBatchedEx))};
}

#endif

}  // namespace

const CublasLibrary& cublas() {
  static const CublasLibrary library = load();  // a throw leaves it unset: the next call tries again
  return library;
}

}  // namespace mt::cuda
