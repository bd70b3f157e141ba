#!/usr/bin/env bash
# The GPU check, on a machine with an NVIDIA GPU, nvcc, CMake and PyTorch but no package registry:
#   1. configure + build Release for sm_90 against .gpu-deps/ (scripts/pack-gpu-deps.sh packs it
#      where the dependencies are installed; no OpenBLAS, Gloo or MPI needed), NCCL required;
#   2. the GPU tests (CTest names matching cuda|nccl|gpu; none may be skipped when a GPU is there),
#      and the seed job through mini_train --gpus 0;
#   3. benchmarks, minitrain (bench/bench_gpu.cpp) beside PyTorch (bench/gpu_torch.py), as a table
#      with the targets.
# Logs and the table go to $OUT when set (else <build>/gpu-check/). Any failed step stops the script
# with a non-zero exit code and names the step. Budget: under 8 minutes on an H200 with 16 cores.
#
#   bash scripts/gpu-check.sh                    # everything
#   bash scripts/gpu-check.sh --build-only       # stop after the build (a dry run where no GPU is)
#   MT_GPU_CHECK_BUILD=/tmp/b bash scripts/gpu-check.sh   # build folder (default /tmp/mt-gpu-check)
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
build_only=0
[[ ${1:-} == --build-only ]] && build_only=1
build=${MT_GPU_CHECK_BUILD:-/tmp/mt-gpu-check}
out=${OUT:-$build/gpu-check}
mkdir -p "$out"
jobs=$(nproc)
start=$(date +%s)

step() { echo "== $* ($(( $(date +%s) - start )) s)"; }
die() { echo "gpu-check: FAILED: $*" >&2; exit 1; }

# ---- 1. configure and build ------------------------------------------------------------------
deps=$src/.gpu-deps
[[ -d $deps/include/eigen3 ]] || die "$deps is missing: run scripts/pack-gpu-deps.sh where the dependencies are installed"
prefix="$deps"
# zlib: the machine's own when it has the headers, else the packed static one.
if [[ ! -e /usr/include/zlib.h ]]; then prefix="$prefix;$deps/zlib"; fi
command -v nvcc >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
command -v nvcc >/dev/null || die "nvcc not found (PATH, /usr/local/cuda/bin)"
# NCCL: the CUDA toolkit's, else PyTorch's pip package (nvidia-nccl-cu*).
nccl_root=${NCCL_ROOT:-}
if [[ -z $nccl_root ]]; then
  nvcc_root=$(dirname "$(dirname "$(command -v nvcc)")")
  if [[ ! -e $nvcc_root/include/nccl.h ]]; then
    nccl_root=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
  fi
fi
step "configure (NCCL_ROOT=${nccl_root:-toolkit}; log $out/configure.log)"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMT_CUDA=ON -DMT_NCCL=ON -DMT_CUDA_ARCHITECTURES=90 \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DMT_BLAS=OFF -DMT_MPI=OFF -DCMAKE_PREFIX_PATH="$prefix" \
  ${nccl_root:+-DNCCL_ROOT="$nccl_root"} ${MT_GPU_CHECK_CMAKE_ARGS:-} >"$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; die "configure"; }
grep "minitrain:" "$out/configure.log"
step "build -j$jobs (log $out/build.log)"
cmake --build "$build" --parallel "$jobs" >"$out/build.log" 2>&1 || { grep -m20 -B2 -A6 "error" "$out/build.log"; die "build"; }
if (( build_only )); then
  step "built; --build-only: stopping before the GPU steps"
  exit 0
fi

# ---- 2. tests ----------------------------------------------------------------------------------
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || echo 0)
(( gpus > 0 )) || die "no GPU visible (nvidia-smi -L lists none); use --build-only on a machine without one"
step "GPU tests (log $out/ctest.log)"
(cd "$build" && ctest -R "cuda|nccl|gpu|CUDA|NCCL|GPU" --output-on-failure --timeout 300) >"$out/ctest.log" 2>&1 ||
  { tail -60 "$out/ctest.log"; die "GPU tests"; }
grep -E "tests passed|Total Test" "$out/ctest.log"
! grep -q "\*\*\*Skipped\|Not Run" "$out/ctest.log" || { grep "Skipped\|Not Run" "$out/ctest.log"; die "a GPU test was skipped on a GPU machine"; }
step "mini_train --gpus 0 (the seed job on cuda:0)"
(cd "$out" && "$build/mini_train" --gpus 0 --epochs 5 --save "$out/gpu_model.safetensors") >"$out/mini_train.log" 2>&1 ||
  { cat "$out/mini_train.log"; die "mini_train --gpus 0"; }
grep -E "device|Epoch \[5/5\]" "$out/mini_train.log"

# ---- 3. benchmarks -----------------------------------------------------------------------------
step "bench_gpu (minitrain)"
"$build/bench/bench_gpu" | tee "$out/bench_minitrain.txt" || die "bench_gpu"
step "gpu_torch.py (PyTorch)"
python3 "$src/bench/gpu_torch.py" | tee "$out/bench_torch.txt" || die "bench/gpu_torch.py"
python3 - "$out/bench_minitrain.txt" "$out/bench_torch.txt" >"$out/table.txt" <<'PY' || die "table"
import sys
def read(p):
    return {k: v for k, v in (l.split(None, 1) for l in open(p) if " " in l)}
mt, pt = read(sys.argv[1]), read(sys.argv[2])
rows = [  # key, what, unit, higher is better, target (ratio minitrain/PyTorch, or vs memcpy)
    ("gemm_fp32_tflops", "GEMM 4096^2 fp32", "TFLOP/s", True, None),
    ("gemm_tf32_tflops", "GEMM 4096^2 TF32", "TFLOP/s", True, None),
    ("add_gbps", "add, 64 Mi floats", "GB/s", True, ">= 80% of memcpy"),
    ("memcpy_gbps", "D2D cudaMemcpy", "GB/s", True, None),
    ("mlp_step_ms", "MLP 4x4096, batch 4096 step", "ms", False, "<= 1.1x PyTorch"),
    ("seed_step_us", "seed step Linear(10,1) b32", "us", False, "<= 1/3 of PyTorch"),
    ("nccl_small_us", "NCCL all-reduce 1 float (w=1)", "us", False, None),
    ("nccl_large_gbps", "NCCL all-reduce 256 MiB (w=1)", "GB/s", True, None),
]
print(f"GPU: {mt.get('device', '?').strip()}")
print(f"{'benchmark':32} {'minitrain':>12} {'PyTorch':>12} {'mt/pt':>7}  target")
for key, what, unit, higher, target in rows:
    a, b = float(mt.get(key, "nan")), float(pt.get(key, "nan"))
    verdict = ""
    if key == "add_gbps":
        share = a / float(mt.get("memcpy_gbps", "nan"))
        verdict = f"{target}: {100 * share:.0f}% " + ("ok" if share >= 0.8 else "MISSED")
    elif key == "mlp_step_ms":
        verdict = f"{target}: " + ("ok" if a <= 1.1 * b else "MISSED")
    elif key == "seed_step_us":
        verdict = f"{target}: " + ("ok" if a <= b / 3 else "MISSED")
    print(f"{what:32} {a:>9.4g} {unit:<3}{b:>9.4g} {unit:<3}{a / b:>6.2f}  {verdict}")
PY
cat "$out/table.txt"
step "done: table and logs in $out"
