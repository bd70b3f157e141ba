#!/usr/bin/env bash
# mini_train's memory per rank end to end: --max-memory (Note [Memory limit] in tensor/memory.h) stops
# a run that does not fit with one out-of-memory line naming the limit, the request and what was in
# use, and lets the same model train under ZeRO where plain DDP does not fit; --ddp-stats' peak
# memory lines (Note [Memory kinds]). Usage: memory_test.sh MINI_TRAIN CASE
set -uo pipefail
bin=$1
case_name=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

. "$here/lib.sh"  # fail, expect_error, mpi_leaks_are_not_ours

# An MLP whose parameters (4.5 M: 17 MiB, 4 MiB per weight) outweigh its activations, so that the
# optimizer state and the gradients decide whether a rank fits. Peaks per rank at 2 ranks
# (--ddp-stats): plain DDP 72.4 MiB (parameters 17, gradients 17, Adam's moments 34, a 4 MiB gradient
# on its way into its bucket); --zero 1 55.3 (half the moments); --zero 2 50.8 to 54.8 over MPI, but
# 59 to 71 over Gloo, whose collectives hold tensors of their own while the buckets are in flight;
# --zero 3 42 to 44 on either (a unit of the parameters gathered at a time).
mlp=(--model mlp --features 256 --hidden 1024,1024,1024,1024,1024 --samples 64 --batch-size 8 --optimizer adam
     --epochs 1 --max-steps 2 --ddp-stats --bucket-cap-mb 2)
# The cap: below plain DDP's peak at 2 ranks, above ZeRO-1's and ZeRO-3's (and ZeRO-2's over MPI).
cap=64M
# The stages that train under the cap where plain DDP stops, per backend; the line a stage joins.
declare -A fitting_stages=([gloo]="1 3" [mpi]="1 2 3")

# $1: the backend. Plain DDP stops, naming the limit; each of fitting_stages trains under the same cap.
plain_stops_zero_trains() {
  local backend=$1
  "$bin" "${mlp[@]}" --nproc 2 --backend "$backend" --save plain.safetensors >plain.txt 2>plain_err.txt ||
    { cat plain.txt plain_err.txt; fail "plain DDP without a cap failed"; }
  grep -q "^memory: peak .* MiB of CPU tensors on rank 1: parameters" plain.txt ||
    { cat plain.txt; fail "--ddp-stats shows no peak memory for rank 1"; }
  timeout 120 "$bin" "${mlp[@]}" --nproc 2 --backend "$backend" --max-memory $cap --save capped.safetensors \
    >out.txt 2>err.txt && { cat out.txt err.txt; fail "plain DDP trained under --max-memory $cap"; }
  local rc=$?
  [[ $rc -eq 1 ]] || { cat err.txt; fail "plain DDP under the cap: exit code $rc, expected 1"; }
  # Each rank that ran out says so in one line (Gloo: the launcher repeats the first one's; MPI: mpirun
  # adds its MPI_ABORT notice), and nothing crashed.
  grep -q "^mini_train: rank [01].*out of memory: CPU tensors are limited to 64.0 MiB (set_memory_limit; mini_train --max-memory), and a request for [0-9.]* MiB came with [0-9.]* MiB in use" err.txt ||
    { cat err.txt; fail "no out-of-memory line naming a rank, the limit, the request and the memory in use"; }
  ! grep -qiE "terminate called|segmentation|core dumped|killed by signal" err.txt || { cat err.txt; fail "a rank crashed"; }
  [[ ! -e capped.safetensors ]] || fail "a job that ran out of memory saved a model"
  for stage in ${fitting_stages[$backend]}; do
    "$bin" "${mlp[@]}" --nproc 2 --backend "$backend" --max-memory $cap --zero "$stage" --save "z$stage.safetensors" \
      >"z$stage.txt" 2>&1 || { cat "z$stage.txt"; fail "--zero $stage did not train under --max-memory $cap"; }
    grep -q "^memory: peak .* MiB of CPU tensors on rank 1: .* (limit 64.0 MiB)$" "z$stage.txt" ||
      { cat "z$stage.txt"; fail "--zero $stage: no peak memory line naming the limit"; }
  done
}

case "$case_name" in
one_process)
  # The cap refuses the model or a step, with one line and exit code 1; a cap it fits under changes nothing.
  expect_error "out of memory: CPU tensors are limited to 4.0 MiB (set_memory_limit; mini_train --max-memory), and a request for" \
    "${mlp[@]}" --max-memory 4M
  "$bin" "${mlp[@]}" --save free.safetensors >free.txt || fail "the MLP without a cap failed"
  "$bin" "${mlp[@]}" --max-memory 1G --save capped.safetensors >capped.txt || fail "the MLP under 1G failed"
  cmp free.safetensors capped.safetensors || fail "a cap the run fits under changed its weights"
  # The kinds add up to the peak (rounding aside), and an MLP with Adam has them all: without DDP the
  # gradients are autograd's .grad, recounted as gradients when kept (Note [Memory kinds]).
  line=$(grep "^memory: peak" capped.txt) || { cat capped.txt; fail "no peak memory line"; }
  awk -v l="$line" 'BEGIN {
    n = split(l, w, /[ :,]+/); for (i = 1; i <= n; i++) if (w[i] ~ /^[0-9.]+$/) v[++k] = w[i]
    # v: peak, rank, parameters, gradients, optimizer state, the rest, limit
    if (k < 6 || v[3] <= 0 || v[4] <= 0 || v[5] <= 0 || v[6] <= 0) exit 1
    d = v[1] - (v[3] + v[4] + v[5] + v[6]); exit !(d < 0.25 && d > -0.25) }' ||
    fail "the kinds do not add up to the peak: $line"
  expect_error "--max-memory must be a size such as 300M, 2G or a number of bytes, got 'lots'" --max-memory lots
  MT_MAX_MEMORY=0 expect_error "MT_MAX_MEMORY must be a size such as 300M, 2G or a number of bytes, got '0'" --epochs 1
  MT_MAX_MEMORY=4M expect_error "out of memory: CPU tensors are limited to 4.0 MiB" "${mlp[@]}"
  ;;
zero_gloo)
  plain_stops_zero_trains gloo
  ;;
zero_mpi)
  "$bin" --version | grep -q "MPI yes" || { echo "SKIP: this build has no MPI"; exit 77; }
  command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
  mpi_leaks_are_not_ours
  plain_stops_zero_trains mpi
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
echo "ok: $case_name"
