// InlineVector (tensor/inline_vector.h): elements inline up to N, on the heap past it, each one
// constructed and destroyed exactly once whichever way the vector is moved, copied or resized.
#include <doctest/doctest.h>

#include <utility>
#include <vector>

#include "tensor/inline_vector.h"

using mt::InlineVector;

namespace {

// Counts live objects, so a leak or a double destruction shows as a nonzero balance.
int live = 0;
struct Counted {
  int value;
  Counted(int v = 0) : value(v) { ++live; }
  Counted(const Counted& o) : value(o.value) { ++live; }
  Counted(Counted&& o) noexcept : value(o.value) { ++live; }
  Counted& operator=(const Counted&) = default;
  Counted& operator=(Counted&&) = default;
  ~Counted() { --live; }
};
using Vec = InlineVector<Counted, 2>;

// True when v's elements sit inside v itself.
bool is_inline(const Vec& v) {
  const auto* p = reinterpret_cast<const char*>(v.data());
  return p >= reinterpret_cast<const char*>(&v) && p < reinterpret_cast<const char*>(&v + 1);
}

std::vector<int> values(const Vec& v) {
  std::vector<int> out;
  for (const Counted& c : v) out.push_back(c.value);
  return out;
}
using Ints = std::vector<int>;

}  // namespace

TEST_CASE("an InlineVector keeps N elements inline and moves to the heap past N") {
  {
    Vec v{Counted(1), Counted(2)};
    CHECK(is_inline(v));
    v.push_back(Counted(3));
    CHECK_FALSE(is_inline(v));
    v.emplace_back(4);
    CHECK(values(v) == Ints{1, 2, 3, 4});
    CHECK(v.size() == 4);
    CHECK(live == 4);
    v.pop_back();
    CHECK(v.back().value == 3);
  }
  CHECK(live == 0);
}

TEST_CASE("an InlineVector appends a copy of its own element while it grows") {
  {
    Vec v{Counted(8), Counted(9)};
    v.push_back(v[0]);  // the reference points into the inline buffer the elements are leaving
    CHECK(values(v) == Ints{8, 9, 8});
  }
  CHECK(live == 0);
}

TEST_CASE("moving an InlineVector moves inline elements and hands over a heap block") {
  {
    Vec small{Counted(1)};
    Vec moved(std::move(small));
    CHECK(values(moved) == Ints{1});
    CHECK(small.empty());
    CHECK(is_inline(moved));

    Vec big{Counted(1), Counted(2), Counted(3)};
    const Counted* block = big.data();
    Vec taken(std::move(big));
    CHECK(taken.data() == block);  // the same heap block, no element moved
    CHECK(big.empty());
    CHECK(is_inline(big));

    taken = std::move(moved);  // heap-backed target: its block is freed, the inline elements come in
    CHECK(values(taken) == Ints{1});
    CHECK(is_inline(taken));
    CHECK(live == 1);
  }
  CHECK(live == 0);
}

TEST_CASE("copying and resizing an InlineVector") {
  {
    Vec v{Counted(1), Counted(2), Counted(3)};
    Vec copy = v;
    copy[0].value = 7;
    CHECK(values(v) == Ints{1, 2, 3});
    CHECK(values(copy) == Ints{7, 2, 3});
    copy = v;
    CHECK(values(copy) == Ints{1, 2, 3});

    v.resize(5);  // value-initialised: zeros
    CHECK(values(v) == Ints{1, 2, 3, 0, 0});
    v.resize(1);
    CHECK(values(v) == Ints{1});
    CHECK(live == 4);
    v.clear();
    CHECK(v.empty());
    CHECK(live == 3);

    InlineVector<int, 3> sized(3);  // ints value-initialised to zero, as std::vector's are
    CHECK((sized[0] == 0 && sized[1] == 0 && sized[2] == 0));
  }
  CHECK(live == 0);
}
