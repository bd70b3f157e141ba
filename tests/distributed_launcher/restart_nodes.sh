#!/usr/bin/env bash
# mini_train --nnodes 2 --max-restarts (Note [Restarts across nodes] in apps/mini_train/node_restarts.h):
# two "machines" are two launchers on this one, sharing one --checkpoint-dir, two Gloo workers each
# (ranks 0-1 on node 0, 2-3 on node 1).
#   kill    rank 3 (node 1) sends itself SIGKILL mid-epoch, five steps after a --checkpoint-every
#           step checkpoint: both launchers print the same restart line, the job finishes, and its
#           final weights are bit-identical to an uninterrupted 2-node run's
#   count   rank 3 fails at every attempt: after --max-restarts 2 (one count for the job, not per
#           node) both launchers end non-zero naming the cause
#   absent  node 1 never starts: node 0 ends within --timeout, naming node 1
#   stopped node 1's launcher is stopped (SIGSTOP: a machine gone without a TCP reset) while its
#           workers train on: node 0 names it within --heartbeat-timeout, stops its own workers, and
#           ends the job at the next meeting instead of waiting --timeout for node 1
#   interrupt  Ctrl-C (SIGINT) to node 1's launcher ends the job on both nodes, never restarted
#   folder  the nodes' --checkpoint-dir are different folders: both end before training, saying so
#   restart_nodes.sh MINI_TRAIN CASE
set -euo pipefail
bin=$1 case=$2
work=$(mktemp -d /tmp/minitrain-restart-nodes.XXXXXX)
node0= node1=
cleanup() {
  for pid in $node0 $node1; do kill -9 "$pid" 2>/dev/null || true; done  # workers die with them (PDEATHSIG)
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "restart_nodes.sh $case: $*" >&2
  for f in "$work"/*.log; do [[ -f $f ]] && { echo "--- $f" >&2; cat "$f" >&2; }; done
  exit 1
}
export MT_JOB_TOKEN=restart-nodes-$$
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# run_job NAME ARGS...: both nodes of one job; node k's output in NAME.k.log, its exit code in rc0/rc1.
run_job() {
  local name=$1
  shift
  local port
  port=$(free_port)
  "$bin" --nnodes 2 --node-rank 1 --master-port "$port" "$@" >"$work/$name.1.log" 2>&1 &
  node1=$!
  rc0=0 rc1=0
  timeout 100 "$bin" --nnodes 2 --node-rank 0 --master-port "$port" "$@" >"$work/$name.0.log" 2>&1 || rc0=$?
  wait "$node1" || rc1=$?
  node1=
}

# start_training NAME ARGS...: both nodes of one long job in the background (node0, node1; node k's
# output in NAME.k.log), returning once node 1's two workers are running.
start_training() {
  local name=$1
  shift
  local port
  port=$(free_port)
  "$bin" --nnodes 2 --node-rank 1 --master-port "$port" "$@" >"$work/$name.1.log" 2>&1 &
  node1=$!
  "$bin" --nnodes 2 --node-rank 0 --master-port "$port" "$@" >"$work/$name.0.log" 2>&1 &
  node0=$!
  for _ in $(seq 1 500); do  # up to 10 s for node 1's workers to be training
    [[ $(pgrep -c -P "$node1") == 2 ]] && break
    sleep 0.02
  done
}

# 3 epochs of 16 steps (2000 samples over 4 ranks, batch 32): step 40 is mid-epoch 3.
job=(--nproc 2 --backend gloo --samples 2000 --epochs 3 --seed 3 --num-workers 2 -q)
case $case in
kill)
  run_job ref "${job[@]}" --max-restarts 1 --save "$work/ref.safetensors"
  [[ $rc0 == 0 && $rc1 == 0 ]] || fail "the uninterrupted 2-node run failed ($rc0, $rc1)"
  MT_TEST_KILL_STEP=45 MT_TEST_KILL_RANK=3 run_job got "${job[@]}" --checkpoint-dir "$work/ck" \
    --checkpoint-every 10 --max-restarts 1 --save "$work/got.safetensors"
  [[ $rc0 == 0 && $rc1 == 0 ]] || fail "the restarted job failed ($rc0, $rc1)"
  grep -q "MT_TEST_KILL_STEP: SIGKILL after step 45" "$work/got.1.log" || fail "rank 3 was not killed"
  for k in 0 1; do
    grep -q "^mini_train: restart 1 of 1 (--max-restarts, one count for the whole job) after node 1: rank 3 was \
killed by signal 9: the workers of all 2 nodes again, from .*/checkpoint-epoch-000003-step-000000040.safetensors" \
      "$work/got.$k.log" || fail "node $k did not print the restart from the step checkpoint of step 40"
  done
  # Node 0's own workers fail too (their collective with rank 3 broke) or are stopped: either way its
  # line names node 1's failure as the cause.
  grep -Eq "^mini_train: (stopped node 0's workers: |rank [01] exited with code 1, after )node 1: rank 3 was killed \
by signal 9$" "$work/got.0.log" || fail "node 0 did not name node 1's failure when it stopped"
  cmp "$work/ref.safetensors" "$work/got.safetensors" || fail "final weights differ from the uninterrupted run"
  cat "$work/got.0.log" "$work/got.1.log"
  echo "restart_nodes.sh kill: SIGKILL of rank 3 on node 1 mid-epoch, both nodes restarted at step 40; final weights bit-identical"
  ;;
count)
  MT_TEST_FAIL_RANK=3 MT_TEST_FAIL_EPOCH=2 run_job count "${job[@]}" --max-restarts 2 --save "$work/m.safetensors"
  [[ $rc0 == 1 && $rc1 == 1 ]] || fail "expected exit code 1 on both nodes, got $rc0 and $rc1"
  for k in 0 1; do
    log=$work/count.$k.log
    [[ $(grep -c "^mini_train: restart [0-9]* of 2 (--max-restarts" "$log") == 2 ]] || fail "node $k: not 2 restarts"
    grep -q "^mini_train: the job failed with no restart left (--max-restarts 2, one count for the whole job): node \
1: rank 3 exited with code 3$" "$log" || fail "node $k: no final line naming the cause"
  done
  cat "$work/count.0.log" "$work/count.1.log"
  echo "restart_nodes.sh count: 3 attempts failed, 2 restarts used across both nodes, both ended with the cause"
  ;;
