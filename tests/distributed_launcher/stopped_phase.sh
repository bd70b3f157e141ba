#!/usr/bin/env bash
# Note [Watched from start to exit] (distributed/fault/heartbeat.h): a rank stopped (SIGSTOP, by
# MT_TEST_STOP_RANK/MT_TEST_STOP_PHASE, apps/mini_train/test_hooks.h) outside training never hangs the
# job, on either backend; under MPI the others then wait in MPI_Init or MPI_Finalize for it.
#   init      rank 1 stops before it meets the others: the job ends with exit 1 and the launcher's
#             line naming rank 1 and the phase init
#   finalize  rank R stops after its work (rank 0: right after writing the model): the job ends with
#             exit 0 and a warning naming rank R, the model written and its "saved" line printed
#   finalize-hang  rank R never leaves finalize but beats (as in an MPI_Finalize that never returns):
#             once every rank has done its work, a timeout later, exit 0 and a warning naming it
# Either way within --heartbeat-timeout + 5 s of the stop, and no process of the job is left.
#   stopped_phase.sh MINI_TRAIN BACKEND PHASE [RANK]   (77: skipped, no MPI in this build)
set -euo pipefail
bin=$1 backend=$2 phase=$3 stopped=${4:-1}
work=$(mktemp -d /tmp/minitrain-stopped-phase.XXXXXX)
cleanup() {
  for p in $(pgrep -f -- "$work/"); do kill -9 "$p" 2>/dev/null || true; done  # this test's: they name $work
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "stopped_phase.sh: $backend $phase: $*" >&2; cat "$work/out" "$work/err" >&2; exit 1; }
if [[ $backend == mpi ]]; then
  "$bin" --env 2>/dev/null | grep -q '^ *MPI  *available' || { echo "skipped: no MPI in this build"; exit 77; }
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"  # OpenMPI's, as restart.sh says
fi
timeout=2
start=$SECONDS
rc=0
MT_TEST_STOP_RANK=$stopped MT_TEST_STOP_PHASE=$phase timeout 60 "$bin" --nproc 3 --backend "$backend" --epochs 2 \
  --samples 2000 --heartbeat-timeout $timeout -q --save "$work/m.safetensors" >"$work/out" 2>"$work/err" || rc=$?
took=$((SECONDS - start))
last=$(tail -1 "$work/err")
stop_line="no heartbeat for [0-9]+ s \(--heartbeat-timeout $timeout; the process is stopped or frozen, e.g. by SIGSTOP\)"
case $phase in
  init)
    (( rc == 1 )) || fail "the launcher exited with $rc, expected 1"
    [[ $last =~ ^"mini_train: rank $stopped stopped: "$stop_line". Its last phase: init, step 0. Stopped the workers"$ ]] ||
      fail "the launcher's last line is '$last'"
    [[ ! -e $work/m.safetensors ]] || fail "a model was written"
    ;;
  finalize)
    (( rc == 0 )) || fail "the launcher exited with $rc, expected 0"
    [[ $last =~ ^"mini_train: warning: rank $stopped stopped in finalize, after its work: "$stop_line". Every rank had finished its work" ]] ||
      fail "the launcher's last line is '$last'"
    [[ -s $work/m.safetensors ]] || fail "no model was written"
    grep -q "^saved $work/m.safetensors (2 epochs" "$work/out" || fail "no 'saved' line"
    ;;
  finalize-hang)
    (( rc == 0 )) || fail "the launcher exited with $rc, expected 0"
    # Every rank left is named, rank R among them: under Gloo the others exit (on a loaded machine
    # one may still be exiting), under MPI they wait in MPI_Finalize for it.
    [[ $last =~ ^"mini_train: warning: rank"s?" "([0-9]+", ")*$stopped(", "[0-9]+)*" ha"(s|ve)" not exited "[0-9]+" s after every rank finished its work (--heartbeat-timeout $timeout; stuck in finalize" ]] ||
      fail "the launcher's last line is '$last'"
    [[ $backend == gloo || $last == "mini_train: warning: ranks 0, 1, 2 have"* ]] || fail "not every MPI rank is named: '$last'"
    [[ -s $work/m.safetensors ]] || fail "no model was written"
    ;;
  *) echo "stopped_phase.sh: unknown phase '$phase'" >&2; exit 2 ;;
esac
# Start-up (a second or two for mpirun) + the timeout + 5 s.
(( took <= timeout + 7 )) || fail "the job took $took s to end (--heartbeat-timeout $timeout)"
sleep 0.2
! pgrep -f -- "$work/" >/dev/null || fail "processes of the job are left: $(pgrep -af -- "$work/")"
echo "stopped_phase.sh: $backend: rank $stopped stopped in $phase, the job ended after $took s: $last"
