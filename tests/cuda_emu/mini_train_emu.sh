#!/usr/bin/env bash
# mini_train on the emulated GPUs (mini_train_emu, tests/cuda_emu/CMakeLists.txt) against the CPU
# build (mini_train): the same jobs, the same numbers. Usage:
#   mini_train_emu.sh MINI_TRAIN_EMU MINI_TRAIN PYTHON CASE
# Each case runs in a fresh temp folder. Tolerances (docs/gpu.md, "mini_train on the emulator"):
# the device path sums in other orders than the CPU's (a block reduction, the reference GEMM), so
# losses and weights agree to 1e-5 relative, not bit for bit (losses of the 16-bit cases to 1e-3:
# a result rounded to 16 bits after such a sum may land one unit apart); a resumed GPU run is
# compared with an uninterrupted GPU run, bit for bit.
set -uo pipefail
emu=$1
cpu=$2
python=$3
case_name=$4
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
# The emulated NCCL's shared-memory files go here (Note [Emulated NCCL across processes]): none may
# be left after a run.
export TMPDIR=$work/tmp
mkdir "$TMPDIR"

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
gpus01_ddp)
  # Two GPUs, two processes started by the launcher, NCCL DDP across them (the emulated NCCL's
  # ranks meet in shared memory: Note [Emulated NCCL across processes]), against --nproc 2 on Gloo:
  # the seed job as the mission's command runs it, then an MLP with Adam and a cosine schedule.
  "$emu" --gpus 0,1 --epochs 2 --log-json seed-gpu.jsonl --save seed-gpu.safetensors >/dev/null 2>err.txt ||
    { cat err.txt; fail "--gpus 0,1 --epochs 2 failed"; }
  "$cpu" --nproc 2 --backend gloo --epochs 2 --log-json seed-cpu.jsonl --save seed-cpu.safetensors >/dev/null 2>err.txt ||
    { cat err.txt; fail "--nproc 2 --epochs 2 failed"; }
  compare seed-gpu.jsonl seed-cpu.jsonl seed-gpu.safetensors seed-cpu.safetensors
  flags=(--model mlp --hidden 16,8 --optimizer adam --schedule cosine --samples 500 --epochs 2)
  "$emu" --gpus 0,1 "${flags[@]}" --ddp-stats --log-json gpu.jsonl --save gpu.safetensors >out.txt 2>err.txt ||
    { cat out.txt err.txt; fail "--gpus 0,1 failed"; }
  grep -q "^  device *cuda 0,1, 2 processes (nccl)$" out.txt || { cat out.txt; fail "config table: not 2 processes on NCCL"; }
  grep -q '^DDP: 1 buckets' out.txt || { cat out.txt; fail "--ddp-stats: no bucket reduced"; }
  grep -q '^memory: peak [0-9.]* MiB of GPU tensors on rank 1$' out.txt || { cat out.txt; fail "--ddp-stats: no GPU peak"; }
  # --max-memory caps each GPU's caching allocator (Note [Memory limit]): one line per rank that ran out.
  "$emu" --gpus 0,1 "${flags[@]}" --max-memory 1M --save capped.safetensors >out.txt 2>err.txt &&
    fail "--gpus 0,1 trained under --max-memory 1M"
  grep -q "error: out of memory: cuda:[01] tensors are limited to 1.0 MiB" err.txt || { cat err.txt; fail "no GPU out-of-memory line"; }
  "$cpu" --nproc 2 --backend gloo "${flags[@]}" --log-json cpu.jsonl --save cpu.safetensors >/dev/null 2>err.txt ||
    { cat err.txt; fail "--nproc 2 failed"; }
  compare gpu.jsonl cpu.jsonl gpu.safetensors cpu.safetensors
  ;;
gpus01_kill_resume | gpus01_fp16_kill_resume)
  # Rank 1 killed (SIGKILL) at step 5 of a --gpus 0,1 run (8 steps an epoch), two steps after the
  # step checkpoint of step 3 (written from device memory); --resume auto, mid-epoch, on two GPUs
  # again ends at the same bytes as a run never interrupted. In fp16 the checkpoint carries the
  # GradScaler's scale and growth count, without which the resumed run would scale differently.
  flags=(--model mlp --hidden 16,8 --optimizer adam --samples 512 --epochs 2 --quiet)
  [[ $case_name == gpus01_fp16_kill_resume ]] && flags+=(--precision fp16)
  "$emu" --gpus 0,1 "${flags[@]}" --save full.safetensors >/dev/null 2>err.txt || { cat err.txt; fail "full run failed"; }
  MT_TEST_KILL_STEP=5 MT_TEST_KILL_RANK=1 "$emu" --gpus 0,1 "${flags[@]}" --checkpoint-dir ck --checkpoint-every 3 \
    --save x.safetensors >/dev/null 2>err.txt && fail "the run to be killed succeeded"
  grep -q "rank 1 was killed by signal 9" err.txt || { cat err.txt; fail "the launcher did not name rank 1's SIGKILL"; }
  [[ -e ck/checkpoint-epoch-000001-step-000000003.safetensors ]] || { ls ck; fail "no step checkpoint of step 3"; }
  "$emu" --gpus 0,1 "${flags[@]}" --checkpoint-dir ck --checkpoint-every 3 --resume auto --save resumed.safetensors \
    >/dev/null 2>err.txt || { cat err.txt; fail "resume failed"; }
  cmp full.safetensors resumed.safetensors || fail "resumed on two GPUs, the weights differ from the uninterrupted run"
  ;;
