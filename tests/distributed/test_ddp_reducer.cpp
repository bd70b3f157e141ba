// Two behaviours of DDP's reducer that PyTorch's has too, on two real ranks (Gloo, or MPI under
// mpirun): with find_unused_parameters, a parameter that forward's output cannot reach is ready when
// backward begins, so its bucket launches during backward (Note [Unused parameters found after
// forward] in distributed/ddp/reducer.cpp); and after the first step the buckets are rebuilt in the order the gradients
// arrived, so the first bucket holds the first gradients (Note [Bucket rebuild] in distributed/ddp/bucket_rebuild.cpp). Both
// still train exactly like one process on the combined batch.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "autograd/ops.h"
#include "distributed/ddp/ddp.h"
#include "distributed/store/tcp_store.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "optim/sgd.h"
#include "tensor/generator.h"

using namespace mt;
using namespace mt::dist;
using namespace std::chrono_literals;

namespace {

const bool kNoBackend = !test::group_backend_available();

constexpr double kBytes = 1.0 / (1024 * 1024);  // one byte, in the MiB of DDPOptions' caps

// A parameter in a module of its own, so that it can come last in named_parameters() (a module's
// own parameters come before its children's).
struct Spare : nn::Module {
  Spare() { p = register_parameter("p", ones({4})); }
  Tensor forward(const Tensor& x) override { return x; }
  Tensor p;
};

// x (6) -> fc1 -> relu -> fc2 -> (3). `spare` is registered last, so its parameter opens bucket 0
// (Note [Buckets]), and forward never uses it.
struct WithSpare : nn::Module {
  WithSpare() {
    manual_seed(3);
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(6, 16));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(16, 3));
    spare = register_module("spare", std::make_shared<Spare>());
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<Spare> spare;
};

// Registered head first, body last, but run body -> mid -> head: backward produces head's gradients
// first and body's last, the reverse of what the construction-time buckets expect.
struct HeadFirst : nn::Module {
  HeadFirst() {
    manual_seed(5);
    head = register_module("head", std::make_shared<nn::Linear>(16, 3));
    mid = register_module("mid", std::make_shared<nn::Linear>(16, 16));
    body = register_module("body", std::make_shared<nn::Linear>(6, 16));
  }
  Tensor forward(const Tensor& x) override {
    return head->forward(relu(mid->forward(relu(body->forward(x)))));
  }
  std::shared_ptr<nn::Linear> head, mid, body;
};

struct Batch {
  Tensor x, y;  // x: (2·b, 6)  y: (2·b, 3), the same on both ranks; rank r trains on rows [r·b, (r+1)·b)
};
Batch make_batch(int64_t b) {
  Generator gen(11);
  return {randn({2 * b, 6}, gen), randn({2 * b, 3}, gen)};
}

void check_close(const nn::Module& got, const nn::Module& want, double tol, const std::string& what) {
  const NamedTensors a = got.named_parameters(), b = want.named_parameters();
  MT_CHECK(a.size() == b.size(), what, ": parameter counts differ");
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> u = a[i].second.to_vector<float>(), v = b[i].second.to_vector<float>();
    for (size_t k = 0; k < u.size(); ++k)
      MT_CHECK(std::abs(u[k] - v[k]) <= tol, what, ": ", b[i].first, "[", k, "] is ", u[k], ", expected ", v[k]);
  }
}

// One process, `steps` SGD steps on the whole batch.
template <typename Model>
std::shared_ptr<Model> single_process(const Batch& batch, int steps) {
  auto model = std::make_shared<Model>();
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    nn::F::mse_loss(model->forward(batch.x), batch.y).backward();
    opt.step();
  }
  return model;
}

}  // namespace

// Bucket 0 = [spare.p, fc2.bias, fc2.weight] (220 bytes of a 230-byte cap), bucket 1 = [fc1.bias,
// fc1.weight]. Found only in finalize, spare would hold bucket 0, and so bucket 1, until backward ended.
TEST_CASE("DDP: an unused parameter found after forward lets its bucket launch during backward, and DDP "
          "still equals one process on the combined batch" * doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    const Batch batch = make_batch(4);
    auto model = std::make_shared<WithSpare>();
    DistributedDataParallel ddp(model, test::join_group(rank, 2, port),
                                {.bucket_cap_mb = 1024 * 1024, .first_bucket_cap_mb = 230 * kBytes,
                                 .find_unused_parameters = true, .rebuild_buckets = false});
    const DDPStats& s = ddp.stats();
    MT_CHECK(s.bucket_parameters.size() == 2 && s.bucket_parameters[0][0] == "spare.p",
             "the test wants spare first in bucket 0 of 2, got ", s.bucket_parameters.size(), " buckets");
    // fc1's gradients arrive after bucket 0 is complete; 5 ms more keep backward going past its launch.
    model->fc1->weight.register_post_accumulate_grad_hook([](const Tensor&) { std::this_thread::sleep_for(5ms); });
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    const Tensor x = batch.x.narrow(0, rank * 4, 4), y = batch.y.narrow(0, rank * 4, 4);
    const int steps = 3;
    for (int step = 0; step < steps; ++step) {
      opt.zero_grad();
      nn::F::mse_loss(ddp.forward(x), y).backward();
      opt.step();
    }
    MT_CHECK(s.timed_backwards == steps, "timed backwards: ", s.timed_backwards);
    MT_CHECK(s.bucket_times[0].launched < s.backward_seconds, "bucket 0 launched at ",
             s.bucket_times[0].launched / steps * 1e3, " ms, after backward ended at ",
             s.backward_seconds / steps * 1e3, " ms");
    check_close(*model, *single_process<WithSpare>(batch, steps), 1e-5, "rank " + std::to_string(rank));
    for (float g : model->spare->p.grad().to_vector<float>()) MT_CHECK(g == 0.0f, "spare's gradient should be 0");
  });
}

