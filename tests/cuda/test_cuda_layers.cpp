// GroupNorm, InstanceNorm2d, layer_norm over several dims, masked attention, embedding padding_idx,
// sort/topk and repeat (issue 40) on CUDA against the CPU: values and every input's gradient, float64
// and float32. All but sort are compositions of ops with CUDA kernels; sort's order comes from
// argsort_rank_kernel (tensor/cuda/cuda_sort.cu), whose indices must equal the CPU's exactly.
// Needs a GPU (tests/cuda/main.cpp skips otherwise; the emulator runs it anywhere).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "minitrain.h"
#include "nn/nn.h"
#include "tensor/raw_ops.h"
#include "cuda_compare.h"

using namespace mt;

namespace {

using test::gpu;
using test::kGpu;
using test::sample;

using test::check_close;
double tol_for(DType t) { return t == kFloat32 ? 1e-5 : 1e-12; }

using F = std::function<Tensor(const std::vector<Tensor>&)>;

// f on inputs of the given shapes, on the CPU and on cuda:0; values and input gradients compared.
void compare(const std::string& what, const F& f, const std::vector<Shape>& shapes) {
  for (DType dt : {kFloat64, kFloat32}) {
    const std::string name = what + " " + dtype_name(dt);
    std::vector<Tensor> cpu, cuda;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Tensor x = sample(shapes[i], dt, 10 + i);
      cpu.push_back(x.clone().requires_grad_());
      cuda.push_back(gpu(x).requires_grad_());
    }
    const Tensor yc = f(cpu), yg = f(cuda);
    check_close(yc, yg, tol_for(dt), name + ": value");
    const Tensor gy = sample(yc.sizes(), dt, 2);
    (yc * gy).sum().backward();
    (yg * gpu(gy)).sum().backward();
    for (size_t i = 0; i < shapes.size(); ++i)
      check_close(cpu[i].grad(), cuda[i].grad(), tol_for(dt), name + ": gradient " + std::to_string(i));
  }
}

}  // namespace

TEST_CASE("layer_norm over several dims, group_norm and instance_norm on CUDA match the CPU") {
  compare("layer_norm (3, 4)", [](const std::vector<Tensor>& a) {
    return nn::F::layer_norm(a[0].transpose(0, 1), {3, 4}, a[1], a[2]);
  }, {{3, 2, 4}, {3, 4}, {3, 4}});
  compare("group_norm", [](const std::vector<Tensor>& a) { return nn::F::group_norm(a[0], 2, a[1], a[2]); },
          {{2, 6, 3, 3}, {6}, {6}});
  compare("instance_norm", [](const std::vector<Tensor>& a) { return nn::InstanceNorm2d(3)(a[0].transpose(2, 3)); },
          {{2, 3, 4, 5}});
}

TEST_CASE("masked attention, dv != d and 3-D attention on CUDA match the CPU") {
  const Tensor keep = from_vector(std::vector<int64_t>{1, 0, 1, 1, 1, 1, 0, 1, 1, 0, 0, 1}, {3, 4});
  compare("int64 mask", [&](const std::vector<Tensor>& a) {
    return scaled_dot_product_attention(a[0], a[1], a[2], raw::to_device(keep, a[0].device()));
  }, {{2, 2, 3, 4}, {2, 2, 4, 4}, {2, 2, 4, 6}});
  compare("additive mask, causal", [](const std::vector<Tensor>& a) {
    return scaled_dot_product_attention(a[0], a[1], a[2], a[3], {.causal = true});
  }, {{1, 2, 4, 3}, {1, 2, 4, 3}, {1, 2, 4, 3}, {2, 4, 4}});
  compare("3-D", [](const std::vector<Tensor>& a) { return scaled_dot_product_attention(a[0], a[1], a[2]); },
          {{3, 4, 8}, {3, 5, 8}, {3, 5, 8}});
}

TEST_CASE("embedding with padding_idx and repeat on CUDA match the CPU") {
  const Tensor idx = from_vector(std::vector<int64_t>{0, 2, 3, 2, 1, 0}, {2, 3});
  compare("embedding padding_idx", [&](const std::vector<Tensor>& a) {
    return nn::F::embedding(raw::to_device(idx, a[0].device()), a[0], 2);
  }, {{4, 5}});
  compare("repeat", [](const std::vector<Tensor>& a) { return a[0].t().repeat({2, 1, 3}); }, {{3, 2}});
}

TEST_CASE("sort and topk on CUDA give the CPU's indices exactly, and its values and gradients") {
  compare("sort", [](const std::vector<Tensor>& a) { return std::get<0>(a[0].t().sort(1, true)); }, {{7, 5}});
  compare("topk", [](const std::vector<Tensor>& a) { return std::get<0>(topk(a[0], 3, 0, false)); }, {{6, 4}});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // ties (stable order), NaN, and a row of 300 (past one block of threads)
  const Tensor x = sample({4, 300}, kFloat64, 7).mul_(2.0).to(kInt64).to(kFloat64);  // integers in [-3, 3]
  const Tensor special = from_vector(std::vector<double>{nan, 1, -1, nan, 1}, {5});
  for (bool descending : {false, true}) {
    for (DType dt : {kFloat64, kFloat32, kInt64}) {
      INFO("descending " << descending << " " << dtype_name(dt));
      const Tensor xd = x.to(dt);
      CHECK(argsort(gpu(xd), 1, descending).to_vector<int64_t>() == argsort(xd, 1, descending).to_vector<int64_t>());
      CHECK(argsort(gpu(xd), 0, descending).to_vector<int64_t>() == argsort(xd, 0, descending).to_vector<int64_t>());
      CHECK(std::get<1>(topk(gpu(xd), 7, 1, !descending)).to_vector<int64_t>() ==
            std::get<1>(topk(xd, 7, 1, !descending)).to_vector<int64_t>());
    }
    CHECK(argsort(gpu(special), 0, descending).to_vector<int64_t>() ==
          argsort(special, 0, descending).to_vector<int64_t>());
  }
}
