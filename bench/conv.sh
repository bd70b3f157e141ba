#!/usr/bin/env bash
# bench/conv.sh: one Conv2d 3x3 layer, forward and forward + backward, and a training step of a small
# CNN, in minitrain (bench_conv.cpp), libtorch C++ (torch/bench_conv_torch.cpp) and PyTorch
# (conv_torch.py), single-threaded, in the same run: the layer is x (64, 64, 28, 28), w (64, 64, 3, 3),
# padding 1; the CNN is issue 12's Fashion-MNIST model at batch 64. Each program runs MT_BENCH_ROUNDS times
# (default 3), interleaved; the table shows the medians and time(other) / time(minitrain).
#   bench/conv.sh        (libtorch-dev and python3-torch for the other two columns)
# Environment: MT_BENCH_BUILD_DIR, MT_BENCH_TORCH_BUILD_DIR, MT_BENCH_PYTHON, MT_BENCH_ROUNDS,
# MT_BENCH_CLOCK=wall|cpu (default cpu here: a layer this size is long enough for the thread's CPU
# time to be the steadier figure on a shared machine; bench/timing.h).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
clock=${MT_BENCH_CLOCK:-cpu}
bench_one_thread
results=$(mktemp)
trap 'rm -f "$results"' EXIT

bench_build bench_conv
bench_build_libtorch bench_conv_torch
bench_find_pytorch

for round in $(seq 1 "$rounds"); do
  echo "conv.sh: round $round of $rounds" >&2
  "$build/bench/bench_conv" 2>/dev/null >>"$results"
  if [ "$have_libtorch" = 1 ]; then "$torch_build/bench_conv_torch" 2>/dev/null >>"$results"; fi
  if [ "$have_pytorch" = 1 ]; then (cd "$repo/bench" && "$python" conv_torch.py 2>/dev/null) >>"$results"; fi
done

suffix=""
[ "$clock" = cpu ] && suffix=":cpu"
echo
echo "Conv2d 3x3 with x (64, 64, 28, 28), and the CNN step; one thread, $clock clock, median of $rounds round(s), $(date +%F)"
echo "| metric | minitrain | libtorch | PyTorch | libtorch/minitrain | PyTorch/minitrain |"
echo "|---|---:|---:|---:|---:|---:|"
awk -v suffix="$suffix" -f "$median_awk" -f <(cat <<'AWK'
  { collect() }
  function cell(x) { return x == "" ? "n/a" : sprintf("%.1f", x) }
  # time(other)/time(minitrain): ms are times; gflops is a rate (inverted).
  function ratio(other, mine, rate) { return other == "" || mine == "" ? "n/a" : sprintf("%.2f×", rate ? mine / other : other / mine) }
  END {
    split("conv3x3_fwd_ms conv3x3_fwd_gflops conv3x3_fwd_bwd_ms cnn_step_ms", metrics, " ")
    for (k = 1; k <= 4; k++) {
      m = metrics[k] suffix; rate = metrics[k] ~ /gflops/
      a = med("minitrain " m); l = med("libtorch " m); p = med("pytorch " m)
      printf "| %s | %s | %s | %s | %s | %s |\n", metrics[k], cell(a), cell(l), cell(p), ratio(l, a, rate), ratio(p, a, rate)
    }
  }
AWK
) "$results"
