#!/usr/bin/env bash
# The GPU check: one run on a borrowed GPU machine that either succeeds or says everything that went
# wrong (docs/gpu.md, "Checking on a GPU machine"). It never stops at the first failure: every step
# runs under its own timeout, its outcome (ok, FAILED, TIMEOUT, skipped and why) goes into a table,
# and the next step runs. Steps:
#   env        driver, nvidia-smi, toolkit, CMake, GPUs, PyTorch: printed before anything is built
#   configure  CMake (3.22 or newer) for the GPU's architecture, against .gpu-deps/ when present
#              (scripts/pack-gpu-deps.sh); NCCL found or not (optional: its steps are skipped)
#   build      only what the check runs: test_cuda, test_nccl, mini_train, bench_gpu
#   cuda: ...  each CUDA test case as its own process (doctest -tc), so a hang or an illegal
#              address in one case cannot take the others with it
#   nccl       ProcessGroupNCCL on cuda:0 (when NCCL was found)
#   mini_train the seed job with --gpus 0, one epoch of Fashion-MNIST (when the data is there), and a
#              run killed mid-epoch and resumed from its step checkpoint, compared byte for byte
#   bench      bench/bench_gpu.cpp, and bench/gpu_torch.py beside it (when PyTorch sees the GPU)
# Everything lands in $OUT (default <build>/gpu-check): logs/<step>.log, results.tsv, table.txt.
# The whole check stays within MT_GPU_CHECK_BUDGET seconds (default 360): a step gets at most what
# is left, and steps past the budget are skipped, saying so. Without a GPU the GPU steps are skipped
# with the reason (the build is still checked) and the table is still written.
# Exit code: 0 when no step failed (skips allowed), 1 otherwise.
#
#   bash scripts/gpu-check.sh
#   MT_GPU_CHECK_BUILD=/tmp/b MT_GPU_CHECK_JOBS=8 bash scripts/gpu-check.sh
#   MT_GPU_CHECK_CMAKE_ARGS="-DMT_NCCL=OFF" bash scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
build=${MT_GPU_CHECK_BUILD:-/tmp/mt-gpu-check}
out=${OUT:-$build/gpu-check}
logs=$out/logs
mkdir -p "$logs"
jobs=${MT_GPU_CHECK_JOBS:-$(nproc)}
budget=${MT_GPU_CHECK_BUDGET:-360}
start=$(date +%s)
results=$out/results.tsv
printf 'step\tstatus\tseconds\tnote\n' >"$results"
failures=0

elapsed() { echo $(( $(date +%s) - start )); }
record() {  # step status seconds note
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$results"
  printf '== %-58s %-8s %4ss  %s\n' "$1" "$2" "$3" "$4"
  [[ $2 == FAILED || $2 == TIMEOUT ]] && failures=$((failures + 1))
  return 0
}
skip() { record "$1" skipped 0 "$2"; }
safe_name() { printf '%s' "$1" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-80; }

# run_step NAME LIMIT_S COMMAND...: runs COMMAND with its output in logs/NAME.log, under
# min(LIMIT_S, budget left); records ok / FAILED (rc) / TIMEOUT with the last line of the log.
# Exit code 77 (the tests' "skipped: no GPU") is a skip only where nvidia-smi lists no GPU.
# Returns the command's status, so later steps can depend on it.
run_step() {
  local name=$1 limit=$2
  shift 2
  local left=$(( budget - $(elapsed) ))
  if (( left < 5 )); then
    skip "$name" "out of the ${budget} s budget"
    return 125
  fi
  (( limit > left )) && limit=$left
  local log=$logs/$(safe_name "$name").log t0=$(date +%s) rc
  timeout --kill-after=5 "$limit" "$@" >"$log" 2>&1
  rc=$?
  local took=$(( $(date +%s) - t0 )) last
  last=$(grep -v '^\s*$' "$log" | tail -1 | cut -c1-100)
  if (( rc == 0 )); then
    record "$name" ok "$took" "$last"
  elif (( rc == 124 || rc == 137 )); then
    record "$name" TIMEOUT "$took" "killed after ${limit} s; see logs/$(basename "$log")"
  elif (( rc == 77 && gpus == 0 )); then
    record "$name" skipped "$took" "$last"
  elif (( rc == 77 )); then  # "no GPU" where nvidia-smi lists one: the driver or runtime is broken
    record "$name" FAILED "$took" "skipped although nvidia-smi lists a GPU: $last"
  else
    record "$name" FAILED "$took" "rc $rc: $last"
  fi
  return $rc
}

