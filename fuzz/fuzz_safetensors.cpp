// libFuzzer target for the safetensors reader (nn/safetensors_read.cpp, Note [Hostile safetensors files]).
// decode_safetensors must turn every input into either tensors or an mt::Error: any other exception,
// a crash, a sanitizer report, a leak or a huge allocation is a bug. Decoded files are encoded again
// and decoded once more, which must give the same names, metadata and bytes.
//
// An input whose first byte is even is a file as it is. One whose first byte is odd is "header mode":
// bytes 1-2 give the data section's size (little-endian), the rest is the header, and the target
// supplies the matching 8-byte length and zero data. Random bytes almost never carry a length prefix
// that matches their header, so without this mode the fuzzer would rarely get past the first check.
//
// Build and run (clang and libclang-rt-14-dev; the library built with the same compiler and ASan):
//   cmake -S . -B /tmp/build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DMT_SANITIZE=ON \
//         -DMT_BUILD_TESTS=OFF -DMT_BUILD_BENCH=OFF && ninja -C /tmp/build-fuzz minitrain
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I. fuzz/fuzz_safetensors.cpp \
//         nn/safetensors.cpp nn/safetensors_read.cpp nn/crc32c.cpp /tmp/build-fuzz/libminitrain.a -lopenblas \
//         -lpthread -o /tmp/fuzz_safetensors
//   mkdir -p /tmp/st-corpus && /tmp/fuzz_safetensors /tmp/st-corpus -max_total_time=60 \
//         -dict=fuzz/safetensors.dict -rss_limit_mb=2048 -malloc_limit_mb=512
// (The reader, the writer the round trip uses and the checksum both compute, nn/crc32c.cpp, are
// compiled here, not taken from the library, so that libFuzzer instruments them.)
// Seed the corpus with real files to start deeper: any .safetensors the tests write will do.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "nn/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string built;
  if (size >= 3 && (data[0] & 1)) {
    uint64_t n = size - 3;
    built.assign(reinterpret_cast<const char*>(&n), 8);
    built.append(reinterpret_cast<const char*>(data + 3), n);
    built.append(data[1] | (data[2] << 8), '\0');
    data = reinterpret_cast<const uint8_t*>(built.data());
    size = built.size();
  }
  mt::SafetensorsFile file;
  try {
    file = mt::decode_safetensors(data, size, "<fuzz>");
  } catch (const mt::Error&) {
    return 0;  // a rejected file: the expected outcome for almost every input
  }
  // Accepted: writing it back and reading that must reproduce it exactly.
  std::string again = mt::encode_safetensors(file.tensors, file.metadata);
  mt::SafetensorsFile round = mt::decode_safetensors(
      reinterpret_cast<const uint8_t*>(again.data()), again.size(), "<fuzz re-encoded>");
  if (round.metadata != file.metadata || round.tensors.size() != file.tensors.size()) std::abort();
  std::string twice = mt::encode_safetensors(round.tensors, round.metadata);
  if (twice != again) std::abort();
  return 0;
}
