#!/usr/bin/env bash
# The SIGSTOP campaign of issue 43's targets: N trials, each a mini_train job of 3 to 5 ranks on Gloo
# or MPI with one rank stopped (SIGSTOP) in one phase of its life, and per trial: did the job end, how
# long after the stop (against --heartbeat-timeout + 5 s), and did the launcher's line name the
# stopped rank. The phases and how each is reached:
#   start-up    the rank stops itself as it enters init, before MPI_Init and the rendezvous
#               (MT_TEST_STOP_PHASE=init, apps/mini_train/test_hooks.h): from outside, a process
#               cannot be caught that early reliably on a loaded machine
#   training    SIGSTOP from outside, 0.5 to 1.5 s after the rank is up, in a long run
#   checkpoint  SIGSTOP to rank 0 (the writer) 0.5 to 1.5 s into a run that checkpoints a model
#               large enough that writing dominates after every step (--checkpoint-every 1)
#   evaluation  SIGSTOP to rank 0 (the one that scores) 0.5 to 1.5 s into a run that scores 95 % of
#               its rows after each short epoch (--val-split 0.95)
#   shutdown    the rank stops itself as it enters finalize, after its work (MT_TEST_STOP_PHASE=finalize)
# The phase a stopped rank was really in is what the launcher's line says ("Its last phase: ..."),
# reported beside the intended one. A stop in shutdown is right when the job ends with exit 0 and a
# warning naming the rank (its work is done; Note [Watched from start to exit]); any other stop is
# right when the job ends with exit 1 and the launcher's line "rank K stopped: ...". The time is
# counted from the moment the script sees the process stopped (state T in /proc).
#
#   scripts/fault_campaign.sh MINI_TRAIN [TRIALS] [SEED] [PHASES]
#     TRIALS (50), SEED (1: the same trials again), PHASES ("start-up training checkpoint evaluation
#     shutdown": taken in turn, trial t gets phase t mod count); backends alternate, ranks 3, 4, 5 and
#     the stopped rank come from SEED.
# Output: one line per trial, then the tally; exit 1 when any trial missed a target. Needs MPI for
# the MPI trials (skipped, and said, without it). --heartbeat-timeout is 2 s (FAULT_HEARTBEAT).
set -uo pipefail
bin=${1:?usage: fault_campaign.sh MINI_TRAIN [TRIALS] [SEED] [PHASES]}
trials=${2:-50} seed=${3:-1}
read -r -a phases <<<"${4:-start-up training checkpoint evaluation shutdown}"
hb=${FAULT_HEARTBEAT:-2}
work=$(mktemp -d /tmp/minitrain-fault-campaign.XXXXXX)
launcher=
cleanup() {
  [[ -n $launcher ]] && for p in $(descendants "$launcher") $launcher; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
have_mpi=0
"$bin" --env 2>/dev/null | grep -q '^ *MPI  *available' && have_mpi=1
RANDOM=$seed

# The pid of rank R among the descendants of the launcher (its workers for Gloo; mpirun's children
# for MPI), found by the rank its environment names; empty while it does not exist yet.
descendants() {
  local p
  for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done
}
rank_pid() {
  local p
  for p in $(descendants "$1"); do
    if tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx -e "RANK=$2" -e "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$p"
      return
    fi
  done
}

# The evaluation trials' data: 20,000 rows of 10 features and a target, as CSV.
awk 'BEGIN { srand(7); for (i = 0; i < 20000; ++i) { s = 0.5; l = "";
             for (j = 0; j < 10; ++j) { v = rand() * 2 - 1; s += v * (j - 4.5); l = l (j ? "," : "") v }
             print l > "'"$work"'/x.csv"; print s > "'"$work"'/y.csv" } }'