gpus0_gpt_bf16)
  # The GPT preset, small (1 block of width 16, 2 heads, context 8, batch 4), 4 AdamW steps at a
  # constant lr in bf16 on emulated GPU 0 (autocast on CUDA: bfloat16 GEMMs, attention and GELU;
  # layer norm, softmax and the loss in float32; float32 master weights), against the same run on
  # the CPU: every step's loss within 1e-3 relative of the CPU's bf16 run, and within one bfloat16
  # unit (2^-8, 4e-3) of its fp32 run (docs/gpu.md, "Mixed precision on the GPU", says why).
  for i in $(seq 40); do echo "the quick brown fox $i jumps over the lazy dog"; done >t.txt
  flags=(--text t.txt --layers 1 --heads 2 --dim 16 --context 8 --batch-size 4 --lr 1e-2 --schedule none
         --max-steps 4 --log-every 1)
  "$emu" --gpus 0 "${flags[@]}" --precision bf16 --log-json gpu.jsonl >out.txt 2>err.txt ||
    { cat out.txt err.txt; fail "--gpus 0 --precision bf16 failed"; }
  grep -q '^  precision    bf16 (autocast: ' out.txt || { cat out.txt; fail "the config table has no bf16 row"; }
  for p in bf16 fp32; do
    "$cpu" "${flags[@]}" --precision $p --log-json cpu-$p.jsonl >/dev/null 2>err.txt ||
      { cat err.txt; fail "the CPU $p run failed"; }
  done
  "$python" "$here/compare_runs.py" 1e-3 gpu.jsonl cpu-bf16.jsonl || fail "GPU and CPU bf16 losses differ beyond 1e-3"
  "$python" "$here/compare_runs.py" 4e-3 gpu.jsonl cpu-fp32.jsonl || fail "GPU bf16 and CPU fp32 differ beyond 4e-3"
  ;;
gpus01_gpt_fp16)
  # The same small GPT in fp16 on two GPUs: float16 autocast, the GradScaler unscaling on each
  # device and its found-inf flag all-reduced over NCCL. The loss falls; the replicas are compared
  # after every step (--check-replicas 1: a hash of every parameter, all-gathered; a difference
  # stops the run); the losses are the CPU's (--nproc 2 on Gloo) within 1e-3, and the steps skipped
  # for an overflow are the CPU's.
  for i in $(seq 40); do echo "the quick brown fox $i jumps over the lazy dog"; done >t.txt
  flags=(--text t.txt --layers 1 --heads 2 --dim 16 --context 8 --batch-size 4 --lr 1e-2 --schedule none
         --max-steps 4 --log-every 1 --precision fp16)
  "$emu" --gpus 0,1 "${flags[@]}" --check-replicas 1 --log-json gpu.jsonl >out.txt 2>err.txt ||
    { cat out.txt err.txt; fail "--gpus 0,1 --precision fp16 failed"; }
  grep -q "^  device *cuda 0,1, 2 processes (nccl)$" out.txt || { cat out.txt; fail "config table: not 2 processes on NCCL"; }
  "$python" -c 'import json, sys; l = [json.loads(x)["loss"] for x in open("gpu.jsonl")][:-1]; sys.exit(not l[-1] < l[0] - 0.1)' ||
    { cat gpu.jsonl; fail "fp16 on two GPUs: the loss did not fall"; }
  skipped=$(grep '^fp16: ' out.txt) || { cat out.txt; fail "no fp16 skipped-steps line"; }
  "$cpu" --nproc 2 --backend gloo "${flags[@]}" --log-json cpu.jsonl >cpu.txt 2>err.txt ||
    { cat err.txt; fail "the CPU fp16 run failed"; }
  "$python" "$here/compare_runs.py" 1e-3 gpu.jsonl cpu.jsonl || fail "GPU and CPU fp16 losses differ beyond 1e-3"
  [[ $(grep '^fp16: ' cpu.txt) == "$skipped" ]] || { grep '^fp16: ' cpu.txt; fail "GPU: $skipped"; }
  ;;
