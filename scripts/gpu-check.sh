#!/usr/bin/env bash
# The GPU check: one run on a borrowed GPU machine that either succeeds or says everything that went
# wrong (docs/gpu.md, "Checking on a GPU machine"). It never stops at the first failure: every step
# runs under its own timeout, its outcome (ok, FAILED, TIMEOUT, skipped and why) goes into a table,
# and the next step runs. Steps, in this order (the benchmarks before the long runs, so a lease that
# ends early still brings the numbers back):
#   env        driver, nvidia-smi, GPUs, PyTorch; the preflight: the paths of nvcc, g++, cmake,
#              ninja, the toolkit's libcudart/libcublas and NCCL. Without a GPU the check ends here.
#   configure  CMake (3.22 or newer), Ninja, for the GPU's architecture, against .gpu-deps/ when
#              present (scripts/pack-gpu-deps.sh); NCCL found or not (optional: its step is skipped)
#   build      only what the check runs: test_cuda, test_nccl, mini_train, bench_gpu
#   bench      bench/bench_gpu.cpp, and bench/gpu_torch.py beside it (when PyTorch sees the GPU)
#   seed       mini_train's seed job on the GPU and on the CPU: the final losses must be equal
#   nccl       ProcessGroupNCCL on cuda:0 (when NCCL was found)
#   cuda: ...  each CUDA test case as its own process (doctest -tc), so a hang or an illegal
#              address in one case cannot take the others with it
#   resume     an MLP killed mid-epoch and resumed from its checkpoint ends at the same bytes
#   fashion    one epoch of Fashion-MNIST (when the data is there): test accuracy >= 0.85
# A step is judged on its figures, not only its exit code. A failed step prints the last 30 lines of
# its log.
#
# Note [What comes back from a lease]: a borrowed machine returns at most 8 files from $OUT (2
# folders deep) and the last 12,000 characters of output. So everything bulky (build, logs, models,
# checkpoints) lives in a scratch folder, and $OUT receives at most 6 files: table.txt (the steps and
# the benchmark table), results.tsv (one row per step), env.txt (the preflight), benchmarks.txt (the
# raw numbers) and logs.tgz (every log, each cut to its last MiB). stdout carries the table and the
# tails of the failures, which is what the 12,000 characters are for.
#
# The whole check stays within MT_GPU_CHECK_BUDGET seconds (default 540: a device call's 600 s
# limit less room to pack): a step gets at most what is left, and steps past it are skipped.
# Exit code: 0 when no step failed (skips allowed), 1 otherwise.
#
#   OUT=/tmp/out bash scripts/gpu-check.sh
#   MT_GPU_CHECK_SCRATCH=/tmp/s MT_GPU_CHECK_JOBS=8 bash scripts/gpu-check.sh
#   MT_GPU_CHECK_CMAKE_ARGS="-DMT_NCCL=OFF" bash scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
src=$(pwd)
scratch=${MT_GPU_CHECK_SCRATCH:-/tmp/mt-gpu-check}
build=${MT_GPU_CHECK_BUILD:-$scratch/build}
out=${OUT:-$scratch/out}
logs=$scratch/logs
runs=$scratch/runs  # models, checkpoints
rm -rf "$logs" "$runs" "$scratch/bench_table.txt"
mkdir -p "$out" "$logs" "$runs"
jobs=${MT_GPU_CHECK_JOBS:-$(nproc)}
budget=${MT_GPU_CHECK_BUDGET:-540}
start=$(date +%s)
results=$out/results.tsv
printf 'step\tstatus\tseconds\tnote\n' >"$results"
failures=0
gpus=0

elapsed() { echo $(( $(date +%s) - start )); }
safe_name() { printf '%s' "$1" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-80; }
log_of() { echo "$logs/$(safe_name "$1").log"; }
# record STEP STATUS SECONDS NOTE: one row; a FAILED or TIMEOUT step prints its log's last 30 lines.
record() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$results"
  printf '== %-58s %-8s %4ss  %s\n' "$1" "$2" "$3" "$4"
  if [[ $2 == FAILED || $2 == TIMEOUT ]]; then
    failures=$((failures + 1))
    local log
    log=$(log_of "$1")
    [[ -s $log ]] && { echo "-- last 30 lines of logs/$(basename "$log"):"; tail -n 30 "$log" | cut -c1-300; echo "--"; }
  fi
  return 0
}
skip() { record "$1" skipped 0 "$2"; }

