// Samplers: the shuffle is a fair permutation fixed by (seed, epoch), and DistributedSampler splits an
// epoch across ranks exactly as PyTorch's does (padding, drop_last, strided split, epoch seeding).
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "data/sampler.h"
#include "tensor/check.h"

using namespace mt;
using namespace mt::data;

namespace {

std::vector<std::vector<int64_t>> all_ranks(int64_t n, int64_t replicas, DistributedSamplerOptions opts,
                                            int64_t epoch = 0) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < replicas; ++r) {
    DistributedSampler s(n, replicas, r, opts);
    s.set_epoch(epoch);
    out.push_back(s.indices());
    CHECK(static_cast<int64_t>(out.back().size()) == s.num_samples());
  }
  return out;
}

// The global padded list the ranks took their strides from: element i belongs to rank i % replicas.
std::vector<int64_t> interleave(const std::vector<std::vector<int64_t>>& ranks) {
  std::vector<int64_t> all;
  for (size_t i = 0; i < ranks[0].size(); ++i)
    for (const auto& r : ranks) all.push_back(r[i]);
  return all;
}

// Fisher–Yates with one Generator::next_u64() call per draw, written out as Note [Unbiased shuffle]
// describes it: the simple version randperm's blocks of draws (Note [Shuffle draws in blocks]) must
// match bit for bit.
std::vector<int64_t> randperm_one_draw_at_a_time(int64_t n, Generator& gen) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t bound = static_cast<uint64_t>(i) + 1;
    unsigned __int128 m = static_cast<unsigned __int128>(gen.next_u64()) * bound;
    while (static_cast<uint64_t>(m) < (0 - bound) % bound) m = static_cast<unsigned __int128>(gen.next_u64()) * bound;
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(m >> 64)]);
  }
  return p;
}

}  // namespace

TEST_CASE("randperm is a permutation fixed by the generator's state") {
  Generator a(5), b(5), c(6);
  const std::vector<int64_t> p = randperm(1000, a);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  CHECK(sorted == identity);
  CHECK(randperm(1000, b) == p);
  CHECK(randperm(1000, c) != p);
  CHECK(a.offset() == 999);  // one Philox block per Fisher–Yates step (Note [Unbiased shuffle])
  CHECK(randperm(0, a).empty());
  CHECK(randperm(1, a) == std::vector<int64_t>{0});
}

TEST_CASE("randperm's blocks of draws give the permutation of one draw at a time, and leave the same state") {
  // Sizes around the block of 256 draws, from a generator that has drawn before.
  for (const int64_t n : {2, 3, 256, 257, 258, 513, 5000}) {
    Generator fast(11), simple(11);
    fast.advance(17), simple.advance(17);
    CHECK(randperm(n, fast) == randperm_one_draw_at_a_time(n, simple));
    CHECK(fast.offset() == simple.offset());
    CHECK(fast.next_u64() == simple.next_u64());
  }
}

TEST_CASE("randperm is uniform: every element is equally likely in every position") {
  // 6000 permutations of 4: each (position, value) count is Binomial(6000, 1/4), sd ≈ 34.
  int counts[4][4] = {};
  for (uint64_t seed = 0; seed < 6000; ++seed) {
    Generator gen(seed);
    const auto p = randperm(4, gen);
    for (int pos = 0; pos < 4; ++pos) ++counts[pos][p[pos]];
  }
  for (auto& row : counts)
    for (int c : row) CHECK((c > 1300 && c < 1700));
}

TEST_CASE("SequentialSampler and RandomSampler") {
  CHECK(SequentialSampler(4).indices() == std::vector<int64_t>{0, 1, 2, 3});

  RandomSampler s(50, 7);
  const auto epoch0 = s.indices();
  CHECK(s.indices() == epoch0);  // nothing advances by itself (Note [Epoch seeding])
  s.set_epoch(1);
  const auto epoch1 = s.indices();
  CHECK(epoch1 != epoch0);
  Generator gen(7 + 1);
  CHECK(epoch1 == randperm(50, gen));
  s.set_epoch(0);
  CHECK(s.indices() == epoch0);
  CHECK_THROWS_WITH_AS(SequentialSampler(-1), doctest::Contains("size must be >= 0"), Error);
}

