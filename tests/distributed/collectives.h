// check_collectives: every collective once, each with a result known in closed form, on any process
// group (ProcessGroupLocal, Gloo between fork()ed ranks, MPI under mpirun). Shared by the backends'
// tests so that every backend passes the very same checks.
#pragma once

#include <cstring>
#include <string>

#include "distributed/process_group/process_group.h"
#include "tensor/tensor.h"

namespace mt::test {

// Note [Same bits on every rank]: floating-point addition is not associative, so an all-reduce whose
// ranks add the contributions in different orders leaves each rank with a different sum (3 ranks
// adding 1e8, 1, -1e8 in float32: 1 on one rank, 0 on the others), and replicas that should be
// identical drift apart. This check gives each rank values whose sum depends on the order, all-reduces
// them, allgathers the results and demands that every rank's are bit for bit rank 0's, for buffers on
// both sides of Gloo's algorithm switch (Note [Allreduce algorithm]) and for Sum and Avg.
inline void check_same_bits(dist::ProcessGroup& pg) {
  const int rank = pg.rank(), n = pg.size();
  for (const DType dtype : {kFloat32, kFloat64})
    for (const int64_t numel : {int64_t{11}, int64_t{1000}, int64_t{203530}})
      for (const dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Avg}) {
        // Element i of rank r: one of {big, 1, -big}, rotated by rank, times a factor that varies with i.
        const double big = dtype == kFloat32 ? 1e8 : 1e17;
        std::vector<double> values(static_cast<size_t>(numel));
        for (int64_t i = 0; i < numel; ++i) {
          const int k = static_cast<int>((rank + i) % 3);
          values[i] = (k == 0 ? big : k == 1 ? 1.0 : -big) * (1.0 + 0.37 * static_cast<double>(i % 7));
        }
        Tensor t = from_vector(values, {numel}).to(dtype);
        pg.allreduce(t, op)->wait();
        std::vector<Tensor> all;
        pg.allgather(all, t)->wait();
        const size_t bytes = static_cast<size_t>(numel) * element_size(dtype);
        for (int r = 1; r < n; ++r) {
          if (std::memcmp(all[r].raw_data(), all[0].raw_data(), bytes) == 0) continue;
          int64_t first = 0;
          while (std::memcmp(static_cast<const char*>(all[r].raw_data()) + first * element_size(dtype),
                             static_cast<const char*>(all[0].raw_data()) + first * element_size(dtype),
                             element_size(dtype)) == 0)
            ++first;
          MT_FAIL("allreduce ", op == dist::ReduceOp::Sum ? "Sum" : "Avg", " of ", numel, " ", dtype, " over ", n,
                  " ranks: rank ", r, " holds ", all[r].to(kFloat64).to_vector<double>()[first], " at element ",
                  first, ", rank 0 ", all[0].to(kFloat64).to_vector<double>()[first]);
        }
      }
}

// Every collective once, each with a result known in closed form. Runs on every rank; throws on a
// wrong result.
inline void check_collectives(dist::ProcessGroup& pg) {
  const int rank = pg.rank(), n = pg.size();

  // allreduce Sum of rank+1 over n ranks = n(n+1)/2, on a gradient-sized tensor (203530 floats, as
  // the Fashion-MNIST MLP's) and on a small one.
  for (const int64_t numel : {int64_t{11}, int64_t{203530}}) {
    Tensor t = full({numel}, rank + 1.0);
    pg.allreduce(t)->wait();
    const std::vector<float> v = t.to_vector<float>();
    for (float x : v) MT_CHECK(x == n * (n + 1) / 2.0f, "allreduce Sum of ", numel, " floats gave ", x);
  }
  Tensor avg = full({3}, rank + 1.0, {.dtype = kFloat64});
  pg.allreduce(avg, dist::ReduceOp::Avg)->wait();
  for (double x : avg.to_vector<double>()) MT_CHECK(x == (n + 1) / 2.0, "allreduce Avg gave ", x);
  Tensor mx = from_vector(std::vector<int64_t>{10 * rank, -rank}, {2});
  pg.allreduce(mx, dist::ReduceOp::Max)->wait();
  MT_CHECK(mx.to_vector<int64_t>() == (std::vector<int64_t>{10 * (n - 1), 0}), "allreduce Max gave ", mx);

  // broadcast from the last rank (non-zero whenever n > 1): everyone ends with its values.
  const int root = n - 1;
  Tensor b = arange(0.0, 5.0, 1.0, {.dtype = kFloat64});
  b.mul_(rank + 1.0);  // rank r holds (r+1)·[0..4]
  pg.broadcast(b, root)->wait();
  for (int64_t i = 0; i < 5; ++i)
    MT_CHECK(b.to_vector<double>()[i] == (root + 1.0) * i, "broadcast from ", root, " gave ", b);

  // allgather: outputs[r] is rank r's tensor, in rank order.
  std::vector<Tensor> gathered;
  pg.allgather(gathered, from_vector(std::vector<int64_t>{rank, 100 + rank}, {2}))->wait();
  MT_CHECK(static_cast<int>(gathered.size()) == n, "allgather gave ", gathered.size(), " tensors");
  for (int r = 0; r < n; ++r)
    MT_CHECK(gathered[r].to_vector<int64_t>() == (std::vector<int64_t>{r, 100 + r}), "allgather slot ", r, ": ",
             gathered[r]);

  pg.barrier()->wait();
}

}  // namespace mt::test
