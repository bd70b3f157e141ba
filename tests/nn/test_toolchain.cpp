// The build's compiler flags against Note [GCC 12's wrong broadcast] (cmake/Toolchain.cmake): an
// options struct of pairs passed by value must arrive with the values it was built with. Compiled
// with the same flags as the library (-march=native where MT_NATIVE is on), so on a compiler and
// CPU with the bug these cases fail unless the configure-time workaround is in place.
#include <doctest/doctest.h>

#include "minitrain.h"
#include "nn/nn.h"

using namespace mt;

namespace {

// The probe's pattern (cmake/native_codegen_probe.cpp) on minitrain's own types: the callee is
// opaque, so the caller builds the options on the stack.
__attribute__((noipa)) Conv2dOptions received(int64_t, int64_t, Size2, Conv2dOptions options) { return options; }

}  // namespace

TEST_CASE("options passed by value arrive as built (Note [GCC 12's wrong broadcast])") {
  const Conv2dOptions defaults = received(3, 8, 3, {});
  CHECK(defaults.stride == Size2(1));
  CHECK(defaults.padding == Size2(0));
  CHECK(defaults.dilation == Size2(1));
  CHECK(defaults.groups == 1);
  const Conv2dOptions strided = received(3, 8, 3, {.stride = 2});
  CHECK(strided.stride == Size2(2));
  CHECK(strided.padding == Size2(0));
  CHECK(strided.dilation == Size2(1));
}

TEST_CASE("Conv2d with default options has no padding: a 3x3 kernel shrinks 5x5 to 3x3") {
  nn::Conv2d conv(3, 8, 3);
  CHECK(conv.options.stride == Size2(1));
  CHECK(conv.options.padding.size == Size2(0));
  CHECK(conv.options.dilation == Size2(1));
  CHECK(conv(zeros({1, 3, 5, 5})).sizes() == Shape({1, 8, 3, 3}));
  nn::Conv2d padded(3, 8, 3, {.padding = 1});
  CHECK(padded(zeros({1, 3, 5, 5})).sizes() == Shape({1, 8, 5, 5}));
}