// A loss that reaches a parameter outside DDP's output would be reduced too early: an error naming it.
TEST_CASE("DDP: a gradient for a parameter DDP's output does not reach is an error naming it" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    auto model = std::make_shared<WithSpare>();
    DistributedDataParallel ddp(model, test::join_group(rank, 2, port), {.find_unused_parameters = true});
    const Batch batch = make_batch(2);
    std::string message;
    try {
      (nn::F::mse_loss(ddp.forward(batch.x), batch.y) + model->spare->p.sum()).backward();
    } catch (const Error& e) {
      message = e.what();
    }
    MT_CHECK(message.find("'spare.p' received a gradient") != std::string::npos, "expected an error naming 'spare.p', "
             "got: ", message);
  });
}

// Construction: bucket 0 = [body.bias], bucket 1 = the rest, so the first step launches nothing until
// body's gradients, the last, arrive. Rebuilt: bucket 0 = head's (204 bytes under a 210-byte cap),
// launched before mid's hooks sleep 10 ms each.
TEST_CASE("DDP: buckets rebuilt in the first step's gradient order launch the first bucket earlier, and "
          "DDP still equals one process on the combined batch" * doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    const Batch batch = make_batch(4);
    auto model = std::make_shared<HeadFirst>();
    DistributedDataParallel ddp(model, test::join_group(rank, 2, port),
                                {.bucket_cap_mb = 1024 * 1024, .first_bucket_cap_mb = 210 * kBytes});
    const DDPStats& s = ddp.stats();
    MT_CHECK(s.bucket_parameters.size() == 2 && s.bucket_parameters[0] == std::vector<std::string>{"body.bias"},
             "construction: bucket 0 should be [body.bias], got ", s.bucket_parameters[0].size(), " parameters");
    for (Tensor* p : {&model->mid->weight, &model->mid->bias})
      p->register_post_accumulate_grad_hook([](const Tensor&) { std::this_thread::sleep_for(10ms); });
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    const Tensor x = batch.x.narrow(0, rank * 4, 4), y = batch.y.narrow(0, rank * 4, 4);
    double first_launch[2] = {0, 0};  // bucket 0's launch, seconds into backward: step 0, step 1
    const int steps = 3;
    for (int step = 0; step < steps; ++step) {
      opt.zero_grad();
      nn::F::mse_loss(ddp.forward(x), y).backward();
      opt.step();
      if (step < 2) first_launch[step] = s.bucket_times[0].launched / static_cast<double>(s.timed_backwards);
      if (step == 0) MT_CHECK(s.bucket_rebuilds == 0, "rebuilt before the second forward");
    }
    MT_CHECK(s.bucket_rebuilds == 1, "the buckets were not rebuilt");
    std::vector<std::string> first = s.bucket_parameters[0];
    std::sort(first.begin(), first.end());
    MT_CHECK(first == (std::vector<std::string>{"head.bias", "head.weight"}), "rebuilt bucket 0 should hold head's "
             "parameters, got ", first.size(), " parameters starting with ", first.front());
    MT_CHECK(first_launch[1] + 0.010 < first_launch[0], "bucket 0 launched ", first_launch[0] * 1e3,
             " ms into the first backward and ", first_launch[1] * 1e3, " ms into the second; the rebuilt one should "
             "launch before mid's 20 ms of hooks");
    check_close(*model, *single_process<HeadFirst>(batch, steps), 1e-5, "rank " + std::to_string(rank));
  });
}

// Note [Dividing while writing]: gradients arrive in the buckets divided by the world size, whether
// .grad was forgotten (set_to_none: the copy that divides) or zeroed in place (accumulated, then
// divided at launch), and both train exactly like one process; a backward under no_sync() whose
// forward ran outside it would leave divided gradients unreduced, so it is an error naming one.
TEST_CASE("DDP: gradients divided as they are written equal one process, with set_to_none or not, and "
          "no_sync must wrap the forward" * doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(2, [&](int rank) {
    const Batch batch = make_batch(4);
    const Tensor x = batch.x.narrow(0, rank * 4, 4), y = batch.y.narrow(0, rank * 4, 4);
    const auto pg = test::join_group(rank, 2, port);
    for (const bool set_to_none : {true, false}) {
      auto model = std::make_shared<HeadFirst>();
      DistributedDataParallel ddp(model, pg);
      optim::SGD opt(ddp.parameters(), {.lr = 0.1});
      for (int step = 0; step < 3; ++step) {
        opt.zero_grad(set_to_none);
        nn::F::mse_loss(ddp.forward(x), y).backward();
        opt.step();
      }
      check_close(*model, *single_process<HeadFirst>(batch, 3), 1e-6,
                  "rank " + std::to_string(rank) + (set_to_none ? ", set_to_none" : ", zeroed in place"));
      if (!set_to_none) continue;
      opt.zero_grad();
      const Tensor out = ddp.forward(x);  // a synced forward...
      std::string message;
      try {
        auto guard = ddp.no_sync();       // ...then a backward under no_sync
        nn::F::mse_loss(out, y).backward();
      } catch (const Error& e) {
        message = e.what();
      }
      MT_CHECK(message.find("wrap the forward in no_sync()") != std::string::npos, "got: ", message);
    }
  });
}