# run_step NAME LIMIT_S COMMAND...: runs COMMAND with its output in logs/NAME.log, under
# min(LIMIT_S, budget left); records ok / FAILED (rc) / TIMEOUT with the last line of the log.
# Exit code 77 (the tests' "skipped: no GPU") is a failure: this runs only where nvidia-smi lists a
# GPU, so the driver or runtime is broken (Note [Why no GPU]). Returns the command's status.
run_step() {
  local name=$1 limit=$2
  shift 2
  local left=$(( budget - $(elapsed) ))
  if (( left < 5 )); then
    skip "$name" "out of the ${budget} s budget"
    return 125
  fi
  (( limit > left )) && limit=$left
  local log t0 rc
  log=$(log_of "$name")
  t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >"$log" 2>&1
  rc=$?
  local took=$(( $(date +%s) - t0 )) last
  last=$(grep -v '^\s*$' "$log" | tail -1 | cut -c1-100)
  if (( rc == 0 )); then
    record "$name" ok "$took" "$last"
  elif (( rc == 124 || rc == 137 )); then
    record "$name" TIMEOUT "$took" "killed after ${limit} s"
  elif (( rc == 77 )); then
    record "$name" FAILED "$took" "skipped although nvidia-smi lists a GPU: $last"
  else
    record "$name" FAILED "$took" "rc $rc: $last"
  fi
  return $rc
}

# judge NAME OK NOTE: a step's figure, judged (OK 1 or 0), as a row of its own.
judge() { if (( $2 )); then record "$1" ok 0 "$3"; else record "$1" FAILED 0 "$3"; fi; }

# Packs $OUT's last files: the logs (each cut to its last MiB; 16 MiB is a returned file's limit).
finish() {
  local packed=$scratch/packed
  rm -rf "$packed" && mkdir -p "$packed/logs"
  for f in "$logs"/*; do [[ -f $f ]] && tail -c 1048576 "$f" >"$packed/logs/$(basename "$f")"; done
  tar -czf "$out/logs.tgz" -C "$packed" logs
  echo
  cat "$out/table.txt"
  echo
  echo "gpu-check: $(ls "$out" | wc -l) files in $out ($(ls "$out" | tr '\n' ' ')); bulky outputs in $scratch;" \
       "$(elapsed) s; $failures step(s) failed"
}

# ---- env and preflight: what this machine is, before anything is built ---------------------------------
command -v nvcc >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
where() { command -v "$1" 2>/dev/null || echo "NOT FOUND"; }
nvcc_root=""
command -v nvcc >/dev/null && nvcc_root=$(dirname "$(dirname "$(command -v nvcc)")")
# A library's path: the toolkit's lib folders first, then the loader's cache.
find_lib() {
  local name=$1 d
  for d in "$nvcc_root/lib64" "$nvcc_root/lib" "$nvcc_root/targets/x86_64-linux/lib"; do
    compgen -G "$d/$name*" >/dev/null && { ls "$d/$name"* | head -1; return; }
  done
  ldconfig -p 2>/dev/null | grep -m1 -o "/.*${name}[^ ]*" || echo "NOT FOUND"
}
# NCCL: NCCL_ROOT, the toolkit's, else PyTorch's pip package (nvidia-nccl-cu*); none is fine.
nccl_root=${NCCL_ROOT:-}
if [[ -z $nccl_root && -n $nvcc_root && ! -e $nvcc_root/include/nccl.h ]]; then
  nccl_root=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
fi
{
  echo "date:      $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host:      $(uname -srm), $(nproc) cores"
  driver=$(sed -n 's/^NVRM version: *//p' /proc/driver/nvidia/version 2>/dev/null)
  echo "driver:    ${driver:-none loaded (no /proc/driver/nvidia/version)}"
  echo "toolkit:   $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'nvcc not found')"
  echo "cmake:     $(cmake --version 2>/dev/null | head -1 || echo 'not found')"
  echo "python:    $(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "GPU" if torch.cuda.is_available() else "no GPU")' 2>&1 | tail -1)"
  echo "preflight:"
  echo "  nvcc      $(where nvcc)"
  echo "  g++       $(where g++) ($(g++ -dumpfullversion 2>/dev/null || echo '?'))"
  echo "  cmake     $(where cmake)"
  echo "  ninja     $(where ninja)"
  echo "  cudart    $(find_lib libcudart.so)"
  echo "  cublas    $(find_lib libcublas.so)"
  if [[ -n $nccl_root ]]; then
    echo "  nccl      $(ls "$nccl_root"/lib/libnccl.so* 2>/dev/null | head -1 || echo "NOT FOUND in $nccl_root")"
  else
    echo "  nccl      $(find_lib libnccl.so)"
  fi
  echo "nvidia-smi:"
  timeout 20 nvidia-smi 2>&1 || echo "  (nvidia-smi missing or failed)"
  echo "GPUs:"
  timeout 10 nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv,noheader 2>&1 || true
} >"$out/env.txt" 2>&1
cat "$out/env.txt"
cp "$out/env.txt" "$logs/env.log"
gpus=$(timeout 10 nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
gpus=${gpus:-0}
if (( gpus > 0 )); then
  record env ok "$(elapsed)" "$gpus GPU(s): $(timeout 10 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
else
  record env ok "$(elapsed)" "NO GPU: nvidia-smi lists none; nothing is built"
fi

write_table() {
  {
    echo "minitrain GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), $(elapsed) s of a ${budget} s budget"
    grep -E '^(driver|toolkit|cmake):' "$out/env.txt"
    (( gpus > 0 )) || echo "NO GPU on this machine (nvidia-smi lists none): the check was not run"
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
    [[ -s $scratch/bench_table.txt ]] && { echo; cat "$scratch/bench_table.txt"; }
  } >"$out/table.txt"
}

if (( gpus == 0 )); then
  echo "gpu-check: nvidia-smi lists no GPU on this machine, so nothing is configured, built or run" \
       "(a build without a GPU checks nothing the CPU CI does not)"
  write_table
  finish
  exit 0
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
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); else echo "gpu-check: no ninja here: Unix Makefiles"; fi
configured=0
if [[ -z $nvcc_root ]]; then
  skip configure "nvcc not found (PATH, /usr/local/cuda/bin): nothing to build"
