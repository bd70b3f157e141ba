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

// The values every case builds: stride `stride`, padding 0, dilation 1, one group.
template <class O>
bool holds(const O& o, long stride) {
  return o.stride.h == stride && o.stride.w == stride && o.padding.h == 0 && o.padding.w == 0 &&
         o.dilation.h == 1 && o.dilation.w == 1 && o.groups == 1;
}
__attribute__((noipa)) bool intact(long, long, Pair, Options o, long stride) { return holds(o, stride); }
__attribute__((noipa)) bool intact_layer(long, long, Pair, LayerOptions o) { return holds(o, 1) && o.bias; }

int main() { return intact(3, 8, 3, {}, 1) && intact(3, 8, 3, {2}, 2) && intact_layer(3, 8, 3, {}) ? 0 : 1; }
