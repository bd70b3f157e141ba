#!/usr/bin/env bash
# bench/threads.sh: the MLP (784-256-10, batch 128), CNN (issue 12's, batch 64) and GPT preset (batch 32)
# training steps at 1 and 2 threads in one process, in minitrain (bench_core, bench_conv, bench_gpt with
# MT_NUM_THREADS), libtorch C++ and PyTorch (at::/torch.set_num_threads through MT_BENCH_THREADS, and
# OPENBLAS_NUM_THREADS / OMP_NUM_THREADS for their GEMM), all in the same run. Each round runs every
# program at 1 and then 2 threads, MT_BENCH_ROUNDS rounds (default 3), interleaved; the table shows
# medians of wall time (the thread's CPU time would leave out the other threads' work).
#   bench/threads.sh        (libtorch-dev and python3-torch for the other columns)
# Environment: MT_BENCH_BUILD_DIR, MT_BENCH_TORCH_BUILD_DIR, MT_BENCH_PYTHON, MT_BENCH_ROUNDS.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
results=$(mktemp)
trap 'rm -f "$results"' EXIT

bench_build bench_core bench_conv bench_gpt
bench_build_libtorch bench_torch bench_conv_torch bench_torch_gpt
bench_find_pytorch

# Runs "$@" with $threads threads and prefixes each output line with the count.
at() {
  local threads=$1
  shift
  MT_NUM_THREADS=$threads MT_BENCH_THREADS=$threads OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
    MKL_NUM_THREADS=$threads "$@" 2>/dev/null | sed "s/^/$threads /" >>"$results"
}

for round in $(seq 1 "$rounds"); do
  for threads in 1 2; do
    echo "threads.sh: round $round of $rounds, $threads thread(s), $(bench_load)" >&2
    at "$threads" "$build/bench/bench_core"
    at "$threads" "$build/bench/bench_conv"
    at "$threads" "$build/bench/bench_gpt"
    if [ "$have_libtorch" = 1 ]; then
      at "$threads" "$torch_build/bench_torch"
      at "$threads" "$torch_build/bench_conv_torch"
      at "$threads" "$torch_build/bench_torch_gpt"
    fi
    if [ "$have_pytorch" = 1 ]; then
      (cd "$repo/bench" && at "$threads" "$python" bench_torch.py && at "$threads" "$python" conv_torch.py &&
        at "$threads" "$python" gpt_step_torch.py)
    fi
  done
done

echo
echo "Training steps at 1 and 2 threads [ms], wall clock, median of $rounds round(s), $(date +%F)"
echo "| step | minitrain 1 | minitrain 2 | libtorch 1 | libtorch 2 | PyTorch 1 | PyTorch 2 | minitrain 1/2 | libtorch 2 / minitrain 2 | PyTorch 2 / minitrain 2 |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
awk -f "$median_awk" -f <(cat <<'AWK'
  { collect() }
  function cell(x) { return x == "" ? "n/a" : sprintf("%.2f", x) }
  function ratio(a, b) { return a == "" || b == "" ? "n/a" : sprintf("%.2f×", a / b) }
  END {
    split("mlp_step_ms cnn_step_ms gpt_step_ms", metrics, " ")
    for (k = 1; k <= 3; k++) {
      m = metrics[k]
      a1 = med("1 minitrain " m); a2 = med("2 minitrain " m)
      l1 = med("1 libtorch " m); l2 = med("2 libtorch " m)
      p1 = med("1 pytorch " m); p2 = med("2 pytorch " m)
      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", m, cell(a1), cell(a2), cell(l1), cell(l2),
             cell(p1), cell(p2), ratio(a1, a2), ratio(l2, a2), ratio(p2, a2)
    }
    for (k = 1; k <= 3; k++) {
      m = metrics[k]
      printf "%s per round: minitrain 1:%s, 2:%s; libtorch 1:%s, 2:%s; PyTorch 1:%s, 2:%s\n", m, values["1 minitrain " m],
             values["2 minitrain " m], values["1 libtorch " m], values["2 libtorch " m], values["1 pytorch " m],
             values["2 pytorch " m]
    }
  }
AWK
) "$results"
