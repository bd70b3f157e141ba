// check_flat_collectives: reduce_scatter and allgather_into (Note [Flat shards] in
// distributed/process_group/process_group.h) on any process group, out of place and in place, against results
// computed here from every rank's inputs. Shared by the Gloo, MPI and local tests, like
// collectives.h.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "distributed/process_group/process_group.h"
#include "tensor/tensor.h"

namespace mt::test {

struct FlatCheckOptions {
  // Buffers up to this many bytes are summed in rank order, x_0 + x_1 + ... (Gloo: up to its
  // algorithm switch, Note [Reduce-scatter algorithm]; the local group: all): there the
  // order-sensitive values must come out as exactly that sum. Above it (and for MPI, whose order is
  // the library's) the check demands exact results only where every order gives the same sum.
  size_t rank_order_max_bytes = SIZE_MAX;
};

namespace detail {

// Element i of rank r's input: one of {big, 1, -big} rotated by rank (so the sum's order shows at
// 3 ranks and more, Note [Same bits on every rank] in collectives.h), or, when !order_sensitive,
// the small integer (r + 1)·(i % 5 + 1), whose sums are exact in any order.
inline std::vector<double> flat_input(int rank, int64_t numel, DType dtype, bool order_sensitive) {
  const double big = dtype == kFloat32 ? 1e8 : 1e17;
  std::vector<double> v(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) {
    const int k = static_cast<int>((rank + i) % 3);
    v[i] = order_sensitive ? (k == 0 ? big : k == 1 ? 1.0 : -big) * (1.0 + 0.37 * static_cast<double>(i % 7))
                           : (rank + 1.0) * static_cast<double>(i % 5 + 1);
  }
  return v;
}

// The rank-order sum (or average) over `world` ranks, in the dtype's own arithmetic.
template <typename T>
std::vector<double> rank_order_result(int world, int64_t numel, DType dtype, bool order_sensitive, bool avg) {
  std::vector<T> acc(static_cast<size_t>(numel));
  for (int r = 0; r < world; ++r) {
    const std::vector<double> x = flat_input(r, numel, dtype, order_sensitive);
    for (int64_t i = 0; i < numel; ++i) acc[i] = r == 0 ? static_cast<T>(x[i]) : static_cast<T>(acc[i] + static_cast<T>(x[i]));
  }
  std::vector<double> out(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) out[i] = avg ? static_cast<T>(acc[i] / static_cast<T>(world)) : acc[i];
  return out;
}

}  // namespace detail

inline void check_flat_collectives(dist::ProcessGroup& pg, FlatCheckOptions opts = {}) {
  const int rank = pg.rank(), n = pg.size();
  for (const DType dtype : {kFloat32, kFloat64})
    for (const int64_t shard : {int64_t{1}, int64_t{7}, int64_t{40000}})
      for (const dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Avg})
        for (const bool in_place : {false, true})
          for (const bool order_sensitive : {false, true}) {
            const int64_t numel = shard * n;
            if (order_sensitive && static_cast<size_t>(numel) * element_size(dtype) > opts.rank_order_max_bytes) continue;
            Tensor input = from_vector(detail::flat_input(rank, numel, dtype, order_sensitive), {numel}).to(dtype);
            Tensor output = in_place ? input.narrow(0, rank * shard, shard) : empty({shard}, {.dtype = dtype});
            pg.reduce_scatter(output, input, op)->wait();
            // Gather every rank's shard back: every rank must then hold the whole reduced buffer.
            Tensor whole = empty({numel}, {.dtype = dtype});
            pg.allgather_into(whole, output)->wait();
            const std::vector<double> got = whole.to(kFloat64).to_vector<double>();
            const bool avg = op == dist::ReduceOp::Avg;
            const std::vector<double> want =
                dtype == kFloat32 ? detail::rank_order_result<float>(n, numel, dtype, order_sensitive, avg)
                                  : detail::rank_order_result<double>(n, numel, dtype, order_sensitive, avg);
            for (int64_t i = 0; i < numel; ++i)
              MT_CHECK(got[i] == want[i], "reduce_scatter ", dist::reduce_op_name(op), in_place ? " in place" : "",
                       " of ", numel, " ", dtype, order_sensitive ? " (order-sensitive)" : "", " over ", n,
                       " ranks: element ", i, " is ", got[i], ", expected ", want[i], " (rank ", rank, ")");
          }

  // allgather_into in place: each rank writes its shard of the buffer, the rest comes from the others.
  const int64_t shard = 3;
  Tensor buffer = full({shard * n}, -1.0, {.dtype = kInt64});
  Tensor mine = buffer.narrow(0, rank * shard, shard);
  mine.copy_(from_vector(std::vector<int64_t>{rank, 10 * rank, 100 * rank}, {shard}));
  pg.allgather_into(buffer, mine)->wait();
  const std::vector<int64_t> b = buffer.to_vector<int64_t>();
  for (int r = 0; r < n; ++r)
    MT_CHECK(b[r * shard] == r && b[r * shard + 1] == 10 * r && b[r * shard + 2] == 100 * r,
             "allgather_into in place: shard ", r, " on rank ", rank, " is wrong: ", buffer);
}

}  // namespace mt::test
