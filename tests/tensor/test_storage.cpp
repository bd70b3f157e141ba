// Storage that lets go of its bytes (Note [Storage that lets go of its bytes], tensor/storage.h):
// release() gives them back to the allocator, as cpu_memory_stats counts, and keeps the Storage
// object, its size and its version; take_bytes() adopts another storage's bytes without a copy; a
// tensor over a released storage is refused with one clear error, not read.
#include <doctest/doctest.h>

#include <string>

#include "tensor/backend.h"
#include "tensor/raw_ops.h"

using namespace mt;

namespace {

// A float tensor over a storage of the CPU allocator's (never a small tensor's inline bytes).
Tensor allocator_tensor(int64_t n) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(n) * sizeof(float), kCPU, backend(kCPU).allocator());
  impl->sizes = Shape{n};
  impl->strides = Shape{1};
  return Tensor(impl);
}

}  // namespace

TEST_CASE("a storage releases its bytes and takes another's: counted, the same object, the same version") {
  const size_t before = cpu_memory_stats().bytes_in_use;
  Tensor t = allocator_tensor(1000);
  raw::fill_(t, 1.0);
  const Storage* object = t.storage().get();
  const uint64_t version = t.version();
  CHECK(cpu_memory_stats().bytes_in_use == before + 4000);
  t.storage()->release();
  CHECK(t.storage()->released());
  CHECK(t.storage()->nbytes() == 4000);
  CHECK(cpu_memory_stats().bytes_in_use == before);
  std::string refused;
  try {
    (void)t.to_vector<float>();
  } catch (const Error& e) {
    refused = e.what();
  }
  CHECK(refused.find("released its bytes") != std::string::npos);
  Tensor other = allocator_tensor(1000);
  raw::fill_(other, 2.0);
  t.storage()->take_bytes(*other.storage());
  CHECK(t.storage().get() == object);
  CHECK(t.version() == version);  // the same values are back (the releaser's contract): no bump
  CHECK(other.storage()->released());
  CHECK(t.to_vector<float>() == std::vector<float>(1000, 2.0f));
  CHECK(cpu_memory_stats().bytes_in_use == before + 4000);  // moved, not copied
  CHECK_THROWS_WITH_AS(t.storage()->take_bytes(*allocator_tensor(1000).storage()),
                       doctest::Contains("still holds its bytes"), Error);
  CHECK_THROWS_WITH_AS(empty({4}).storage()->release(), doctest::Contains("Small bytes inline"), Error);
  t = Tensor(), other = Tensor();
  CHECK(cpu_memory_stats().bytes_in_use == before);
}
