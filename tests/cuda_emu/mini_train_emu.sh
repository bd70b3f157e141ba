#!/usr/bin/env bash
# mini_train on the emulated GPUs (mini_train_emu, tests/cuda_emu/CMakeLists.txt) against the CPU
# build (mini_train): the same jobs, the same numbers. Usage:
#   mini_train_emu.sh MINI_TRAIN_EMU MINI_TRAIN PYTHON CASE
# Each case runs in a fresh temp folder. Tolerances (docs/gpu.md, "mini_train on the emulator"):
# the device path sums in other orders than the CPU's (a block reduction, the reference GEMM), so
# losses and weights agree to 1e-5 relative, not bit for bit; a resumed GPU run is compared with
# an uninterrupted GPU run, bit for bit.
set -uo pipefail
emu=$1
cpu=$2
python=$3
case_name=$4
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }
compare() { "$python" "$here/compare_runs.py" 1e-5 "$@" || fail "the runs differ beyond 1e-5 relative"; }

case "$case_name" in
gpus0_seed)
  # The seed job as it is (Linear(10, 1), 1000 samples, batch 32, SGD, 5 epochs) on emulated GPU 0.
  "$emu" --gpus 0 --log-json gpu.jsonl --save gpu.safetensors >out.txt 2>err.txt ||
    { cat out.txt err.txt; fail "--gpus 0 failed"; }
  grep -q "^  device *cuda 0, 1 process$" out.txt || { cat out.txt; fail "the config table does not name cuda 0"; }
  [[ $(grep -c '^Epoch \[[1-5]/5\], Loss: ' out.txt) -eq 5 ]] || { cat out.txt; fail "expected 5 epoch lines"; }
  "$cpu" --log-json cpu.jsonl --save cpu.safetensors >/dev/null 2>err.txt || { cat err.txt; fail "the CPU run failed"; }
  compare gpu.jsonl cpu.jsonl gpu.safetensors cpu.safetensors
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
echo "ok: $case_name"