absent)
  start=$SECONDS rc=0
  timeout 60 "$bin" --nnodes 2 --node-rank 0 --master-port "$(free_port)" "${job[@]}" --max-restarts 1 --timeout 3 \
    --save "$work/a.safetensors" >"$work/absent.0.log" 2>&1 || rc=$?
  (( rc == 1 )) || fail "node 0 exited with $rc, expected 1"
  (( SECONDS - start <= 10 )) || fail "node 0 took $((SECONDS - start)) s to give up (--timeout 3)"
  grep -q "^mini_train: the job ended: node 1 of 2 did not come to start within --timeout 3 s" "$work/absent.0.log" ||
    fail "the error does not name node 1"
  cat "$work/absent.0.log"
  echo "restart_nodes.sh absent: node 0 named the missing node 1 after $((SECONDS - start)) s (--timeout 3)"
  ;;
stopped)
  long=(--nproc 2 --backend gloo --samples 2000 --epochs 100000 --seed 3 -q --max-restarts 1 --heartbeat-timeout 3
        --save "$work/s.safetensors")
  start_training stopped "${long[@]}"
  sleep 1
  kill -STOP "$node1"
  start=$SECONDS
  for _ in $(seq 1 1000); do  # up to 20 s for node 0 to end the job
    grep -q "^mini_train: the job ended" "$work/stopped.0.log" && break
    sleep 0.02
  done
  kill -9 "$node1"  # its store connection would hold node 0's store open for the close timeout
  node1=
  rc=0
  wait "$node0" || rc=$?
  node0=
  (( rc == 1 )) || fail "node 0 exited with $rc, expected 1"
  (( SECONDS - start <= 12 )) || fail "node 0 took $((SECONDS - start)) s to name the stopped launcher (--heartbeat-timeout 3)"
  grep -q "^mini_train: stopped node 0's workers: node 1's launcher stopped: no heartbeat in the store for [0-9]* s \
(--heartbeat-timeout 3)" "$work/stopped.0.log" || fail "node 0 did not stop its workers naming node 1's launcher"
  grep -q "^mini_train: the job ended: node 1's launcher stopped" "$work/stopped.0.log" ||
    fail "node 0 did not end the job at the meeting of attempt 1"
  cat "$work/stopped.0.log"
  echo "restart_nodes.sh stopped: node 0 named node 1's stopped launcher and ended the job after $((SECONDS - start)) s"
  ;;
interrupt)
  long=(--nproc 2 --backend gloo --samples 2000 --epochs 100000 --seed 3 -q --max-restarts 1 --save "$work/i.safetensors")
  start_training interrupt "${long[@]}"
  sleep 0.5
  kill -INT "$node1"
  rc0=0 rc1=0
  wait "$node1" || rc1=$?
  node1=
  for _ in $(seq 1 500); do kill -0 "$node0" 2>/dev/null || break; sleep 0.02; done  # up to 10 s
  wait "$node0" || rc0=$?
  node0=
  [[ $rc1 == 130 && $rc0 == 1 ]] || fail "exit codes $rc0 (node 0) and $rc1 (node 1), expected 1 and 130"
  grep -q "^mini_train: the job ended: node 1 was interrupted (signal 2): the job ends there, an interrupt is never \
restarted" "$work/interrupt.0.log" || fail "node 0 did not end the job naming node 1's interrupt"
  grep -q "restart 1 of 1" "$work/interrupt.0.log" "$work/interrupt.1.log" && fail "an interrupt was restarted"
  cat "$work/interrupt.0.log" "$work/interrupt.1.log"
  echo "restart_nodes.sh interrupt: SIGINT to node 1 ended the job on both nodes, no restart"
  ;;
folder)
  port=$(free_port)
  "$bin" --nnodes 2 --node-rank 1 --master-port "$port" "${job[@]}" --max-restarts 1 --checkpoint-dir "$work/ck1" \
    --save "$work/f.safetensors" >"$work/folder.1.log" 2>&1 &
  node1=$!
  rc0=0 rc1=0
  timeout 60 "$bin" --nnodes 2 --node-rank 0 --master-port "$port" "${job[@]}" --max-restarts 1 \
    --checkpoint-dir "$work/ck0" --save "$work/f.safetensors" >"$work/folder.0.log" 2>&1 || rc0=$?
  wait "$node1" || rc1=$?
  node1=
  [[ $rc0 == 1 && $rc1 == 1 ]] || fail "expected exit code 1 on both nodes, got $rc0 and $rc1"
  for k in 0 1; do
    grep -q "^mini_train: the job ended: --checkpoint-dir $work/ck1 of node 1 is not the folder node 0 checkpoints \
to ($work/ck0)" "$work/folder.$k.log" || fail "node $k: no line about the checkpoint folder"
  done
  [[ -e $work/f.safetensors ]] && fail "the job trained anyway"
  cat "$work/folder.0.log"
  echo "restart_nodes.sh folder: both nodes refused different --checkpoint-dir folders before training"
  ;;
*)
  echo "restart_nodes.sh: unknown case '$case'" >&2
  exit 2
  ;;
esac
