// Results do not depend on the thread count (Note [Fixed chunks], tensor/parallel.h): the same
// computation at 1, 2 and 3 threads gives the same bits, for elementwise ops, reductions (strided
// ones too), softmax, layer norm, convolution (im2col and Winograd) and pooling, attention,
// index_select / gather / embedding and their scatter-adding backward, an optimizer step and a few
// MLP training steps. Each tensor is large enough that its kernels split into several chunks
// (tensor/cpu/cpu_backend.h's grains), and kept small enough that the whole file runs in well under
// a second. The chunks are the same at 1 thread, so where a kernel's split is new, its values are
// also checked against an unsplit computation.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "minitrain.h"
#include "tests/tensor/relative_error.h"
#include "tensor/raw_ops.h"

using namespace mt;

namespace {

// The raw bytes of each tensor (float32), so that == means bitwise equal (-0 vs 0 and NaNs included).
std::vector<std::vector<unsigned char>> bytes_of(const std::vector<Tensor>& ts) {
  std::vector<std::vector<unsigned char>> out;
  for (const Tensor& t : ts) {
    const std::vector<float> v = t.to_vector<float>();
    std::vector<unsigned char> b(v.size() * sizeof(float));
    std::memcpy(b.data(), v.data(), b.size());
    out.push_back(std::move(b));
  }
  return out;
}

// Runs `compute` at 1, 2 and 3 threads and checks every result tensor is bitwise the same.
void check_independent(const std::function<std::vector<Tensor>()>& compute) {
  std::vector<std::vector<unsigned char>> one;
  {
    NumThreadsGuard guard(1);
    one = bytes_of(compute());
  }
  for (int threads : {2, 3}) {
    NumThreadsGuard guard(threads);
    const auto got = bytes_of(compute());
    REQUIRE(got.size() == one.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(threads);
      CAPTURE(i);
      CHECK(got[i] == one[i]);
    }
  }
}

Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, gen).requires_grad_();
}

using test::relative_error;

// n int64 indices in [0, bound), several of them repeated.
Tensor indices(const Shape& shape, int64_t bound, uint64_t seed) {
  Generator gen(seed);
  return cast(mul(rand(shape, gen), static_cast<double>(bound)), DType::Int64);
}

}  // namespace

TEST_CASE("elementwise ops, reductions and softmax give the same bits at 1, 2 and 3 threads") {
  Generator gen(1);
  const Tensor x = randn({300, 1000}, gen), y = randn({300, 1000}, gen), bias = randn({1000}, gen);
  check_independent([&] {
    return std::vector<Tensor>{x + y,          exp(x),          tanh(x) * 3.0,          x + bias,
                               contiguous(transpose(x, 0, 1)), where(gt(x, y), x, y),
                               sum(x),         sum(x, {1}),      sum(x, {0}),            max(x, {1}),
                               mean(x * x),    softmax(x, 1),    log_softmax(x, 1)};
  });
}

TEST_CASE("layer norm, GELU and causal attention, forward and backward, give the same bits at 1, 2 and 3 threads") {
  check_independent([] {
    const Tensor x = leaf({256, 384}, 2), w = leaf({384}, 3), b = leaf({384}, 4), g = leaf({256, 384}, 5);
    const Tensor y = gelu(layer_norm(x, w, b));
    sum(y * g).backward();
    const Tensor q = leaf({2, 4, 64, 32}, 6), k = leaf({2, 4, 64, 32}, 7), v = leaf({2, 4, 64, 32}, 8);
    const Tensor o = scaled_dot_product_attention(q, k, v, {.causal = true});
    sum(o * o).backward();
    return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad(), o, q.grad(), k.grad(), v.grad()};
  });
}

TEST_CASE("matrix products split into blocks of rows or columns give the same bits at 1, 2 and 3 threads") {
  // Note [GEMM on the pool]: (1100, 300)·(300, 200) splits C's rows into blocks of 512, 512 and 76;
  // (100, 300)·(300, 1100) its columns (512, 512, 76) and (100, 300)·(300, 1200) too (512, 512,
  // 176); the transposed and batched forms take the same blocks. On OpenBLAS at one thread, Note
  // [One call on one thread] runs the row split and the 1200 columns as one call each, since their
  // last blocks are at least kGemmGrain multiply-adds (76·200·300 and 176·100·300), and keeps the
  // blocks for the 1100 columns (76·100·300 is less), so 1 thread against 2 and 3 compares the one
  // call with the blocks bit for bit. That is on the SkylakeX kernels; on Zen's, one call differs
  // from these row blocks (512 is no multiple of its tiles of 24), so every thread count must keep
  // the blocks there, as on Eigen.
  Generator gen(13);
  const Tensor a = randn({1100, 300}, gen), b = randn({300, 200}, gen), c = randn({100, 300}, gen),
               d = randn({300, 1100}, gen), e = randn({2, 1100, 300}, gen), f = randn({300, 1200}, gen);
  check_independent([&] {
    return std::vector<Tensor>{matmul(a, b), matmul(c, d), matmul(transpose(b, 0, 1), transpose(a, 0, 1)),
                               matmul(e, b), matmul(c, f)};
  });
}

