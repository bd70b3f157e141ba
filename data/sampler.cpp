// sampler.cpp: the shuffle (randperm) and the three samplers of sampler.h.
#include "data/sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "tensor/check.h"
#include "tensor/detail/philox.h"

namespace mt::data {
namespace {

// Note [Unbiased shuffle]: Fisher–Yates needs a uniform integer in [0, bound) at each step. The
// tempting `next_u64() % bound` is biased (values below 2^64 mod bound come up once more often than
// the rest). Lemire's multiply-shift ("Fast random integer generation in an interval", 2019) is exact:
// the high 64 bits of x·bound (x uniform in [0, 2^64)) are uniform in [0, bound) once the few x whose
// low half falls below 2^64 mod bound are rejected and redrawn. A rejection happens with probability
// bound / 2^64, so in practice never, but the draw is exact either way. Each draw consumes one Philox
// block (Generator::next_u64), which keeps the stream layout trivial to reproduce elsewhere.
//
// Note [Shuffle draws in blocks]: the words a shuffle draws do not depend on the swaps, only on the
// generator's state, so Draws computes the next_u64() values of up to kDrawBlock consecutive blocks
// in one loop (inlined Philox, no call per draw; a loop the compiler can vectorise) and hands them out
// in order: the same words, in the same order, as calling next_u64() once per draw. The generator is
// advanced by exactly the blocks handed out: a refill reserves only as many blocks as the shuffle is
// sure to take (one per step still to come), so a rejection's extra draw simply comes from a later
// refill, as it would from next_u64().
class Draws {
 public:
  explicit Draws(Generator& gen) : gen_(gen) {}

  // The next word; `at_least` is how many draws the caller will still take, this one included.
  uint64_t next(uint64_t at_least) {
    if (next_ == filled_) refill(std::min<uint64_t>(at_least, kDrawBlock));
    return words_[next_++];
  }

 private:
  static constexpr uint64_t kDrawBlock = 256;

  void refill(uint64_t count) {
    const uint64_t seed = gen_.seed(), first = gen_.advance(count);
    for (uint64_t i = 0; i < count; ++i) {
      const detail::PhiloxCounter w = detail::philox_block(seed, first + i);
      words_[i] = (static_cast<uint64_t>(w[1]) << 32) | w[0];  // as Generator::next_u64
    }
    next_ = 0, filled_ = count;
  }

  Generator& gen_;
  uint64_t words_[kDrawBlock];
  uint64_t next_ = 0, filled_ = 0;
};

// A uniform integer in [0, bound), Note [Unbiased shuffle]; `at_least` as for Draws::next.
uint64_t uniform_below(Draws& draws, uint64_t bound, uint64_t at_least) {
  unsigned __int128 m = static_cast<unsigned __int128>(draws.next(at_least)) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    while (low < threshold) {
      m = static_cast<unsigned __int128>(draws.next(at_least)) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

void check_size(int64_t size, const char* sampler) {
  MT_CHECK(size >= 0, sampler, ": dataset size must be >= 0, got ", size);
}

}  // namespace

// Fisher–Yates, from the back: position i swaps with a uniform j in [0, i]. The direction and the
// one-draw-per-step layout are part of the contract: they fix which permutation a seed gives.
std::vector<int64_t> randperm(int64_t n, Generator& gen) {
  MT_CHECK(n >= 0, "randperm: n must be >= 0, got ", n);
  std::vector<int64_t> p = iota(n);
  Draws draws(gen);  // Note [Shuffle draws in blocks]
  for (int64_t i = n - 1; i > 0; --i) {
    // Steps i, i - 1, ..., 1 are still to come: at least i draws.
    const auto j = static_cast<int64_t>(uniform_below(draws, static_cast<uint64_t>(i) + 1, static_cast<uint64_t>(i)));
    std::swap(p[i], p[j]);
  }
  return p;
}

SequentialSampler::SequentialSampler(int64_t size) : size_(size) { check_size(size, "SequentialSampler"); }

std::vector<int64_t> SequentialSampler::indices() const { return iota(size_); }

RandomSampler::RandomSampler(int64_t size, uint64_t seed) : size_(size), seed_(seed) {
  check_size(size, "RandomSampler");
}

std::vector<int64_t> RandomSampler::indices() const {
  Generator gen(seed_ + static_cast<uint64_t>(epoch_));
  return randperm(size_, gen);
}

DistributedSampler::DistributedSampler(int64_t size, int64_t num_replicas, int64_t rank,
                                       DistributedSamplerOptions opts)
    : size_(size), num_replicas_(num_replicas), rank_(rank), opts_(opts) {
  check_size(size, "DistributedSampler");
  MT_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be >= 1, got ", num_replicas);
  MT_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank ", rank,
           " is out of range for num_replicas ", num_replicas, " (valid: 0..", num_replicas - 1, ")");
  // ceil(N / R) when padding, floor(N / R) when dropping the tail.
  num_samples_ = opts.drop_last ? size / num_replicas : (size + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  if (opts_.shuffle) {
    Generator gen(opts_.seed + static_cast<uint64_t>(epoch_));
    all = randperm(size_, gen);
  } else {
    all = iota(size_);
  }
  const auto total = static_cast<size_t>(total_size());
  if (all.size() > total) {
    all.resize(total);  // drop_last: the tail that would not divide evenly
  } else {
    // Pad from the front, cycling through the list again when the padding is longer than N
    // (e.g. N = 2 over 5 ranks: 0 1 | 0 1 0). size_ == 0 means total == 0: nothing to pad.
    const size_t n = all.size();
    all.reserve(total);
    for (size_t i = 0; all.size() < total; ++i) all.push_back(int64_t{all[i % n]});
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t i = static_cast<size_t>(rank_); i < total; i += static_cast<size_t>(num_replicas_))
    mine.push_back(all[i]);
  return mine;
}

}  // namespace mt::data
