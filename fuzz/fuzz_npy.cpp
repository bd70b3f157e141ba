// libFuzzer target for the NPY reader (data/npy.cpp, Note [Hostile files] in data/file_io.cpp).
// decode_npy must turn every input into either a tensor or an mt::Error: any other exception, a
// crash, a sanitizer report, a leak or a huge allocation is a bug. An accepted array is written
// again and read once more, which must give the same shape, dtype and values, and writing that
// must reproduce the same bytes.
//
// Build and run (clang and libclang-rt-14-dev; the library built with the same compiler and ASan):
//   cmake -S . -B /tmp/build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DMT_SANITIZE=ON \
//         -DMT_BUILD_TESTS=OFF -DMT_BUILD_BENCH=OFF && ninja -C /tmp/build-fuzz minitrain
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I. fuzz/fuzz_npy.cpp data/npy.cpp \
//         data/file_io.cpp /tmp/build-fuzz/libminitrain.a -lz -lopenblas -lpthread -o /tmp/fuzz_npy
//   mkdir -p /tmp/npy-corpus && /tmp/fuzz_npy /tmp/npy-corpus -max_total_time=60 \
//         -dict=fuzz/npy.dict -rss_limit_mb=2048 -malloc_limit_mb=512
// (data/npy.cpp and data/file_io.cpp are compiled here, not taken from the library, so that
// libFuzzer instruments them.) Seed the corpus with real files: any .npy numpy or the tests write.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "data/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mt::Tensor t;
  try {
    t = mt::data::decode_npy(data, size, "<fuzz>");
  } catch (const mt::Error&) {
    return 0;  // a rejected file: the expected outcome for almost every input
  }
  // Accepted: writing it back and reading that must give the same shape and dtype, and writing that
  // the same bytes (so the same values: NaN payloads included, which a value comparison would miss).
  const std::string again = mt::data::encode_npy(t);
  const mt::Tensor round =
      mt::data::decode_npy(reinterpret_cast<const uint8_t*>(again.data()), again.size(), "<fuzz re-encoded>");
  if (!(round.sizes() == t.sizes()) || round.dtype() != t.dtype()) std::abort();
  if (mt::data::encode_npy(round) != again) std::abort();
  return 0;
}