TEST_CASE("matrix products of 40 shapes, 36 of them random, give the same bits at 1, 2 and 3 threads") {
  // Note [One call on one thread]: at 1 thread OpenBLAS's SkylakeX kernels take one call where the
  // last block is at least kGemmGrain multiply-adds, and the blocks elsewhere; at 2 threads, and on
  // every other kernel, always the blocks. Shapes with a last block below the small-matrix kernels'
  // bound (where one call and the blocks can differ) are among them too: there, every thread count
  // must keep the blocks. Either operand may be transposed (a column-major view), as linear's x·wᵀ
  // and its backward's gᵀ·x are.
  Generator gen(21), shapes(5);  // shapes: its own stream, so the shapes do not depend on the tensors
  const auto next = [&shapes](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(shapes.next_u64() % static_cast<uint64_t>(hi - lo + 1));
  };
  std::vector<std::pair<Tensor, Tensor>> pairs;
  const auto add = [&](int64_t m, int64_t n, int64_t k, bool a_transposed, bool b_transposed) {
    const Tensor a = randn(a_transposed ? Shape{k, m} : Shape{m, k}, gen);
    const Tensor b = randn(b_transposed ? Shape{n, k} : Shape{k, n}, gen);
    pairs.emplace_back(a_transposed ? transpose(a, 0, 1) : a, b_transposed ? transpose(b, 0, 1) : b);
  };
  // Last column blocks of 7, 4, 20 and 35: on OpenBLAS 0.3.21's SkylakeX kernels one call differs
  // from these blocks in the last bits (found by a sweep of 1440 split shapes: 15 differed, every one
  // with a last block under 10⁶ multiply-adds), so the one call must not be taken for them.
  add(461, 1031, 37, false, false);
  add(305, 1028, 754, false, false);
  add(363, 1044, 137, false, false);
  add(27, 1059, 729, true, true);
  while (pairs.size() < 40) {
    const int64_t m = next(8, 1300), n = next(8, 1300), k = next(8, 700);
    // A side longer than kGemmBlockRows, so most of them split (the block rule decides), and quick.
    if (std::max(m, n) <= 512 || m * n * k > 120'000'000) continue;
    add(m, n, k, next(0, 1) == 1, next(0, 1) == 1);
  }
  check_independent([&] {
    std::vector<Tensor> out;
    for (const auto& [a, b] : pairs) out.push_back(matmul(a, b));
    return out;
  });
}

// Batches of 8 and 5 samples: at 2 threads both run whole samples on the threads (Note [Samples on
// the threads], tensor/detail/raw_split.h); at 3 threads the batch of 5 runs its samples in order and
// splits each sample's kernels instead. Either way the bits must not change.
TEST_CASE("convolution and max pooling, forward and backward, give the same bits at 1, 2 and 3 threads") {
  check_independent([] {
    std::vector<Tensor> out;
    for (int64_t n : {8, 5}) {
      const Tensor x = leaf({n, 8, 28, 28}, 9), w = leaf({16, 8, 3, 3}, 10), b = leaf({16}, 11);
      const Tensor y = max_pool2d(relu(conv2d(x, w, b, {.padding = 1})), {.kernel_size = 2});
      sum(y * y).backward();
      out.insert(out.end(), {y, x.grad(), w.grad(), b.grad()});
    }
    return out;
  });
}

TEST_CASE("Adam and SGD steps and a few MLP training steps give the same bits at 1, 2 and 3 threads") {
  check_independent([] {
    Generator gen(12);
    Tensor a = randn({300, 400}, gen).requires_grad_(), s = randn({300, 400}, gen).requires_grad_();
    optim::Adam adam({a}, {.lr = 1e-2, .weight_decay = 1e-2});
    optim::SGD sgd({s}, {.lr = 1e-2, .momentum = 0.9});
    for (int step = 0; step < 2; ++step) {
      a.set_grad(randn({300, 400}, gen));
      s.set_grad(randn({300, 400}, gen));
      adam.step();
      sgd.step();
    }
    // The MLP: 784-256-10 on one batch of 64, three steps of SGD with momentum.
    manual_seed(13);
    nn::Sequential mlp(std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
                       std::make_shared<nn::Linear>(256, 10));
    const Tensor x = randn({64, 784}, gen);
    const Tensor labels = cast(mul(rand({64}, gen), 10.0), DType::Int64);
    optim::SGD opt(mlp.parameters(), {.lr = 0.05, .momentum = 0.9});
    std::vector<Tensor> out = {a, s};
    for (int step = 0; step < 3; ++step) {
      const Tensor loss = nn::functional::cross_entropy(mlp.forward(x), labels);
      opt.zero_grad();
      loss.backward();
      opt.step();
      out.push_back(loss.detach());
    }
    for (const Tensor& param : mlp.parameters()) out.push_back(param.detach());
    return out;
  });
}

