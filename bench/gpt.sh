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
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MT_BENCH_BUILD_DIR:-$repo/build-bench}
torch_build=${MT_BENCH_TORCH_BUILD_DIR:-$repo/build-bench-torch}
python=${MT_BENCH_PYTHON:-/usr/bin/python3}
rounds=${MT_BENCH_ROUNDS:-3}
clock=${MT_BENCH_CLOCK:-cpu}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 MT_NUM_THREADS=1
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
results=$(mktemp)
trap 'rm -f "$results"' EXIT

cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DMT_NATIVE=ON -DMT_BUILD_TESTS=OFF \
  -DMT_BUILD_BENCH=ON -DMT_CUDA=OFF >/dev/null
cmake --build "$build" --target bench_gpt >/dev/null
have_libtorch=0
if cmake -S "$repo/bench/torch" -B "$torch_build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null 2>&1; then
  cmake --build "$torch_build" --target bench_torch_gpt >/dev/null
  have_libtorch=1
else
  echo "gpt.sh: libtorch not found (apt install libtorch-dev): no libtorch column" >&2
fi
have_pytorch=0
if "$python" -c "import torch" 2>/dev/null; then have_pytorch=1; else echo "gpt.sh: $python has no torch" >&2; fi

for round in $(seq 1 "$rounds"); do
  echo "gpt.sh: round $round of $rounds, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
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
awk -v suffix="$suffix" '
  { values[$1 " " $2] = values[$1 " " $2] " " $3 }
  function med(key,    n, v, i, j, t) {
    n = split(values[key], v, " ")
    if (n == 0) return ""
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
  }
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
  }' "$results"
