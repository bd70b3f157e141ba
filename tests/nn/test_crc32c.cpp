// Tests for nn/crc32c: the published check value, and the fast forms equal to the bitwise
// definition at every length and alignment, also when a CRC is continued across calls. One case,
// skipped unless asked for, measures the cost of checksums on a 100 MB tensor:
//   build/test_nn --no-skip --test-case="crc32c: throughput*"
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "nn/crc32c.h"
#include "nn/safetensors.h"
#include "tensor/generator.h"

TEST_CASE("crc32c: the check value of \"123456789\" is 0xE3069283, in every form") {
  const std::string check = "123456789";
  CHECK(mt::crc32c(check.data(), check.size()) == 0xE3069283u);
  CHECK(mt::detail::crc32c_sliced(check.data(), check.size()) == 0xE3069283u);
  CHECK(mt::detail::crc32c_bitwise(check.data(), check.size()) == 0xE3069283u);
  CHECK(mt::crc32c(nullptr, 0) == 0u);  // no bytes: the initial value and final xor cancel
}

TEST_CASE("crc32c: sliced and hardware forms equal the bitwise definition") {
  MESSAGE("crc32c uses the CPU's instruction here: " << mt::detail::crc32c_hardware());
  std::mt19937 rng(43);
  std::vector<uint8_t> buf(300);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  // Lengths around the 8-byte steps, from every alignment of the start.
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n + offset <= 200; ++n) {
      const uint8_t* p = buf.data() + offset;
      const uint32_t want = mt::detail::crc32c_bitwise(p, n);
      CAPTURE(offset);
      CAPTURE(n);
      REQUIRE(mt::detail::crc32c_sliced(p, n) == want);
      REQUIRE(mt::crc32c(p, n) == want);
      // Continued: the CRC of the first part carried into the second is the CRC of the whole.
      const size_t half = n / 3;
      REQUIRE(mt::crc32c(p + half, n - half, mt::crc32c(p, half)) == want);
      REQUIRE(mt::detail::crc32c_sliced(p + half, n - half, mt::detail::crc32c_sliced(p, half)) == want);
    }
  }
}

// Not a test: how much the checksums add to saving and loading a big tensor. Numbers, no verdict.
TEST_CASE("crc32c: throughput on 100 MB, and a 100 MB tensor saved and loaded" * doctest::skip()) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  const int64_t n = 25 * 1024 * 1024;  // float32: 100 MiB
  mt::Generator gen(43);
  mt::Tensor t = mt::randn({n}, gen);
  const double mb = static_cast<double>(n) * 4 / 1e6;
  auto t0 = Clock::now();
  uint32_t crc = mt::crc32c(t.raw_data(), static_cast<size_t>(n) * 4);
  const double fast = seconds(t0);
  t0 = Clock::now();
  CHECK(mt::detail::crc32c_sliced(t.raw_data(), static_cast<size_t>(n) * 4) == crc);
  const double sliced = seconds(t0);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("mt_crc_" + std::to_string(::getpid()) + ".safetensors")).string();
  t0 = Clock::now();
  mt::save_safetensors(path, {{"t", t}});
  const double save = seconds(t0);
  t0 = Clock::now();
  mt::load_safetensors(path);
  const double load = seconds(t0);
  std::filesystem::remove(path);
  MESSAGE("crc32c (" << (mt::detail::crc32c_hardware() ? "SSE4.2" : "sliced") << "): " << mb / fast
                     << " MB/s; slicing-by-8: " << mb / sliced << " MB/s; save " << save << " s, load " << load
                     << " s for " << mb << " MB (the checksum is " << fast << " s of each)");
}
