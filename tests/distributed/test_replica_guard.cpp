// The replica guard (distributed/fault/replica_guard.h): replicas that DDP keeps identical pass; one rank
// whose copy of one parameter drifted by one bit makes every rank fail, naming that parameter and
// that rank.
#include <doctest/doctest.h>

#include <bit>
#include <cstring>
#include <string>

#include "autograd/grad_mode.h"
#include "distributed/ddp/ddp.h"
#include "distributed/fault/replica_guard.h"
#include "distributed/store/tcp_store.h"
#include "multiprocess.h"
#include "nn/nn.h"
#include "optim/sgd.h"
#include "tensor/generator.h"

using namespace mt;
using namespace mt::dist;

namespace {

const bool kNoBackend = !test::group_backend_available();

}  // namespace

TEST_CASE("replica_hash: the same values hash alike, and one bit, a shape or a dtype apart do not") {
  Generator gen(1);
  const Tensor a = randn({4, 3}, gen);
  Tensor b = a.clone();
  CHECK(replica_hash(a) == replica_hash(b));
  float* data = static_cast<float*>(b.raw_data());
  uint32_t bits = std::bit_cast<uint32_t>(data[5]);
  data[5] = std::bit_cast<float>(bits ^ 1u);  // the last bit of one element
  CHECK(replica_hash(a) != replica_hash(b));
  CHECK(replica_hash(a) != replica_hash(a.reshape({3, 4})));
  CHECK(replica_hash(a) != replica_hash(a.to(kFloat64)));
  CHECK(replica_hash(a.t()) == replica_hash(a.t().contiguous()));  // values, not memory layout
}

TEST_CASE("DDP: the replica guard passes identical replicas and names the parameter and rank that drifted" *
          doctest::skip(kNoBackend)) {
  const int port = find_free_port();
  test::run_ranks(3, [&](int rank) {
    auto pg = test::join_group(rank, 3, port);
    manual_seed(rank);  // different starts: DDP's broadcast makes them equal
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(8, 2));
    DistributedDataParallel ddp(model, pg);
    optim::SGD opt(ddp.parameters(), {.lr = 0.1});
    Generator gen(10 + rank);  // each rank its own batch
    for (int step = 0; step < 3; ++step) {
      ddp.zero_grad();
      nn::F::mse_loss(ddp.forward(randn({5, 4}, gen)), randn({5, 2}, gen)).backward();
      opt.step();
    }
    ddp.check_replicas("after step 3");
    if (rank == 2) {  // one bit of one element of the second layer's bias
      NoGradGuard no_grad;
      float* bias = static_cast<float*>(model->named_parameters()[3].second.raw_data());
      bias[1] = std::bit_cast<float>(std::bit_cast<uint32_t>(bias[1]) ^ 1u);
    }
    try {
      ddp.check_replicas("after step 3, again");
    } catch (const Error& e) {
      const std::string message = e.what();
      MT_CHECK(message.find("after step 3, again") != std::string::npos &&
                   message.find("Parameter '2.bias' (#3 of 4) on rank 2 is not bit-for-bit rank 0's") !=
                       std::string::npos,
               message);
      return;
    }
    MT_FAIL("the replica guard missed a flipped bit on rank 2");
  });
}
