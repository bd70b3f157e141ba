#!/usr/bin/env bash
# bench/nn_ops.sh: the ops and layers of issue 40 (bench_nn_ops.cpp's list and shapes), forward +
# backward, float32, in minitrain, libtorch C++ (torch/bench_torch_nn_ops.cpp) and PyTorch
# (nn_ops_torch.py), single-threaded, in the same run. Each program runs MT_BENCH_ROUNDS times (default
# 3), interleaved; the table shows the medians and time(other) / time(minitrain). The target: no op
# slower than 1.5x libtorch, i.e. libtorch/minitrain >= 0.67 in every row.
#   bench/nn_ops.sh        (libtorch-dev and python3-torch for the other two columns)
#   MT_BENCH_BUILD_DIR=build MT_BENCH_SKIP_BUILD=1 bench/nn_ops.sh   uses an existing build's bench_nn_ops
# Environment: MT_BENCH_BUILD_DIR, MT_BENCH_TORCH_BUILD_DIR, MT_BENCH_PYTHON, MT_BENCH_ROUNDS,
# MT_BENCH_SKIP_BUILD, MT_BENCH_CLOCK=wall|cpu (default cpu: the thread's CPU time is the steadier figure
# on a shared machine; bench/timing.h).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
clock=${MT_BENCH_CLOCK:-cpu}
bench_one_thread
results=$(mktemp)
trap 'rm -f "$results"' EXIT

if [[ -z ${MT_BENCH_SKIP_BUILD:-} ]]; then bench_build bench_nn_ops; fi
bench_build_libtorch bench_torch_nn_ops
bench_find_pytorch

for round in $(seq 1 "$rounds"); do
  echo "nn_ops.sh: round $round of $rounds, $(bench_load)" >&2
  "$build/bench/bench_nn_ops" 2>/dev/null >>"$results"
  if [ "$have_libtorch" = 1 ]; then "$torch_build/bench_torch_nn_ops" 2>/dev/null >>"$results"; fi
  if [ "$have_pytorch" = 1 ]; then (cd "$repo/bench" && "$python" nn_ops_torch.py 2>/dev/null) >>"$results"; fi
done

suffix=""
[ "$clock" = cpu ] && suffix=":cpu"
echo
echo "The ops of issue 40, forward + backward; one thread, $clock clock, median of $rounds round(s), $(date +%F)"
echo "| op [µs] | minitrain | libtorch | PyTorch | libtorch/minitrain | PyTorch/minitrain |"
echo "|---|---:|---:|---:|---:|---:|"
awk -v suffix="$suffix" -f "$median_awk" -f <(cat <<'AWK'
  { collect() }
  function cell(x) { return x == "" ? "n/a" : sprintf("%.0f", x) }
  function ratio(other, mine) { return other == "" || mine == "" ? "n/a" : sprintf("%.2f×", other / mine) }
  END {
    n = split("conv1d conv_transpose2d pad_reflect interpolate_nearest interpolate_bilinear adaptive_max_pool2d " \
              "group_norm silu mish cross_entropy masked_attention logsumexp cumsum topk sort", ops, " ")
    for (k = 1; k <= n; k++) {
      m = ops[k] "_us" suffix
      a = med("minitrain " m); l = med("libtorch " m); p = med("pytorch " m)
      printf "| %s | %s | %s | %s | %s | %s |\n", ops[k], cell(a), cell(l), cell(p), ratio(l, a), ratio(p, a)
    }
    printf "\ncpu_share: minitrain %s, libtorch %s, PyTorch %s\n", med("minitrain cpu_share"), med("libtorch cpu_share"), med("pytorch cpu_share")
  }
AWK
) "$results"
