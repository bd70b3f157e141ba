// Configure-time probe for Note [GCC 12's wrong broadcast] (cmake/Toolchain.cmake): exits 0 when the
// compiler, with the flags it is given, passes these options structs by value with their values
// intact, and 1 when it does not. They have the shapes of minitrain's own: pairs of 64-bit values
// initialised to 1, 0 and 1 and a count, more than 16 bytes in all, so they travel on the stack.
// `Options` is Conv2dOptions (tensor/window.h), `LayerOptions` nn::Conv2dLayerOptions with its bias
// flag. Both are needed: on a Zen 4 host (GCC 12.2's -march=native: znver3 with AVX-512) only
// `Options` is built wrong, with -march=icelake-server both are. `{2}` is `{.stride = 2}` in C++17.
// The calls are kept opaque (noipa) so the caller must build each struct in memory, where the bug
// lives.
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
};
struct LayerOptions {
  Pair stride = 1;
  Pair padding = 0;
  Pair dilation = 1;
  long groups = 1;
  bool bias = true;
};

template <class O>
__attribute__((noipa)) bool intact(long, long, Pair, O o) {
  return o.stride.h == 1 && o.stride.w == 1 && o.padding.h == 0 && o.padding.w == 0 && o.dilation.h == 1 &&
         o.dilation.w == 1 && o.groups == 1;
}
__attribute__((noipa)) bool strided(long, long, Pair, Options o) {
  return o.stride.h == 2 && o.stride.w == 2 && o.padding.h == 0 && o.padding.w == 0 && o.dilation.h == 1;
}

int main() {
  const bool layer = intact<LayerOptions>(3, 8, 3, {});
  return intact<Options>(3, 8, 3, {}) && layer && strided(3, 8, 3, {2}) && LayerOptions{}.bias ? 0 : 1;
}
