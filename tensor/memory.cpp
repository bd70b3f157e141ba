// The kinds, the sizes and the per-device dispatch of tensor/memory.h. The CPU's counts and cap live
// with the CPU allocator (tensor/cpu/cpu_allocator.cpp), CUDA's in its BlockCache; this file only
// picks one. Compiled into every build: the CUDA branch exists with the CUDA backend (MT_HAVE_CUDA).
#include "tensor/memory.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "tensor/caching_allocator.h"

#if defined(MT_HAVE_CUDA) && MT_HAVE_CUDA
#include "tensor/cuda/cuda_allocator.h"
#endif

namespace mt {

namespace {
thread_local MemoryKind g_kind = MemoryKind::kOther;
}  // namespace

const char* memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kParameters: return "parameters";
    case MemoryKind::kGradients: return "gradients";
    case MemoryKind::kOptimizerState: return "optimizer state";
    case MemoryKind::kOther: break;
  }
  return "activations and the rest";
}

MemoryKind current_memory_kind() { return g_kind; }
MemoryKindGuard::MemoryKindGuard(MemoryKind kind) : previous_(g_kind) { g_kind = kind; }
MemoryKindGuard::~MemoryKindGuard() { g_kind = previous_; }

TensorMemory tensor_memory(Device device) {
  if (device.is_cpu()) return detail::cpu_tensor_memory();
#if defined(MT_HAVE_CUDA) && MT_HAVE_CUDA
  const CacheStats s = cuda::memory_stats(device.index);
  return {.in_use = s.bytes_in_use, .peak = s.peak_bytes_in_use, .limit = s.limit};
#else
  MT_FAIL("tensor_memory: ", device, " is not in this build (no CUDA backend)");
#endif
}

void set_memory_limit(Device device, size_t bytes) {
  if (device.is_cpu()) return detail::set_cpu_memory_limit(bytes);
#if defined(MT_HAVE_CUDA) && MT_HAVE_CUDA
  cuda::set_memory_limit(device.index, bytes);
#else
  MT_FAIL("set_memory_limit: ", device, " is not in this build (no CUDA backend)");
#endif
}

size_t parse_memory_size(std::string_view text, std::string_view what) {
  const std::string s(text);
  const auto bad = [&] {
    MT_FAIL(what, " must be a size such as 300M, 2G or a number of bytes, got '", s, "'");
  };
  char* end = nullptr;
  const double number = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(number) || number <= 0) bad();
  std::string unit(end);  // "", "B", or K/M/G/T with an optional "B" or "iB"
  if (unit.ends_with("iB")) unit.resize(unit.size() - 2);
  else if (unit.size() == 2 && unit[1] == 'B') unit.resize(1);
  double scale = 1;
  if (unit == "K" || unit == "k") scale = 1024.0;
  else if (unit == "M" || unit == "m") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty() && unit != "B") bad();
  const double bytes = number * scale;
  if (bytes < 1 || bytes > 9.0e18) bad();
  return static_cast<size_t>(bytes);
}

std::string format_mib(size_t bytes) {
  char out[32];
  std::snprintf(out, sizeof out, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  return out;
}

}  // namespace mt
