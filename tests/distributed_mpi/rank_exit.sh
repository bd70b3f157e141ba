#!/usr/bin/env bash
# A rank that exits in the middle of an allreduce ends the whole mpirun job: non-zero, with a message
# naming what happened, well within the collective timeout (20 s), and no rank left running.
# Usage: rank_exit.sh <test_distributed_mpi> <mpirun> [mpirun flags...]   (registered with CTest)
set -u
binary=$1
shift
fail() { echo "FAIL: $*"; exit 1; }
start=$(date +%s)
out=$(MT_TEST_RANK_EXIT=1 "$@" -n 2 "$binary" "--test-case=ProcessGroupMPI: a rank that exits*" 2>&1)
rc=$?
took=$(( $(date +%s) - start ))
echo "$out"
echo "--- mpirun exit code $rc after ${took} s"
[ "$rc" -ne 0 ] || fail "the job exited 0 although rank 1 died"
(( took < 15 )) || fail "the job took ${took} s to end"
grep -Eqi "exit(ed)? (code|status)|non-zero status|exited on signal|timed out" <<<"$out" ||
  fail "no message says that a rank exited"
# mpirun may return while a killed rank is still on its way out: allow it a few seconds.
for pid in $(sed -n 's/^rank-exit test: rank [0-9]* pid \([0-9]*\)$/\1/p' <<<"$out"); do
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then fail "rank process $pid is still running 5 s after the job ended"; fi
done
echo "ok"
