#!/usr/bin/env bash
# mini_train --max-restarts (Note [Restarts] in apps/mini_train/launcher.cpp): a worker killed with
# SIGKILL mid-run makes the launcher restart every worker from the newest checkpoint, once, and the
# job's final weights are bit-for-bit those of a run that was never interrupted. A save's temporary
# file left by a dead writer is removed when the workers start (Note [Stale temporaries]).
# With WHEN=step the kill lands mid-epoch, after a --checkpoint-every step checkpoint, and the
# restart resumes from that step (Note [Mid-epoch resume] in apps/mini_train/checkpoint_step.h).
# WHEN=step-zero is step with --zero 1, whose ranks each write their shard of every checkpoint
# (Note [Sharded checkpoints] in nn/sharded_checkpoint.h); step-zero2 the same with --zero 2, whose
# ranks also hold only their shard of the gradients; step-zero3 with --zero 3, whose ranks hold only
# their shard of the parameters too, and write it to their shard of the checkpoint.
#   restart.sh MINI_TRAIN BACKEND NPROC [WHEN]  (BACKEND gloo or mpi; WHEN epoch (default), step,
#                                                step-zero, step-zero2 or step-zero3; exit 77: skipped)
set -euo pipefail
bin=$1 backend=$2 nproc=$3 when=${4:-epoch}
zero=()
[[ $when == step-zero ]] && zero=(--zero 1) when=step
[[ $when == step-zero2 ]] && zero=(--zero 2) when=step
[[ $when == step-zero3 ]] && zero=(--zero 3) when=step
work=$(mktemp -d /tmp/minitrain-restart.XXXXXX)
launcher=
cleanup() {
  [[ -n $launcher ]] && kill -9 "$launcher" 2>/dev/null || true  # its workers die with it (PDEATHSIG)
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "restart.sh: $*" >&2; [[ -f $work/log ]] && cat "$work/log" >&2; exit 1; }
if [[ $backend == mpi ]] && ! "$bin" --env 2>/dev/null | grep -q '^ *MPI  *available'; then
  echo "skipped: no MPI in this build"; exit 77
fi
# Under ASan: OpenMPI's allocations held at exit read as leaks of every rank; not ours, and the
# other checks stay on (as tests/apps/mini_train_test.sh's mpi_leaks_are_not_ours).
[[ $backend == mpi ]] && export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
if [[ $when == step ]]; then
  # 3 epochs of 32 steps (nproc 2) or 16 (nproc 4), a step checkpoint every 10 steps; the last rank
  # sends itself SIGKILL after step 45 (MT_TEST_KILL_STEP, apps/mini_train/checkpoint_step.h), five
  # steps after the step checkpoint of step 40, which is mid-epoch for both. The restarted workers
  # resumed, so the hook leaves them alone.
  job=(--nproc "$nproc" --backend "$backend" --samples 2000 --epochs 3 --seed 3 --num-workers 2 -q "${zero[@]}")
  "$bin" "${job[@]}" --save "$work/ref.safetensors" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "reference run failed"; }
  rc=0
  MT_TEST_KILL_STEP=45 MT_TEST_KILL_RANK=$((nproc - 1)) "$bin" "${job[@]}" --checkpoint-dir "$work/ck" \
    --checkpoint-every 10 --max-restarts 1 --save "$work/got.safetensors" >"$work/log" 2>&1 || rc=$?
  [[ $rc == 0 ]] || fail "the restarted job exited with $rc"
  grep -q "MT_TEST_KILL_STEP: SIGKILL after step 45" "$work/log" || fail "the worker was not killed"
  grep -q "restart 1 of 1 (--max-restarts) .* from .*/checkpoint-epoch-00000[23]-step-000000040.safetensors" \
    "$work/log" || fail "the restart did not resume from the step checkpoint of step 40"
  cmp "$work/ref.safetensors" "$work/got.safetensors" || fail "final weights differ from the uninterrupted run"
  if [[ ${#zero[@]} -gt 0 ]]; then
    compgen -G "$work/ck/checkpoint-epoch-*.shards/shard-0000$((nproc - 1))-of-0000$nproc.safetensors" >/dev/null ||
      fail "--zero wrote no sharded checkpoints"
  fi
  cat "$work/log"
  echo "restart.sh: $backend x $nproc${zero[*]:+ ${zero[*]}}: SIGKILL mid-epoch, resumed at step 40; final weights bit-identical"
  exit 0
fi
# 40 short epochs: an MPI job of the seed model runs 16 of them in half a second, faster than the
# wait below can see one checkpoint before --keep prunes it; --keep 100 keeps every one.
job=(--nproc "$nproc" --backend "$backend" --samples 40000 --epochs 40 --seed 3 --num-workers 0 -q)

"$bin" "${job[@]}" --save "$work/ref.safetensors" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "reference run failed"; }

mkdir -p "$work/ck"
sleep 0 & dead=$!; wait "$dead"  # a pid that no longer runs
stale="$work/ck/checkpoint-epoch-000099.safetensors.tmp.$dead"
echo "half a checkpoint" >"$stale"
"$bin" "${job[@]}" --checkpoint-dir "$work/ck" --keep 100 --max-restarts 1 --save "$work/got.safetensors" >"$work/log" 2>&1 &
launcher=$!
for _ in $(seq 1 3000); do  # up to 60 s for the third epoch's checkpoint
  [[ -f $work/ck/checkpoint-epoch-000003.safetensors ]] && break
  sleep 0.02
done
[[ -f $work/ck/checkpoint-epoch-000003.safetensors ]] || fail "no checkpoint of epoch 3 after 60 s"
[[ -f $work/ck/checkpoint-epoch-000040.safetensors ]] && fail "the job ended before the kill: make it longer"
victim=$(pgrep -P "$launcher" | tail -1)  # a worker (gloo), or mpirun (mpi)
[[ $backend == mpi ]] && victim=$(pgrep -P "$victim" | tail -1)  # a rank under mpirun
kill -9 "$victim"
rc=0
wait "$launcher" || rc=$?
launcher=
[[ $rc == 0 ]] || fail "the restarted job exited with $rc"
grep -q "restart 1 of 1 (--max-restarts)" "$work/log" || fail "no restart line"
cmp "$work/ref.safetensors" "$work/got.safetensors" || fail "final weights differ from the uninterrupted run"
[[ -e $stale ]] && fail "the stale temporary $stale was not removed"
cat "$work/log"
echo "restart.sh: $backend x $nproc: restarted once after SIGKILL; final weights bit-identical"
