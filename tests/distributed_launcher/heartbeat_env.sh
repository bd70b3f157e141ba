#!/usr/bin/env bash
# Note [Store heartbeat] (distributed/fault/heartbeat_store.h): two ranks started by hand (RANK,
# WORLD_SIZE, MASTER_ADDR, MASTER_PORT; no mini_train launcher, as under torchrun or srun) watch each
# other through the store. SIGSTOP of rank STOPPED: the job ends within --heartbeat-timeout + 5 s,
# on every running rank, with a line naming that rank and its last phase.
# With HOW=mpi the ranks are mpirun's, under `mini_train --nproc 2 --backend mpi`, whose launcher hosts
# a store for their heartbeats alone (MT_HEARTBEAT_STORE) and watches it: the job ends with the
# launcher's line naming the rank and its phase (Note [Heartbeat] in distributed/fault/heartbeat.h). With
# HOW=mpirun they are a bare `mpirun -np 2 mini_train`'s, and rank 0 hosts that store (Note
# [Heartbeats under a bare mpirun], apps/mini_train/peer_heartbeat.cpp).
#   heartbeat_env.sh MINI_TRAIN STOPPED [HOW]  (STOPPED 1: rank 0 names it; 0: rank 1 names it, or
#                                              the store's host; HOW env (default), mpi or mpirun;
#                                              77: skipped)
set -euo pipefail
bin=$1 stopped=$2 how=${3:-env}
work=$(mktemp -d /tmp/minitrain-heartbeat.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done  # SIGKILL ends a stopped process too
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "heartbeat_env.sh: $*" >&2; cat "$work"/rank*.log >&2 || true; exit 1; }
timeout=2
if [[ $how == mpi || $how == mpirun ]]; then
  "$bin" --env 2>/dev/null | grep -q '^ *MPI  *available' || { echo "skipped: no MPI in this build"; exit 77; }
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"  # OpenMPI's, as restart.sh says
  job=(--backend mpi --samples 20000 --epochs 100000 --heartbeat-timeout "$timeout" -q --save "$work/m.safetensors")
  if [[ $how == mpi ]]; then
    "$bin" --nproc 2 "${job[@]}" >"$work/rank-launcher.log" 2>&1 &
  else
    mpirun -np 2 --oversubscribe "$bin" "${job[@]}" >"$work/rank-launcher.log" 2>&1 &
  fi
  launcher=$!
  pids+=("$launcher")
  sleep 2  # mpirun started both ranks, and they train
  mpirun_pid=$launcher
  [[ $how == mpirun ]] || mpirun_pid=$(pgrep -P "$launcher" | head -1)
  ranks=($(pgrep -P "$mpirun_pid" | sort -n))
  [[ ${#ranks[@]} == 2 ]] || fail "expected 2 ranks under mpirun, found ${#ranks[@]}"
  pids+=("${ranks[@]}")
  victim=$(for p in "${ranks[@]}"; do [[ $(tr '\0' '\n' <"/proc/$p/environ" | grep '^OMPI_COMM_WORLD_RANK=') == \
    "OMPI_COMM_WORLD_RANK=$stopped" ]] && echo "$p"; done || true)
  [[ -n $victim ]] || fail "no rank $stopped under mpirun"
  kill -STOP "$victim"
  start=$SECONDS
  rc=0
  wait "$launcher" || rc=$?
  took=$((SECONDS - start))
  [[ $rc == 1 ]] || fail "the launcher exited with $rc, expected 1"
  (( took <= timeout + 8 )) || fail "the job took $took s to end (--heartbeat-timeout $timeout)"
  # The launcher watches its mpirun's ranks itself (Note [Heartbeat]); a bare mpirun's ranks watch
  # each other through rank 0's store, and may see a stopped rank 0 as a silent store.
  named="^mini_train: rank $stopped stopped: no heartbeat for [0-9]* s \(--heartbeat-timeout 2; .*Its last phase: [a-z]+.*step [0-9]+"
  [[ $how == mpirun ]] && named="rank $stopped stopped: no heartbeat in the store for [0-9]* s \(--heartbeat-timeout 2; .*Its last phase: "
  [[ $how == mpirun && $stopped == 0 ]] && named="($named|rank 1: the store .* has not answered)"
  grep -Eq "$named" "$work/rank-launcher.log" || fail "no line naming rank $stopped (and its phase)"
  # The stopped rank itself says nothing (should it run again before it is killed).
  ! grep -q "mini_train: rank $stopped: rank $stopped stopped" "$work/rank-launcher.log" || fail "the stopped rank spoke"
  cat "$work/rank-launcher.log" >&2
  echo "heartbeat_env.sh: $how: SIGSTOP of rank $stopped named, the job ended after $took s"
  exit 0
fi
port=$(( 20000 + RANDOM % 20000 ))
# A job far longer than the test: it only ends by the heartbeat.
job=(--backend gloo --samples 20000 --epochs 100000 --heartbeat-timeout "$timeout" -q --save "$work/m.safetensors")
for rank in 0 1; do
  RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port MT_JOB_TOKEN=t \
    "$bin" "${job[@]}" >"$work/rank$rank.log" 2>&1 &
  pids+=($!)
done
sleep 1.5  # both are training, and beating
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "a rank ended before the SIGSTOP"; done
kill -STOP "${pids[$stopped]}"
start=$SECONDS
other=$((1 - stopped))
rc=0
wait "${pids[$other]}" || rc=$?
took=$((SECONDS - start))
[[ $rc == 1 ]] || fail "rank $other exited with $rc, expected 1"
(( took <= timeout + 5 )) || fail "rank $other took $took s to end (--heartbeat-timeout $timeout)"
if [[ $stopped == 1 ]]; then
  grep -q "mini_train: rank 0: rank 1 stopped: no heartbeat in the store for [0-9]* s (--heartbeat-timeout 2; .*Its last phase: [a-z]*.*step [0-9]*" \
    "$work/rank0.log" || fail "rank 0 did not name rank 1 and its phase"
else
  grep -Eq "mini_train: rank 1: (rank 0 stopped: no heartbeat|the store .* has not answered)" "$work/rank1.log" ||
    fail "rank 1 did not name rank 0 (or its store)"
fi
cat "$work/rank$other.log" >&2
echo "heartbeat_env.sh: SIGSTOP of rank $stopped named by rank $other after $took s"
