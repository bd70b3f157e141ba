#!/usr/bin/env bash
# The launcher names the rank that failed first, with its reason, not a peer that failed after it on
# the connections it closed (Note [The first failure is the one reported] in
# distributed/fault/heartbeat.h). Three Gloo ranks; one fails, in one of three ways:
#   error      rank 0 (the store's host) throws mid-run, as on a full disk (MT_TEST_ERROR_RANK)
#   kill       rank 1 is killed with SIGKILL after a step (MT_TEST_KILL_STEP)
#   disk-full  rank 0's --checkpoint-dir is a 64 KiB tmpfs (needs root and mount; else skipped)
#   first_failure.sh MINI_TRAIN CASE   (exit 77: skipped)
set -euo pipefail
bin=$1 case=$2
work=$(mktemp -d /tmp/minitrain-first-failure.XXXXXX)
mounted=
cleanup() {
  [[ -n $mounted ]] && umount "$work/ck" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "first_failure.sh: $case: $*" >&2; cat "$work/err" >&2; exit 1; }
job=(--nproc 3 --backend gloo --samples 3000 --epochs 4 --seed 4 -q)

rc=0
case $case in
  error)
    MT_TEST_ERROR_RANK=0 MT_TEST_ERROR_EPOCH=2 timeout 60 "$bin" "${job[@]}" >"$work/out" 2>"$work/err" || rc=$?
    rank=0 reason="MT_TEST_ERROR_RANK: rank 0 fails at epoch 2, as on a full disk"
    launcher_line="mini_train: rank 0 exited with code 1: $reason"
    ;;
  kill)
    MT_TEST_KILL_STEP=20 MT_TEST_KILL_RANK=1 timeout 60 "$bin" "${job[@]}" >"$work/out" 2>"$work/err" || rc=$?
    rank=1 reason="MT_TEST_KILL_STEP: SIGKILL after step 20"
    launcher_line="mini_train: rank 1 was killed by signal 9"
    ;;
  disk-full)
    mkdir "$work/ck"
    mount -t tmpfs -o size=64k tmpfs "$work/ck" 2>/dev/null || { echo "skipped: cannot mount a tmpfs here"; exit 77; }
    mounted=1
    timeout 60 "$bin" "${job[@]}" --model mlp --hidden 64,32 --optimizer adam --checkpoint-dir "$work/ck" \
      >"$work/out" 2>"$work/err" || rc=$?
    rank=0 reason="--checkpoint-dir $work/ck: $work/ck has 65536 bytes free, but the file needs about"
    launcher_line="mini_train: rank 0 exited with code 1: $reason"
    ;;
  *) echo "first_failure.sh: unknown case '$case'" >&2; exit 2 ;;
esac

(( rc == 1 )) || fail "the launcher exited with $rc, expected 1"
# The failing rank's own line is there: the launcher did not stop it before it spoke.
grep -qF "mini_train: rank $rank: " "$work/err" || fail "rank $rank's own line is missing"
grep -qF -- "$reason" "$work/err" || fail "the reason is missing"
# The launcher's line comes last and names that rank, with the reason it reported.
last=$(tail -1 "$work/err")
[[ $last == "$launcher_line"* ]] || fail "the launcher's last line is '$last', expected '$launcher_line...'"
echo "first_failure.sh: $case: the launcher named rank $rank and its reason"