gpus01_zero1 | gpus01_zero2 | gpus01_zero3)
  # --zero N on two GPUs over the emulated NCCL (its reduce-scatter and all-gather; the optimizer's
  # shards, under 2 the kept gradient shards, under 3 FSDP's parameters released and gathered, all
  # in device memory) against --nproc 2 --zero N on Gloo: the same losses and weights, clipping over
  # the shards included.
  stage=${case_name#gpus01_zero}
  flags=(--model mlp --hidden 16,8 --optimizer adam --clip-grad 0.5 --samples 256 --epochs 2 --zero "$stage")
  "$emu" --gpus 0,1 "${flags[@]}" --log-json gpu.jsonl --save gpu.safetensors >out.txt 2>err.txt ||
    { cat out.txt err.txt; fail "--gpus 0,1 --zero $stage failed"; }
  grep -q "ZeRO-$stage: " out.txt || { cat out.txt; fail "the config table does not say ZeRO-$stage"; }
  "$cpu" --nproc 2 --backend gloo "${flags[@]}" --log-json cpu.jsonl --save cpu.safetensors >/dev/null 2>err.txt ||
    { cat err.txt; fail "--nproc 2 --zero $stage failed"; }
  compare gpu.jsonl cpu.jsonl gpu.safetensors cpu.safetensors
  ;;
gpus01_zero2_kill_resume | gpus01_zero3_kill_resume)
  # As gpus01_kill_resume under --zero 2 or 3, whose step checkpoint is sharded (each rank's shard of
  # the optimizer state, under 3 of the weights too, copied out of device memory into a file of its
  # own): resumed, the same bytes.
  stage=${case_name:11:1}
  flags=(--model mlp --hidden 16,8 --optimizer adam --samples 512 --epochs 2 --zero "$stage" --quiet)
  "$emu" --gpus 0,1 "${flags[@]}" --save full.safetensors >/dev/null 2>err.txt || { cat err.txt; fail "full run failed"; }
  MT_TEST_KILL_STEP=5 MT_TEST_KILL_RANK=1 "$emu" --gpus 0,1 "${flags[@]}" --checkpoint-dir ck --checkpoint-every 3 \
    --save x.safetensors >/dev/null 2>err.txt && fail "the run to be killed succeeded"
  [[ -e ck/checkpoint-epoch-000001-step-000000003.safetensors ]] || { ls ck; fail "no step checkpoint of step 3"; }
  ls ck/checkpoint-epoch-000001-step-000000003.shards/* >/dev/null 2>&1 || { ls -R ck; fail "the checkpoint is not sharded"; }
  "$emu" --gpus 0,1 "${flags[@]}" --checkpoint-dir ck --checkpoint-every 3 --resume auto --save resumed.safetensors \
    >/dev/null 2>err.txt || { cat err.txt; fail "resume failed"; }
  cmp full.safetensors resumed.safetensors || fail "resumed under --zero $stage on two GPUs, the weights differ"
  ;;
gpus01_peer_exits)
  # Two workers started by hand, as torchrun or srun start them (no mini_train launcher to stop
  # the survivor). Rank 1 SIGKILLs itself at step 5; rank 0's NCCL watchdog hears of it as
  # ncclRemoteError (Note [A peer that exits], tests/cuda_emu/emu_nccl.cpp) and the job ends with
  # one line naming it, long before the store heartbeat's 30 s.
  port=$((20000 + RANDOM % 20000))
  flags=(--gpus 0,1 --model mlp --hidden 16,8 --samples 512 --epochs 20 --quiet)
  start=$SECONDS
  for r in 0 1; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      MT_TEST_KILL_STEP=5 MT_TEST_KILL_RANK=1 timeout 60 "$emu" "${flags[@]}" >"out$r.txt" 2>"err$r.txt" &
    pids[r]=$!
  done
  wait "${pids[1]}"
  rc=0
  wait "${pids[0]}" || rc=$?
  took=$((SECONDS - start))
  [[ $rc == 1 ]] || { cat err0.txt; fail "rank 0 exited with $rc, not 1"; }
  [[ $(wc -l <err0.txt) -eq 1 ]] && grep -q "remote process exited.*rank 1 (process [0-9]*) exited without ncclCommDestroy" err0.txt ||
    { cat err0.txt; fail "rank 0's one line does not name rank 1's exit"; }
  ((took < 20)) || fail "the job took $took s to end"
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
leftovers=$(ls "$TMPDIR")
[[ -z $leftovers ]] || fail "left in the temp folder: $leftovers"
echo "ok: $case_name"
