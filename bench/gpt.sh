#!/usr/bin/env bash
# bench/gpt.sh: one training step of the GPT preset (vocab 256, context 64, dim 128, 4 layers, 4 heads,
# tied head; batch 32; cross-entropy, clipping to norm 1.0, AdamW with weight decay on matrices only)
# in minitrain (bench_gpt.cpp), libtorch C++ (torch/bench_torch_gpt.cpp) and PyTorch
# (gpt_step_torch.py), single-threaded, in the same run. Each program runs MT_BENCH_ROUNDS times
# (default 3), interleaved; the table shows the medians and time(other) / time(minitrain).
#   bench/gpt.sh        (libtorch-dev and python3-torch for the other two columns)
# Environment: MT_BENCH_BUILD_DIR, MT_BENCH_TORCH_BUILD_DIR, MT_BENCH_PYTHON, MT_BENCH_ROUNDS,
# MT_BENCH_CLOCK=wall|cpu (default cpu here: a step of ~0.2 s is long enough for the thread's CPU time
# to be the steadier figure on a shared machine; bench/timing.h).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
clock=${MT_BENCH_CLOCK:-cpu}
bench_one_thread
results=$(mktemp)
trap 'rm -f "$results"' EXIT

bench_build bench_gpt
bench_build_libtorch bench_torch_gpt
bench_find_pytorch

for round in $(seq 1 "$rounds"); do
  echo "gpt.sh: round $round of $rounds, $(bench_load)" >&2
  "$build/bench/bench_gpt" 2>/dev/null >>"$results"
  if [ "$have_libtorch" = 1 ]; then "$torch_build/bench_torch_gpt" 2>/dev/null >>"$results"; fi
  if [ "$have_pytorch" = 1 ]; then (cd "$repo/bench" && "$python" gpt_step_torch.py 2>/dev/null) >>"$results"; fi
done

suffix=""
[ "$clock" = cpu ] && suffix=":cpu"
echo
echo "GPT preset training step, batch 32; one thread, $clock clock, median of $rounds round(s), $(date +%F)"
echo "| metric | minitrain | libtorch | PyTorch | libtorch/minitrain | PyTorch/minitrain |"
echo "|---|---:|---:|---:|---:|---:|"
awk -v suffix="$suffix" -f "$median_awk" -f <(cat <<'AWK'
  { collect() }
  function cell(x) { return x == "" ? "n/a" : sprintf("%.1f", x) }
  function na(x) { return x == "" ? "n/a" : x }
  function ratio(other, mine) { return other == "" || mine == "" ? "n/a" : sprintf("%.2f×", other / mine) }
  END {
    m = "gpt_step_ms" suffix
    a = med("minitrain " m); l = med("libtorch " m); p = med("pytorch " m)
    printf "| gpt_step_ms | %s | %s | %s | %s | %s |\n", cell(a), cell(l), cell(p), ratio(l, a), ratio(p, a)
    printf "\nper round [ms]: minitrain%s; libtorch%s; PyTorch%s\n", na(values["minitrain " m]), na(values["libtorch " m]), na(values["pytorch " m])
    # cpu_share: CPU time over wall time, the median over the rounds (1 = the machine was idle).
    printf "cpu_share: minitrain %s, libtorch %s, PyTorch %s\n", na(med("minitrain cpu_share")), na(med("libtorch cpu_share")), na(med("pytorch cpu_share"))
  }
AWK
) "$results"
