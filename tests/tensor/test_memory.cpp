// tensor/memory.h: the memory limit (Note [Memory limit]) on CPU tensors of every size class and on
// BlockCache (the CUDA allocator's bookkeeping), the kinds counted at the peak (Note [Memory kinds]),
// and sizes as the command line writes them.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "minitrain.h"
#include "tensor/caching_allocator.h"
#include "tensor/memory.h"

using namespace mt;

namespace {
constexpr size_t kMiB = size_t{1} << 20;

// The limit, lifted again when the test ends however it ends.
struct CpuLimit {
  explicit CpuLimit(size_t bytes) { set_memory_limit(kCPU, bytes); }
  ~CpuLimit() { set_memory_limit(kCPU, 0); }
};

size_t kind_at_peak(MemoryKind kind) { return tensor_memory(kCPU).peak_by_kind[static_cast<size_t>(kind)]; }
}  // namespace

TEST_CASE("sizes are read as the command line writes them, and anything else is refused naming the flag") {
  CHECK(parse_memory_size("300M", "--max-memory") == 300 * kMiB);
  CHECK(parse_memory_size("2G", "--max-memory") == 2048 * kMiB);
  CHECK(parse_memory_size("1.5K", "--max-memory") == 1536);
  CHECK(parse_memory_size("4MiB", "--max-memory") == 4 * kMiB);
  CHECK(parse_memory_size("4MB", "--max-memory") == 4 * kMiB);
  CHECK(parse_memory_size("4096", "--max-memory") == 4096);
  CHECK(parse_memory_size("4096B", "--max-memory") == 4096);
  for (const char* bad : {"", "M", "lots", "-1", "0", "10X", "3 G", "nan"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(parse_memory_size(bad, "--max-memory"),
                         doctest::Contains("--max-memory must be a size such as 300M, 2G or a number of bytes"), Error);
  }
  CHECK(format_mib(3 * kMiB / 2) == "1.5 MiB");
}

TEST_CASE("the CPU limit refuses the tensor that would pass it, in every size class, and counts nothing for it") {
  // 64 bytes: inline in the storage's block; 64 KiB: malloc; 1 MiB: the cache of large blocks
  // (Note [Large CPU blocks are cached]). Each is refused once the same size is already held.
  for (int64_t floats : {16, 16 * 1024, 256 * 1024}) {
    CAPTURE(floats);
    const size_t nbytes = static_cast<size_t>(floats) * 4;
    const size_t base = tensor_memory(kCPU).in_use;
    CpuLimit limit(base + nbytes + nbytes / 2);
    CHECK(tensor_memory(kCPU).limit == base + nbytes + nbytes / 2);
    Tensor first = empty({floats});
    std::string message;
    try {
      Tensor second = empty({floats});
      FAIL("a second tensor of " << nbytes << " bytes fit under the limit");
    } catch (const OutOfMemoryError& e) {
      message = e.what();
    }
    CHECK(message.find("out of memory: CPU tensors are limited to " + format_mib(base + nbytes + nbytes / 2)) == 0);
    CHECK(message.find("a request for " + format_mib(nbytes) + " came with " + format_mib(base + nbytes) + " in use") !=
          std::string::npos);
    CHECK(tensor_memory(kCPU).in_use == base + nbytes);  // the refused one left no count behind
    first = Tensor();
    Tensor again = empty({floats});  // freed memory is room again
    CHECK(tensor_memory(kCPU).in_use == base + nbytes);
  }
  Tensor unlimited = empty({1024 * 1024});  // the limit lifted: 4 MiB is fine again
  CHECK(tensor_memory(kCPU).limit == 0);
}

TEST_CASE("the peak comes with its kinds, and a tensor's kind is the one it was allocated under") {
  // Three size classes per kind, so that every path carries its block's kind to the free.
  const auto three = [] { return std::vector<Tensor>{empty({16}), empty({16 * 1024}), empty({256 * 1024})}; };
  const size_t each = (16 + 16 * 1024 + 256 * 1024) * 4;
  reset_cpu_peak_memory();
  const size_t params_before = kind_at_peak(MemoryKind::kParameters);
  const size_t grads_before = kind_at_peak(MemoryKind::kGradients);
  std::vector<Tensor> params, grads;
  {
    MemoryKindGuard kind(MemoryKind::kParameters);
    params = three();
    {
      MemoryKindGuard inner(MemoryKind::kGradients);  // guards nest
      grads = three();
    }
    CHECK(current_memory_kind() == MemoryKind::kParameters);
  }
  CHECK(current_memory_kind() == MemoryKind::kOther);
  Tensor activations = empty({1024 * 1024});  // the peak: 4 MiB of kOther on top
  CHECK(kind_at_peak(MemoryKind::kParameters) == params_before + each);
  CHECK(kind_at_peak(MemoryKind::kGradients) == grads_before + each);
  const TensorMemory at_peak = tensor_memory(kCPU);
  size_t sum = 0;
  for (size_t k : at_peak.peak_by_kind) sum += k;
  CHECK(sum == at_peak.peak);
  CHECK(at_peak.has_kinds);
  // Freed under another kind, the parameters still leave the parameters' count.
  activations = Tensor();
  {
    MemoryKindGuard kind(MemoryKind::kGradients);
    params.clear();
  }
  Tensor bigger = empty({4 * 1024 * 1024});  // a new peak, 16 MiB: the parameters are gone from it
  CHECK(kind_at_peak(MemoryKind::kParameters) == params_before);
  CHECK(kind_at_peak(MemoryKind::kGradients) == grads_before + each);
  CHECK(std::string(memory_kind_name(MemoryKind::kOther)) == "activations and the rest");
}

TEST_CASE("BlockCache's limit refuses a request before taking a block, and the tag comes back with the free") {
  int mallocs = 0;
  BlockCache cache([&](size_t n) { ++mallocs; return std::malloc(n); }, [](void* p, size_t) { std::free(p); },
                   "test cache");
  cache.set_limit(3 * kMiB);
  void* a = cache.allocate(2 * kMiB, 0, /*tag=*/2);
  CHECK_THROWS_WITH_AS(cache.allocate(2 * kMiB, 0), doctest::Contains("out of memory: test cache tensors are limited "
                                                                      "to 3.0 MiB"), OutOfMemoryError);
  CHECK(mallocs == 1);  // refused before any segment was made
  CHECK(cache.stats().bytes_in_use == 2 * kMiB);
  CHECK(cache.stats().limit == 3 * kMiB);
  void* b = cache.allocate(kMiB, 0, /*tag=*/3);  // exactly up to the limit
  CHECK(cache.deallocate(a) == 2);
  CHECK(cache.deallocate(b) == 3);
  cache.set_limit(0);
  cache.deallocate(cache.allocate(8 * kMiB, 0));
}

TEST_CASE("a large CPU block can be recounted as another kind, and a small one keeps its kind") {
  Tensor large = empty({256 * 1024});  // 1 MiB: the cache of large blocks
  Tensor small = empty({1024});        // 4 KiB: malloc
  CHECK(set_memory_kind(large.storage()->data(), large.storage()->nbytes(), MemoryKind::kGradients));
  CHECK_FALSE(set_memory_kind(small.storage()->data(), small.storage()->nbytes(), MemoryKind::kGradients));
  reset_cpu_peak_memory();
  const size_t grads = kind_at_peak(MemoryKind::kGradients);
  large = Tensor();  // freed as gradients
  reset_cpu_peak_memory();
  CHECK(kind_at_peak(MemoryKind::kGradients) == grads - 1024 * 1024);
}