# ---- env: what this machine is, before anything is built -----------------------------------------
command -v nvcc >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
{
  echo "date:      $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host:      $(uname -srm), $(nproc) cores"
  driver=$(sed -n 's/^NVRM version: *//p' /proc/driver/nvidia/version 2>/dev/null)
  echo "driver:    ${driver:-none loaded (no /proc/driver/nvidia/version)}"
  echo "toolkit:   $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'nvcc not found')"
  echo "cmake:     $(cmake --version 2>/dev/null | head -1 || echo 'not found')"
  echo "python:    $(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "GPU" if torch.cuda.is_available() else "no GPU")' 2>&1 | tail -1)"
  echo "nvidia-smi:"
  timeout 20 nvidia-smi 2>&1 || echo "  (nvidia-smi missing or failed)"
  echo "GPUs:"
  timeout 10 nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv,noheader 2>&1 || true
} >"$logs/env.log" 2>&1
cat "$logs/env.log"
gpus=$(timeout 10 nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
gpus=${gpus:-0}
if (( gpus > 0 )); then
  record env ok "$(elapsed)" "$gpus GPU(s): $(timeout 10 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
else
  record env ok "$(elapsed)" "NO GPU: nvidia-smi lists none; the GPU steps will be skipped"
fi
# The GPU's architecture (9.0 -> 90), else sm_90 (H100/H200).
arch=$(timeout 10 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
[[ $arch =~ ^[0-9]+$ ]] || arch=90

# ---- configure and build ---------------------------------------------------------------------------
prefix=""
deps=$src/.gpu-deps
if [[ -d $deps/include/eigen3 ]]; then
  prefix="$deps"
  [[ -e /usr/include/zlib.h ]] || prefix="$prefix;$deps/zlib"  # the packed static zlib, if needed
fi
# NCCL: NCCL_ROOT, the toolkit's, else PyTorch's pip package (nvidia-nccl-cu*); none is fine.
nccl_root=${NCCL_ROOT:-}
if [[ -z $nccl_root ]] && command -v nvcc >/dev/null; then
  nvcc_root=$(dirname "$(dirname "$(command -v nvcc)")")
  [[ -e $nvcc_root/include/nccl.h ]] ||
    nccl_root=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
fi
configured=0
if ! command -v nvcc >/dev/null; then
  skip configure "nvcc not found (PATH, /usr/local/cuda/bin): nothing to build"
else
  # shellcheck disable=SC2086
  run_step configure 120 cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMT_CUDA=ON \
    -DMT_CUDA_ARCHITECTURES="$arch" -DCMAKE_CUDA_ARCHITECTURES="$arch" -DMT_BLAS=OFF -DMT_MPI=OFF \
    ${prefix:+-DCMAKE_PREFIX_PATH="$prefix"} ${nccl_root:+-DNCCL_ROOT="$nccl_root"} ${MT_GPU_CHECK_CMAKE_ARGS:-} &&
    configured=1
  grep "minitrain:" "$logs/configure.log" || true
fi
built=0
have_nccl=0
if (( configured )); then
  grep -q "NCCL ON" "$logs/configure.log" && have_nccl=1
  targets=(test_cuda mini_train bench_gpu)
  (( have_nccl )) && targets+=(test_nccl)
  run_step "build (-j$jobs: ${targets[*]})" 300 cmake --build "$build" --parallel "$jobs" --target "${targets[@]}" &&
    built=1
  (( built )) || grep -m10 -B2 -A6 "error" "$logs"/build*.log | head -40
fi

# ---- GPU tests: one process per CUDA test case -------------------------------------------------------
if (( ! built )); then
  skip "cuda: kernel tests" "not built"
elif (( gpus == 0 )); then
  skip "cuda: kernel tests" "no GPU ($("$build/tests/test_cuda" 2>&1 | head -1 | cut -c1-300))"
else
  # A GPU that nvidia-smi lists but the CUDA runtime does not see (a driver older than the toolkit)
  # is a failure here, not a skip: test_cuda's skip line says why (Note [Why no GPU]).
  "$build/tests/test_cuda" --list-test-cases >"$out/cuda_cases.raw" 2>"$logs/cuda_list.log"
  if (( $? == 77 )); then
    record "cuda: the CUDA runtime sees the GPU" FAILED 0 "$(grep -h SKIPPED "$out/cuda_cases.raw" "$logs/cuda_list.log" | cut -c1-200)"
  else
    grep -v -e '^\[doctest\]' -e '^====' "$out/cuda_cases.raw" >"$out/cuda_cases.txt" || true
    [[ -s $out/cuda_cases.txt ]] || record "cuda: list the test cases" FAILED 0 "test_cuda --list-test-cases listed none"
  fi
  while IFS= read -r case_name; do
    [[ -z $case_name ]] && continue
    # doctest splits filters at commas: escape them. "1 passed" proves the filter matched the case.
    run_step "cuda: $case_name" 60 "$build/tests/test_cuda" --test-case="${case_name//,/\\,}" &&
      { grep -qE 'test cases: +1 \| +1 passed' "$logs/$(safe_name "cuda: $case_name").log" ||
          record "cuda: $case_name (ran?)" FAILED 0 "doctest did not report exactly this one case as passed"; }
  done < <(cat "$out/cuda_cases.txt" 2>/dev/null)
fi
if (( ! built )); then
  skip "nccl: collectives and DDP on cuda:0" "not built"
elif (( ! have_nccl )); then
  skip "nccl: collectives and DDP on cuda:0" "optional: no NCCL found (NCCL_ROOT, toolkit, nvidia-nccl pip package)"
elif (( gpus == 0 )); then
  skip "nccl: collectives and DDP on cuda:0" "no GPU"
else
  run_step "nccl: collectives and DDP on cuda:0" 90 "$build/tests/test_nccl"
fi

# ---- mini_train on the GPU ---------------------------------------------------------------------------
if (( ! built || gpus == 0 )); then
  skip "mini_train --gpus 0: seed job" "$( (( built )) && echo 'no GPU' || echo 'not built')"
  skip "mini_train --gpus 0: Fashion-MNIST, 1 epoch" "$( (( built )) && echo 'no GPU' || echo 'not built')"
  skip "mini_train --gpus 0: killed mid-epoch, resumed bit-exact" "$( (( built )) && echo 'no GPU' || echo 'not built')"
else
  run_step "mini_train --gpus 0: seed job" 60 bash -c 'cd "$1" && "$2" --gpus 0 --epochs 5 --save "$1/gpu_model.safetensors"' \
    _ "$out" "$build/mini_train"
  # Checkpoints from device memory, resumed onto the GPU mid-epoch (Note [Mid-epoch resume]): the
  # run killed at step 23 and resumed from its step 21 ends at the uninterrupted run's bytes.
  run_step "mini_train --gpus 0: killed mid-epoch, resumed bit-exact" 90 bash -c '
    set -e; cd "$1"; rm -rf gpu_ck; f=(--gpus 0 --model mlp --hidden 16,8 --optimizer adam --schedule cosine --samples 500 --epochs 4 -q)
    "$2" "${f[@]}" --save gpu_full.safetensors
    MT_TEST_KILL_STEP=23 "$2" "${f[@]}" --checkpoint-dir gpu_ck --checkpoint-every 7 --save gpu_x.safetensors || true
    "$2" "${f[@]}" --checkpoint-dir gpu_ck --checkpoint-every 7 --resume auto --save gpu_resumed.safetensors
    cmp gpu_full.safetensors gpu_resumed.safetensors' _ "$out" "$build/mini_train"
  fashion=""
  for d in "$deps/fashion-mnist" /usr/share/datasets/fashion-mnist; do [[ -d $d ]] && { fashion=$d; break; }; done
  if [[ -z $fashion ]]; then
    skip "mini_train --gpus 0: Fashion-MNIST, 1 epoch" "no data (.gpu-deps/fashion-mnist or /usr/share/datasets/fashion-mnist)"
  else
    run_step "mini_train --gpus 0: Fashion-MNIST, 1 epoch" 120 "$build/mini_train" --gpus 0 --dataset fashion-mnist \
      --data-dir "$fashion" --epochs 1 --eval
  fi
fi

# ---- benchmarks: minitrain, and PyTorch beside it -------------------------------------------------------
bench_mt=$out/bench_minitrain.txt bench_pt=$out/bench_torch.txt
if (( ! built || gpus == 0 )); then
  skip "bench: bench_gpu (minitrain)" "$( (( built )) && echo 'no GPU' || echo 'not built')"
else
  run_step "bench: bench_gpu (minitrain)" 120 "$build/bench/bench_gpu"
  cp "$logs/$(safe_name "bench: bench_gpu (minitrain)").log" "$bench_mt" 2>/dev/null || true
fi
if (( gpus == 0 )); then
  skip "bench: gpu_torch.py (PyTorch)" "no GPU"
elif ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  skip "bench: gpu_torch.py (PyTorch)" "optional: PyTorch missing or without CUDA here"
else
  run_step "bench: gpu_torch.py (PyTorch)" 120 python3 "$src/bench/gpu_torch.py"
  cp "$logs/$(safe_name "bench: gpu_torch.py (PyTorch)").log" "$bench_pt" 2>/dev/null || true
fi

# ---- the table ---------------------------------------------------------------------------------------------
{
  echo "minitrain GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), $(elapsed) s of a ${budget} s budget"
  grep -E '^(driver|toolkit|cmake):' "$logs/env.log"
  (( gpus > 0 )) || echo "NO GPU on this machine: only the build was checked"
  echo
  python3 - "$results" <<'PY' 2>/dev/null || column -t -s $'\t' "$results"
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
print(f"{'step':60} {'status':8} {'s':>4}  note")
for step, status, secs, note in rows:
    print(f"{step[:60]:60} {status:8} {secs:>4}  {note}")
counts = {}
for r in rows:
    counts[r[1]] = counts.get(r[1], 0) + 1
print("\n" + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
PY
  if grep -q '^gemm_fp32_tflops ' "$bench_mt" 2>/dev/null; then
    echo
    python3 - "$bench_mt" "$bench_pt" <<'PY' || echo "(benchmark table failed; raw numbers in $bench_mt)"
import math, os, sys
def read(p):
    if not os.path.exists(p):
        return {}
    return {k: v for k, v in (l.split(None, 1) for l in open(p) if " " in l.strip())}
mt, pt = read(sys.argv[1]), read(sys.argv[2])
def num(d, k):
    try:
        return float(d.get(k, "nan"))
    except ValueError:
        return math.nan
rows = [  # key, what, unit
    ("gemm_fp32_tflops", "GEMM 4096^2 fp32", "TFLOP/s"),
    ("gemm_tf32_tflops", "GEMM 4096^2 TF32", "TFLOP/s"),
    ("add_gbps", "add, 64 Mi floats", "GB/s"),
    ("memcpy_gbps", "D2D cudaMemcpy", "GB/s"),
    ("mlp_step_ms", "MLP 4x4096, batch 4096 step", "ms"),
    ("seed_step_us", "seed step Linear(10,1) b32", "us"),
    ("nccl_small_us", "NCCL all-reduce 1 float (w=1)", "us"),
    ("nccl_large_gbps", "NCCL all-reduce 256 MiB (w=1)", "GB/s"),
]
print(f"GPU: {mt.get('device', '?').strip()}")
print(f"{'benchmark':32} {'minitrain':>12} {'PyTorch':>12} {'mt/pt':>7}  target")
for key, what, unit in rows:
    a, b = num(mt, key), num(pt, key)
    verdict = ""
    if key == "add_gbps":  # against the 4.8 TB/s HBM3e of an H200, and against memcpy
        verdict = f">= 80% of 4.8 TB/s: {100 * a / 4800:.0f}% " + ("ok" if a >= 0.8 * 4800 else "MISSED")
    elif key == "mlp_step_ms" and not math.isnan(b):
        verdict = "<= 1.1x PyTorch: " + ("ok" if a <= 1.1 * b else "MISSED")
    elif key == "seed_step_us" and not math.isnan(b):
        verdict = "<= 1/3 of PyTorch: " + ("ok" if a <= b / 3 else "MISSED")
    ratio = a / b if b and not math.isnan(b) else math.nan
    print(f"{what:32} {a:>9.4g} {unit:<3}{b:>9.4g} {unit:<3}{ratio:>6.2f}  {verdict}")
PY
  fi
} >"$out/table.txt"
echo
cat "$out/table.txt"
echo
echo "gpu-check: table and logs in $out ($(elapsed) s); $failures step(s) failed"
(( failures == 0 ))