else
  # shellcheck disable=SC2086
  run_step configure 120 cmake -S "$src" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DMT_CUDA=ON \
    -DMT_CUDA_ARCHITECTURES="$arch" -DCMAKE_CUDA_ARCHITECTURES="$arch" -DMT_BLAS=OFF -DMT_MPI=OFF \
    ${prefix:+-DCMAKE_PREFIX_PATH="$prefix"} ${nccl_root:+-DNCCL_ROOT="$nccl_root"} ${MT_GPU_CHECK_CMAKE_ARGS:-} &&
    configured=1
  grep "minitrain:" "$(log_of configure)" || true
fi
built=0
have_nccl=0
if (( configured )); then
  grep -q "NCCL ON" "$(log_of configure)" && have_nccl=1
  targets=(test_cuda mini_train bench_gpu)
  (( have_nccl )) && targets+=(test_nccl)
  run_step build 300 cmake --build "$build" --parallel "$jobs" --target "${targets[@]}" && built=1
fi
mini_train=$build/mini_train
# The value after `key` on the first line of a log that has it ("last loss 0.1234" -> 0.1234).
figure() { grep -o -m1 "$2 [0-9.eE+-]*" "$1" | awk '{print $NF}'; }

# ---- benchmarks first: minitrain, and PyTorch beside it ---------------------------------------------
bench_mt=$scratch/bench_minitrain.txt bench_pt=$scratch/bench_torch.txt
rm -f "$bench_mt" "$bench_pt"
if (( ! built )); then
  skip "bench: bench_gpu (minitrain)" "not built"
else
  run_step "bench: bench_gpu (minitrain)" 120 "$build/bench/bench_gpu"
  cp "$(log_of "bench: bench_gpu (minitrain)")" "$bench_mt" 2>/dev/null || true
fi
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  skip "bench: gpu_torch.py (PyTorch)" "optional: PyTorch missing or without CUDA here"
else
  run_step "bench: gpu_torch.py (PyTorch)" 120 python3 "$src/bench/gpu_torch.py"
  cp "$(log_of "bench: gpu_torch.py (PyTorch)")" "$bench_pt" 2>/dev/null || true