TEST_CASE("DistributedSampler without shuffle: the hand-worked N=10 over 3 ranks") {
  // Padded to ceil(10/3)*3 = 12 by repeating the front: 0..9, 0, 1. Rank r takes every third.
  auto ranks = all_ranks(10, 3, {.shuffle = false});
  CHECK(ranks[0] == std::vector<int64_t>{0, 3, 6, 9});
  CHECK(ranks[1] == std::vector<int64_t>{1, 4, 7, 0});
  CHECK(ranks[2] == std::vector<int64_t>{2, 5, 8, 1});
  DistributedSampler s(10, 3, 0, {.shuffle = false});
  CHECK(s.num_samples() == 4);
  CHECK(s.total_size() == 12);

  // drop_last truncates to floor(10/3)*3 = 9: index 9 is not seen this epoch.
  ranks = all_ranks(10, 3, {.shuffle = false, .drop_last = true});
  CHECK(ranks[0] == std::vector<int64_t>{0, 3, 6});
  CHECK(ranks[1] == std::vector<int64_t>{1, 4, 7});
  CHECK(ranks[2] == std::vector<int64_t>{2, 5, 8});
}

TEST_CASE("DistributedSampler with shuffle: one permutation shared by all ranks, new each epoch") {
  const DistributedSamplerOptions opts{.shuffle = true, .seed = 42};
  const auto epoch0 = all_ranks(10, 3, opts, 0);
  const std::vector<int64_t> global = interleave(epoch0);

  // Every rank cut its share from the same list: randperm(10, Generator(seed + epoch)) padded with its
  // own first two elements.
  Generator gen(42 + 0);
  std::vector<int64_t> expected = randperm(10, gen);
  expected.push_back(expected[0]);
  expected.push_back(expected[1]);
  CHECK(global == expected);

  // Together the ranks cover the dataset.
  std::set<int64_t> covered(global.begin(), global.end());
  CHECK(covered.size() == 10);

  const auto epoch1 = all_ranks(10, 3, opts, 1);
  CHECK(interleave(epoch1) != global);
  CHECK(all_ranks(10, 3, opts, 0) == epoch0);  // epoch 0 again: the same split
}

TEST_CASE("DistributedSampler pads by cycling when the padding is longer than the dataset") {
  // N = 2 over 5 ranks: 0 1 | 0 1 0 (the list repeated as often as needed).
  const auto ranks = all_ranks(2, 5, {.shuffle = false});
  const std::vector<std::vector<int64_t>> expected = {{0}, {1}, {0}, {1}, {0}};
  CHECK(ranks == expected);

  // drop_last with fewer examples than ranks: nobody gets anything, and all agree on it.
  for (const auto& r : all_ranks(2, 5, {.shuffle = false, .drop_last = true})) CHECK(r.empty());
  // An empty dataset: no samples, no division by zero.
  for (const auto& r : all_ranks(0, 3, {})) CHECK(r.empty());
}

TEST_CASE("DistributedSampler: every rank has the same number of samples for any N") {
  for (int64_t n = 0; n <= 23; ++n)
    for (int64_t replicas = 1; replicas <= 6; ++replicas)
      for (bool drop_last : {false, true}) {
        CAPTURE(n);
        CAPTURE(replicas);
        CAPTURE(drop_last);
        const auto ranks = all_ranks(n, replicas, {.seed = 3, .drop_last = drop_last});
        const size_t per_rank = drop_last ? n / replicas : (n + replicas - 1) / replicas;
        std::set<int64_t> covered;
        for (const auto& r : ranks) {
          CHECK(r.size() == per_rank);
          covered.insert(r.begin(), r.end());
        }
        // Without drop_last every example is seen; with it, all but the n % replicas dropped ones.
        CHECK(covered.size() == static_cast<size_t>(drop_last ? n - n % replicas : n));
      }
}

TEST_CASE("DistributedSampler rejects a rank outside the world") {
  CHECK_THROWS_WITH_AS(DistributedSampler(10, 3, 3), doctest::Contains("rank 3 is out of range for num_replicas 3"),
                       Error);
  CHECK_THROWS_WITH_AS(DistributedSampler(10, 0, 0), doctest::Contains("num_replicas must be >= 1"), Error);
}
