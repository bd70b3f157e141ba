// Configure-time probe for Note [GCC 12's wrong broadcast] (cmake/Toolchain.cmake): exits 0 when the
// compiler, with the flags it is given, passes this options struct by value with its values intact,
// and 1 when it does not. The struct has the shape of nn::Conv2dLayerOptions: pairs of 64-bit values
// initialised to 1, 0 and 1, more than 16 bytes in all, so it travels on the stack. The call is kept
// opaque (noipa) so the caller must build the struct in memory, where the bug lives.
struct Pair {
  long h = 0, w = 0;
  constexpr Pair() = default;
  constexpr Pair(long both) : h(both), w(both) {}  // NOLINT: implicit, as Size2's is
};
struct Options {
  Pair stride = 1;
  Pair padding = 0;
  Pair dilation = 1;
  long groups = 1;
  bool bias = true;
};

__attribute__((noipa)) int intact(long, long, Pair, Options o) {
  return o.stride.h == 1 && o.stride.w == 1 && o.padding.h == 0 && o.padding.w == 0 && o.dilation.h == 1 &&
         o.dilation.w == 1 && o.groups == 1 && o.bias;
}

int main() { return intact(3, 8, 3, {}) ? 0 : 1; }