fi
{ echo "# bench_gpu (minitrain)"; cat "$bench_mt" 2>/dev/null; echo "# gpu_torch.py (PyTorch)"; cat "$bench_pt" 2>/dev/null; } \
  >"$out/benchmarks.txt"
if grep -q '^gemm_fp32_tflops ' "$bench_mt" 2>/dev/null; then
  python3 - "$bench_mt" "$bench_pt" >"$scratch/bench_table.txt" <<'PY' || echo "(benchmark table failed)" >"$scratch/bench_table.txt"
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
    ("gemm_bf16_tflops", "GEMM 4096^3 bf16", "TFLOP/s"),
    ("add_gbps", "add, 64 Mi floats", "GB/s"),
    ("memcpy_gbps", "D2D cudaMemcpy", "GB/s"),
    ("attention_ms", "attention T1024 d64 fwd+bwd", "ms"),
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
    if key == "gemm_bf16_tflops":  # against PyTorch's best bf16 GEMM on the same GPU (4096^3, 8192^3)
        peak = num(pt, "gemm_bf16_peak_tflops")
        verdict = (f">= 70% of measured peak: {100 * a / peak:.0f}% " + ("ok" if a >= 0.7 * peak else "MISSED")
                   if not math.isnan(peak) else "no measured peak (needs PyTorch)") + f" ({100 * a / 989:.0f}% of 989 dense)"
    elif key == "add_gbps":  # against the same run's device-to-device memcpy (and the H200's 4.8 TB/s)
        m = num(mt, "memcpy_gbps")
        verdict = (f">= 85% of memcpy: {100 * a / m:.0f}% " + ("ok" if a >= 0.85 * m else "MISSED")
                   + f" ({100 * a / 4800:.0f}% of 4.8 TB/s)")
    elif key == "attention_ms" and not math.isnan(b):
        verdict = "<= 1.5x PyTorch: " + ("ok" if a <= 1.5 * b else "MISSED")
    elif key == "mlp_step_ms" and not math.isnan(b):
        verdict = "<= 1.1x PyTorch: " + ("ok" if a <= 1.1 * b else "MISSED")
    elif key == "seed_step_us" and not math.isnan(b):
        verdict = "<= 1/3 of PyTorch: " + ("ok" if a <= b / 3 else "MISSED")
    ratio = a / b if b and not math.isnan(b) else math.nan
    print(f"{what:32} {a:>9.4g} {unit:<3}{b:>9.4g} {unit:<3}{ratio:>6.2f}  {verdict}")
PY
fi

# ---- the seed job: the GPU's final loss is the CPU's ------------------------------------------------------
if (( ! built )); then
  skip "seed: mini_train --gpus 0 vs the CPU" "not built"
else
  seed=(--epochs 5)
  run_step "seed: mini_train --gpus 0" 60 bash -c 'cd "$1" && shift && "$@"' _ "$runs" "$mini_train" --gpus 0 "${seed[@]}" \
    --save "$runs/seed_gpu.safetensors"
  run_step "seed: mini_train on the CPU" 60 bash -c 'cd "$1" && shift && "$@"' _ "$runs" "$mini_train" "${seed[@]}" \
    --save "$runs/seed_cpu.safetensors"
  gpu_loss=$(figure "$(log_of "seed: mini_train --gpus 0")" "last loss")
  cpu_loss=$(figure "$(log_of "seed: mini_train on the CPU")" "last loss")
  # Printed to 4 decimals; one unit of the last place allowed (the GPU's sums run in another order).
  same=$(python3 -c 'import sys; a, b = map(float, sys.argv[1:]); print(int(abs(a - b) <= 1.5e-4))' \
         "${gpu_loss:-nan}" "${cpu_loss:-nan}" 2>/dev/null || echo 0)
  judge "seed: final loss on the GPU equals the CPU's" "${same:-0}" "GPU ${gpu_loss:-none}, CPU ${cpu_loss:-none}"
fi

# ---- NCCL, then the CUDA test cases one process each -------------------------------------------------------
if (( ! built )); then
  skip "nccl: collectives and DDP on cuda:0" "not built"