TEST_CASE("strided reductions (the general path) give the same bits at 1, 2 and 3 threads, and the right values") {
  Generator gen(14);
  const Tensor xt = transpose(randn({1000, 300}, gen), 0, 1);  // (300, 1000), strides (1, 300)
  const Tensor zt = transpose(randn({40, 3000}, gen), 0, 1);   // (3000, 40), strides (1, 3000)
  const Tensor y = randn({40, 50, 60}, gen);
  // Split along a kept dim (outer in memory; inner, in chunks of 1024), along a reduced one into
  // partial results (the whole tensor into one value), and a contiguous input whose reduced dims
  // are not adjacent.
  const auto compute = [&] {
    return std::vector<Tensor>{sum(xt, {0}), max(xt, {0}), sum(zt, {1}), min(zt, {1}), sum(xt),
                               mean(xt),     max(xt),      sum(y, {0, 2}), max(y, {0, 2})};
  };
  check_independent(compute);
  const Tensor c = contiguous(xt), d = contiguous(zt);  // the same values through the contiguous paths
  const std::vector<Tensor> want = {sum(c, {0}), max(c, {0}), sum(d, {1}), min(d, {1}), sum(c), mean(c), max(c),
                                    sum(sum(y, {2}), {0}), max(max(y, {2}), {0})};
  const std::vector<Tensor> got = compute();
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(relative_error(got[i], want[i]) < 1e-5);
  }
}

// Column sums whose column block holds more than a grain of work are cut into subtrees of the
// pairwise tree over rows (reduce_tall_columns, Note [Parallel reductions]): Linear's bias gradient
// over the GPT preset's 2048 rows. Each column's tree does not depend on how many columns are summed
// beside it, and stripes of 8 columns stay under a grain (uncut), so the stripes' sums side by side
// are the reference, bit for bit. A Linear's db goes through the same sum.
TEST_CASE("tall column sums (Linear's bias gradient) give the same bits at 1, 2 and 3 threads as uncut stripes") {
  Generator gen(30);
  const Tensor a = randn({2048, 128}, gen), b = randn({2048, 384}, gen), c = randn({3, 700, 130}, gen);
  using Reduce = std::function<Tensor(const Tensor&, int64_t)>;
  const Reduce sum_of = [](const Tensor& t, int64_t dim) { return sum(t, {dim}); };
  const Reduce max_of = [](const Tensor& t, int64_t dim) { return max(t, {dim}); };
  const auto stripes = [](const Tensor& x, int64_t dim, const Reduce& reduce) {
    std::vector<Tensor> parts;
    for (int64_t j = 0; j < x.size(-1); j += 8)
      parts.push_back(reduce(contiguous(narrow(x, -1, j, std::min<int64_t>(8, x.size(-1) - j))), dim));
    return cat(parts, -1);
  };
  // dy = a flows into Linear's backward: db = sum(a, {0}).
  const Tensor x = leaf({2048, 96}, 31), w = leaf({128, 96}, 32), bias = leaf({128}, 33);
  const auto compute = [&] {
    bias.set_grad(Tensor());
    sum(linear(x, w, bias) * a).backward();
    return std::vector<Tensor>{sum(a, {0}), sum(b, {0}), sum(c, {1}), max(b, {0}), bias.grad()};
  };
  check_independent(compute);
  const std::vector<Tensor> got = compute();
  const std::vector<Tensor> want = {stripes(a, 0, sum_of), stripes(b, 0, sum_of), stripes(c, 1, sum_of),
                                    stripes(b, 0, max_of), stripes(a, 0, sum_of)};
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(bytes_of({got[i]}) == bytes_of({want[i]}));
  }
}

