#!/usr/bin/env bash
# `mini_train launch` runs a program of the user's as N supervised ranks (Note [Launching any program]
# in apps/mini_train/launch_command.cpp), here examples/launched_sum.cpp, which all-reduces rank + 1:
#   ok        3 ranks agree on the sum 6, exit 0
#   fail      rank 1 throws: exit 1, the launcher's last line names rank 1 and the reason it reported
#             (Gloo; under MPI mpirun ends the job and the rank's own line is there)
#   restart   --max-restarts 1 and rank 2 fails in attempt 0: attempt 1 (MT_RESTART_COUNT) succeeds
#   stop      rank 1 SIGSTOPs itself after init: named within --heartbeat-timeout 2 + 5 s, exit 1
#   bad       bad command lines: one line and the usage, exit 2, nothing started
#   launch.sh MINI_TRAIN PROGRAM BACKEND   (77: skipped, no MPI in this build)
set -euo pipefail
bin=$1 program=$2 backend=$3
work=$(mktemp -d /tmp/minitrain-launch.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "launch.sh: $backend: $*" >&2; cat "$work/out" "$work/err" >&2; exit 1; }
if [[ $backend == mpi ]]; then
  "$bin" --env 2>/dev/null | grep -q '^ *MPI  *available' || { echo "skipped: no MPI in this build"; exit 77; }
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"  # OpenMPI's, as restart.sh says
fi
run() { rc=0; timeout 60 "$bin" launch --nproc 3 --backend "$backend" "$@" >"$work/out" 2>"$work/err" || rc=$?; }

run -- "$program"
(( rc == 0 )) || fail "ok: exit $rc"
for r in 0 1 2; do grep -qx "rank $r of 3 ($backend, attempt 0): sum 6" "$work/out" || fail "ok: rank $r's line is missing"; done

run -- "$program" --fail-rank 1
(( rc == 1 )) || fail "fail: exit $rc, expected 1"
grep -qF "launched_sum: error: rank 1 fails on purpose in attempt 0 (--fail-rank)" "$work/err" || fail "fail: rank 1's line is missing"
last=$(tail -1 "$work/err")
if [[ $backend == gloo ]]; then
  [[ $last == "mini_train: rank 1 exited with code 1: rank 1 fails on purpose in attempt 0 (--fail-rank)" ]] ||
    fail "fail: the launcher's last line is '$last'"
else
  [[ $last == "mini_train: the MPI job failed: mpirun exited with code 1"* ]] || fail "fail: the launcher's last line is '$last'"
fi

run --max-restarts 1 -- "$program" --fail-rank 2
(( rc == 0 )) || fail "restart: exit $rc"
grep -qF "mini_train: restart 1 of 1 (--max-restarts) after the failure above" "$work/err" || fail "restart: no restart line"
for r in 0 1 2; do grep -qx "rank $r of 3 ($backend, attempt 1): sum 6" "$work/out" || fail "restart: rank $r's line is missing"; done

start=$SECONDS
run --heartbeat-timeout 2 -- "$program" --stop-rank 1
took=$((SECONDS - start))
(( rc == 1 )) || fail "stop: exit $rc, expected 1"
last=$(tail -1 "$work/err")
[[ $last == "mini_train: rank 1 stopped: no heartbeat for "*" s (--heartbeat-timeout 2; "*"Its last phase: init, step 0. Stopped the workers" ]] ||
  fail "stop: the launcher's last line is '$last'"
(( took <= 2 + 5 )) || fail "stop: the job took $took s to end"

for bad in "--nproc 3 -- $work/none" "--nproc 3 --frobnicate 1 -- $program" "--nproc 3" "--nproc 0 -- $program" \
           "--nproc 3 --backend tcp -- $program" "-- $program"; do
  rc=0
  timeout 20 "$bin" launch $bad >"$work/out" 2>"$work/err" || rc=$?
  (( rc == 2 )) || fail "bad '$bad': exit $rc, expected 2"
  [[ $(wc -l <"$work/err") == 2 && $(head -1 "$work/err") == "mini_train: launch: "* ]] || fail "bad '$bad': not one line and the usage"
done
echo "launch.sh: $backend: ok, fail, restart, stop and bad command lines as expected"