elif (( ! have_nccl )); then
  skip "nccl: collectives and DDP on cuda:0" "optional: no NCCL found (NCCL_ROOT, toolkit, nvidia-nccl pip package)"
else
  run_step "nccl: collectives and DDP on cuda:0" 90 "$build/tests/test_nccl"
fi
if (( ! built )); then
  skip "cuda: kernel tests" "not built"
else
  # A GPU that nvidia-smi lists but the CUDA runtime does not see (a driver older than the toolkit)
  # is a failure here, not a skip: test_cuda's skip line says why (Note [Why no GPU]).
  "$build/tests/test_cuda" --list-test-cases >"$scratch/cuda_cases.raw" 2>"$logs/cuda_list.log"
  if (( $? == 77 )); then
    record "cuda: the CUDA runtime sees the GPU" FAILED 0 "$(grep -h SKIPPED "$scratch/cuda_cases.raw" "$logs/cuda_list.log" | cut -c1-200)"
  else
    grep -v -e '^\[doctest\]' -e '^====' "$scratch/cuda_cases.raw" >"$scratch/cuda_cases.txt" || true
    [[ -s $scratch/cuda_cases.txt ]] || record "cuda: list the test cases" FAILED 0 "test_cuda --list-test-cases listed none"
  fi
  while IFS= read -r case_name; do
    [[ -z $case_name ]] && continue
    # doctest splits filters at commas: escape them. "1 passed" proves the filter matched the case.
    run_step "cuda: $case_name" 60 "$build/tests/test_cuda" --test-case="${case_name//,/\\,}" &&
      { grep -qE 'test cases: +1 \| +1 passed' "$(log_of "cuda: $case_name")" ||
          record "cuda: $case_name (ran?)" FAILED 0 "doctest did not report exactly this one case as passed"; }
  done < <(cat "$scratch/cuda_cases.txt" 2>/dev/null)
fi

# ---- the long runs: resumed mid-epoch, then Fashion-MNIST -------------------------------------------------
if (( ! built )); then
  skip "resume: killed mid-epoch, resumed bit-exact" "not built"
  skip "fashion: mini_train --gpus 0, 1 epoch" "not built"
else
  # Checkpoints from device memory, resumed onto the GPU mid-epoch (Note [Mid-epoch resume]): the
  # run killed at step 23 and resumed from its step 21 ends at the uninterrupted run's bytes.
  run_step "resume: killed mid-epoch, resumed bit-exact" 90 bash -c '
    set -e; cd "$1"; rm -rf gpu_ck; f=(--gpus 0 --model mlp --hidden 16,8 --optimizer adam --schedule cosine --samples 500 --epochs 4 -q)
    "$2" "${f[@]}" --save gpu_full.safetensors
    MT_TEST_KILL_STEP=23 "$2" "${f[@]}" --checkpoint-dir gpu_ck --checkpoint-every 7 --save gpu_x.safetensors || true
    "$2" "${f[@]}" --checkpoint-dir gpu_ck --checkpoint-every 7 --resume auto --save gpu_resumed.safetensors
    cmp gpu_full.safetensors gpu_resumed.safetensors' _ "$runs" "$mini_train"
  fashion=""
  for d in "$deps/fashion-mnist" /usr/share/datasets/fashion-mnist; do [[ -d $d ]] && { fashion=$d; break; }; done
  if [[ -z $fashion ]]; then
    skip "fashion: mini_train --gpus 0, 1 epoch" "no data (.gpu-deps/fashion-mnist or /usr/share/datasets/fashion-mnist)"
  else
    run_step "fashion: mini_train --gpus 0, 1 epoch" 120 bash -c 'cd "$1" && shift && "$@"' _ "$runs" "$mini_train" \
      --gpus 0 --dataset fashion-mnist --data-dir "$fashion" --epochs 1 --eval --save "$runs/fashion.safetensors"
    accuracy=$(figure "$(log_of "fashion: mini_train --gpus 0, 1 epoch")" "Test accuracy:")
    good=$(python3 -c 'import sys; print(int(float(sys.argv[1]) >= 0.85))' "${accuracy:-nan}" 2>/dev/null || echo 0)
    judge "fashion: test accuracy >= 0.85 after 1 epoch" "${good:-0}" "accuracy ${accuracy:-none}"
  fi
fi

write_table
finish
(( failures == 0 ))
