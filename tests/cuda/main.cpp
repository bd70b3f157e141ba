// The main of test_cuda: runs the GPU tests when this process sees a CUDA GPU, and otherwise exits
// with 77, which CTest reports as "Skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt): a machine
// without a GPU must never count these tests as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "tensor/cuda_info.h"

int main(int argc, char** argv) {
  if (mt::cuda_device_count() == 0) {
    // A driver older than the toolkit is not "no GPU": the reason is printed (Note [Why no GPU]).
    const std::string reason = mt::cuda_unavailable_reason();
    std::printf("SKIPPED: no CUDA GPU (cuda_device_count() == 0; this build %s the CUDA backend)%s%s\n",
                mt::cuda_is_built() ? "has" : "lacks", reason.empty() ? "" : ": ", reason.c_str());
    return 77;
  }
  // On stderr: stdout is also doctest's --list-test-cases answer, which CTest's discovery parses.
  std::fprintf(stderr, "running on cuda:0: %s\n", mt::cuda_device_description(0).c_str());
  doctest::Context context(argc, argv);
  return context.run();
}
