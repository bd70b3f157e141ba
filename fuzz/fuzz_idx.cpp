// libFuzzer target for the IDX reader (data/idx.cpp) and the gzip inflation under it
// (data/file_io.cpp; Note [Hostile files] there). decode_idx must turn every input, plain or gzip,
// into either a tensor or an mt::Error: any other exception, a crash, a sanitizer report, a leak or
// a huge allocation is a bug. An accepted file must decode to the same values as int64 and as
// normalised float32, and the tensor must hold one element per data byte of the (inflated) file.
//
// Build and run (clang and libclang-rt-14-dev; the library built with the same compiler and ASan):
//   cmake -S . -B /tmp/build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DMT_SANITIZE=ON \
//         -DMT_BUILD_TESTS=OFF -DMT_BUILD_BENCH=OFF && ninja -C /tmp/build-fuzz minitrain
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I. fuzz/fuzz_idx.cpp data/idx.cpp \
//         data/file_io.cpp /tmp/build-fuzz/libminitrain.a -lz -lopenblas -lpthread -o /tmp/fuzz_idx
//   mkdir -p /tmp/idx-corpus && /tmp/fuzz_idx /tmp/idx-corpus -max_total_time=60 \
//         -dict=fuzz/idx.dict -rss_limit_mb=2048 -malloc_limit_mb=512
// (data/idx.cpp and data/file_io.cpp are compiled here, not taken from the library, so that
// libFuzzer instruments them; zlib itself is not instrumented.) Seed the corpus with small IDX
// files, plain and gzip'd: the first few hundred bytes of a real one, with its dims edited, will do.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mt::Tensor ints;
  try {
    ints = mt::data::decode_idx(data, size, "<fuzz>");
  } catch (const mt::Error&) {
    return 0;  // a rejected file: the expected outcome for almost every input
  }
  const mt::Tensor floats = mt::data::decode_idx(data, size, "<fuzz>", {.dtype = mt::kFloat32, .normalize = true});
  if (!(floats.sizes() == ints.sizes())) std::abort();
  const std::vector<int64_t> b = ints.to_vector<int64_t>();
  const std::vector<float> f = floats.to_vector<float>();
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i] < 0 || b[i] > 255 || f[i] != static_cast<float>(b[i]) / 255.0f) std::abort();
  }
  return 0;
}