TEST_CASE("index_select, gather, an embedding and their backward (index_add, scatter_add) give the same bits at 1, "
          "2 and 3 threads, and the right values") {
  const Tensor tokens = indices({16, 128}, 50, 15);  // 2048 lookups of 50 rows: every row many times
  const Tensor rows = indices({300, 1000}, 100, 16);
  const auto compute = [&] {
    const Tensor table = leaf({50, 256}, 17), g = leaf({16, 128, 256}, 18).detach();
    const Tensor e = embedding(table, tokens);  // index_select; backward: index_add
    sum(e * g).backward();
    const Tensor x = leaf({100, 1000}, 19), h = leaf({300, 1000}, 20).detach();
    const Tensor picked = gather(x, 0, rows);  // backward: scatter_add
    sum(picked * h).backward();
    return std::vector<Tensor>{e, table.grad(), picked, x.grad(), g, h};
  };
  check_independent(compute);
  // The values, element by element in double: e[b, t] = table[tokens[b, t]], the table's gradient
  // sums g's rows per token; picked[j, i] = x[rows[j, i], i], x's gradient sums h per picked slot.
  const std::vector<Tensor> r = compute();
  const auto tok = tokens.to_vector<int64_t>(), at = rows.to_vector<int64_t>();
  const auto table = leaf({50, 256}, 17).to_vector<double>(), x = leaf({100, 1000}, 19).to_vector<double>();
  const auto g = r[4].to_vector<double>(), h = r[5].to_vector<double>();
  std::vector<double> e(2048 * 256), dtable(50 * 256, 0.0), picked(300 * 1000), dx(100 * 1000, 0.0);
  for (size_t j = 0; j < tok.size(); ++j)
    for (size_t i = 0; i < 256; ++i) {
      e[j * 256 + i] = table[tok[j] * 256 + i];
      dtable[tok[j] * 256 + i] += g[j * 256 + i];
    }
  for (size_t j = 0; j < 300; ++j)
    for (size_t i = 0; i < 1000; ++i) {
      picked[j * 1000 + i] = x[at[j * 1000 + i] * 1000 + i];
      dx[at[j * 1000 + i] * 1000 + i] += h[j * 1000 + i];
    }
  CHECK(relative_error(r[0], from_vector(e, r[0].sizes())) == 0);
  CHECK(relative_error(r[1], from_vector(dtable, r[1].sizes())) < 1e-5);
  CHECK(relative_error(r[2], from_vector(picked, r[2].sizes())) == 0);
  CHECK(relative_error(r[3], from_vector(dx, r[3].sizes())) < 1e-5);
}

// index_add along a middle dim: 3 outer slices, each a (40, 300) table getting 500 rows. At 1
// thread the rows go in order; at 2 and 3 through the row-block buckets of every slice (Note
// [Parallel scatters]): the same additions in the same order, so the same bits.
TEST_CASE("index_add along a middle dim gives the same bits at 1, 2 and 3 threads, and the right values") {
  const Tensor index = indices({500}, 40, 21);
  const Tensor src = leaf({3, 500, 300}, 22);
  const auto compute = [&] { return std::vector<Tensor>{raw::index_add_zeros(Shape{3, 40, 300}, 1, index, src)}; };
  check_independent(compute);
  const auto idx = index.to_vector<int64_t>();
  const auto x = src.to_vector<double>();
  std::vector<double> want(3 * 40 * 300, 0.0);
  for (size_t a = 0; a < 3; ++a)
    for (size_t j = 0; j < 500; ++j)
      for (size_t i = 0; i < 300; ++i) want[(a * 40 + idx[j]) * 300 + i] += x[(a * 500 + j) * 300 + i];
  const Tensor got = compute()[0];
  CHECK(relative_error(got, from_vector(want, got.sizes())) < 1e-5);
}

// Two batches: 4 samples of 14x14 are one sample group (5 samples make kTilesPerGemm's 256 tiles);
// 24 samples are 5 groups, which at 2 threads run as whole groups on the threads, their weight
// gradient summed in 5 strands, and at 3 threads in order (Note [Samples on the threads]).
TEST_CASE("Winograd convolution, forward and backward, gives the same bits at 1, 2 and 3 threads, and the right "
          "values") {
  const Conv2dOptions o{.padding = 1};
  for (int64_t n : {4, 24}) {
    CAPTURE(n);
    const auto compute = [&] {
      const Tensor x = leaf({n, 32, 14, 14}, 21), w = leaf({32, 32, 3, 3}, 22), b = leaf({32}, 23);
      REQUIRE(raw::winograd_applies(x, w, o));
      const Tensor y = conv2d(x, w, b, o);
      sum(y * y).backward();
      return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
    };
    check_independent(compute);
    const std::vector<Tensor> r = compute();
    const Tensor x = leaf({n, 32, 14, 14}, 21).detach(), w = leaf({32, 32, 3, 3}, 22).detach();
    const Tensor b = leaf({32}, 23).detach();
    const Tensor y = raw::conv2d_im2col(x, w, b, o);
    const raw::Conv2dGrads want = raw::conv2d_backward_im2col(mul(y, 2.0), x, w, o, {});
    CHECK(relative_error(r[0], y) < 2e-6);
    CHECK(relative_error(r[1], want.dx) < 2e-6);
    CHECK(relative_error(r[2], want.dw) < 2e-6);
  }
}