ok=0 missed=0 skipped=0
declare -A seen
for ((t = 0; t < trials; ++t)); do
  phase=${phases[t % ${#phases[@]}]}
  backend=$([[ $((t / ${#phases[@]} % 2)) == 0 ]] && echo gloo || echo mpi)
  n=$((3 + RANDOM % 3))
  rank=$((RANDOM % n))
  delay=$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.5 + r / 32767 }')
  if [[ $backend == mpi && $have_mpi == 0 ]]; then
    skipped=$((skipped + 1))
    continue
  fi
  job=(--nproc "$n" --backend "$backend" --heartbeat-timeout "$hb" --timeout 60 -q --seed $((t + 1)))
  case $phase in
    start-up|training) job+=(--samples 4000 --epochs 100000) ;;  # ended by the stop, or by the hook
    checkpoint) rank=0; job+=(--model mlp --hidden 2048,2048 --batch-size 8 --samples 2000 --epochs 50
                              --checkpoint-every 1 --checkpoint-dir "$work/job/ck") ;;
    # rank 0 scores the 95 % held out after each epoch, while each rank trains on 1/N of the rest
    evaluation) rank=0; job+=(--inputs "$work/x.csv" --targets "$work/y.csv" --val-split 0.95 --model mlp
                              --hidden 512,512 --epochs 1000) ;;
    shutdown) job+=(--samples 2000 --epochs 2 --save "$work/job/m.safetensors") ;;
  esac
  hook=()
  [[ $phase == start-up ]] && hook=(MT_TEST_STOP_RANK=$rank MT_TEST_STOP_PHASE=init)
  [[ $phase == shutdown ]] && hook=(MT_TEST_STOP_RANK=$rank MT_TEST_STOP_PHASE=finalize)
  rm -rf "$work/job" && mkdir -p "$work/job"
  env "${hook[@]}" "$bin" "${job[@]}" >"$work/out" 2>"$work/err" &
  launcher=$!
  pid=
  case $phase in
    start-up|shutdown)  # it stops itself: wait until it is seen stopped
      for _ in $(seq 3000); do
        pid=$(rank_pid $launcher $rank)
        [[ -n $pid && $(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) == T ]] && break
        pid=
        kill -0 $launcher 2>/dev/null || break
        sleep 0.01
      done ;;
    *)
      for _ in $(seq 500); do pid=$(rank_pid $launcher $rank); [[ -n $pid ]] && break; sleep 0.01; done
      sleep "$delay"
      pid=$(rank_pid $launcher $rank)
      [[ -n $pid ]] && kill -STOP "$pid" 2>/dev/null || pid= ;;
  esac
  stopped_at=$(date +%s.%N)
  # The job must end by itself within the heartbeat timeout + 5 s of the stop; 60 s is the give-up.
  for _ in $(seq 600); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
  if kill -0 $launcher 2>/dev/null; then
    ended=no rc=-
    for p in $(descendants $launcher) $launcher; do kill -9 "$p" 2>/dev/null; done
    wait $launcher 2>/dev/null
  else
    wait $launcher; rc=$?
    ended=yes
  fi
  end=$(date +%s.%N)
  [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null  # should the launcher have left it, stopped
  took=$(awk -v a="$stopped_at" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  in_time=$(awk -v x="$took" -v l=$((hb + 5)) 'BEGIN { print (x <= l) ? "yes" : "no" }')
  last=$(tail -1 "$work/err")
  really=$(sed -n 's/.*Its last phase: \([a-z ]*\).*/\1/p' <<<"$last")
  [[ $last == *"stopped in finalize"* || $last == *"stuck in finalize"* ]] && really=finalize
  if [[ -z $pid ]]; then
    named="no: rank $rank was never seen stopped (exit $rc)"
  elif [[ $phase == shutdown ]]; then
    [[ $rc == 0 && $last =~ "warning: rank $rank stopped in finalize"|"warning: rank"s?" "([0-9]+", ")*$rank(", "[0-9]+)*" ha"(s|ve)" not exited" ]] &&
      named=yes || named="no: $last"
  elif [[ $rc == 1 && $last =~ "rank $rank stopped: " ]]; then
    named=yes
  else
    named="no: $last"
  fi
  verdict=ok
  [[ $ended == yes && $in_time == yes && $named == yes ]] || verdict=MISSED
  [[ $verdict == ok ]] && ok=$((ok + 1)) || missed=$((missed + 1))
  seen[$phase]=$(( ${seen[$phase]:-0} + 1 ))
  printf 'trial %2d: %-4s x%d, rank %d stopped in %-10s (launcher: %s): ended %s, exit %s, %s s after the stop (<= %d: %s), named %s -> %s\n' \
    "$t" "$backend" "$n" "$rank" "$phase" "${really:-${pid:+no phase given}}" "$ended" "$rc" "$took" $((hb + 5)) \
    "$in_time" "$named" "$verdict"
  [[ $verdict == ok ]] || { echo "  stderr:"; sed 's/^/    /' "$work/err" | tail -8; }
done
echo "fault_campaign: $ok ok, $missed missed, $skipped skipped (no MPI) of $trials trials; --heartbeat-timeout $hb;" \
     "load average $(cut -d' ' -f1-3 /proc/loadavg)"
(( missed == 0 ))
