#!/usr/bin/env bash
# End-to-end tests of mini_train's trainer features: gradient accumulation, per-step logs, the
# validation split and early stopping, loss curves, options refused or warned about, and models
# loaded from their files. Usage: trainer_test.sh MINI_TRAIN PYTHON CASE (tests/CMakeLists.txt
# registers one CTest test per case). Each case runs in a fresh temp folder.
set -uo pipefail
bin=$1
py=$2
case_name=$3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

. "$here/lib.sh"  # fail, expect_error, mpi_leaks_are_not_ours

# Fails unless safetensors files $1 and $2 hold the same tensors, equal to relative tolerance $3
# (the largest difference over the tensor's largest magnitude). Python's standard library only.
same_weights() {
  "$py" - "$@" <<'PY' || fail "the weights of $1 and $2 differ by more than $3"
import array, json, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    out = {}
    for name, t in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        begin, end = t["data_offsets"]
        out[name] = array.array("f", raw[8 + n + begin:8 + n + end])
    return out
a, b, tol = tensors(sys.argv[1]), tensors(sys.argv[2]), float(sys.argv[3])
assert a.keys() == b.keys(), (sorted(a), sorted(b))
for name in a:
    scale = max(max(abs(v) for v in b[name]), 1e-12)
    worst = max(abs(x - y) for x, y in zip(a[name], b[name])) / scale
    print(f"{name}: {worst:.2e}")
    assert worst <= tol, f"{name}: relative difference {worst:.2e} > {tol}"
PY
}

case "$case_name" in
accumulate)
  # --accumulate 4 --batch-size 8 ends at the weights of --batch-size 32 (Note [Gradient
  # accumulation] in apps/mini_train/accumulate.h): 1003 examples, so each epoch's last step holds
  # 11 examples in two micro-batches of 8 and 3, against the large batch's last batch of 11.
  flags=(--model mlp --hidden 16,8 --optimizer adam --schedule cosine --samples 1003 --epochs 3 -q)
  "$bin" "${flags[@]}" --batch-size 32 --save big.safetensors >/dev/null || fail "--batch-size 32 failed"
  "$bin" "${flags[@]}" --batch-size 8 --accumulate 4 --save acc.safetensors >/dev/null || fail "--accumulate 4 failed"
  same_weights acc.safetensors big.safetensors 1e-5 >/dev/null
  # Without the 1/K scaling (or with an optimizer step per micro-batch) the weights would be far off.
  "$bin" "${flags[@]}" --batch-size 8 --save small.safetensors >/dev/null || fail "--batch-size 8 failed"
  ! (same_weights small.safetensors big.safetensors 1e-2) >/dev/null 2>&1 || fail "the comparison cannot tell batches apart"
  # The config table counts per step, and says how.
  "$bin" --batch-size 8 --accumulate 4 --epochs 1 --save s.safetensors >out.txt || fail "seed job with --accumulate"
  grep -q "batch        32 per device (4 micro-batches of 8, --accumulate), 32 global, 32 steps per epoch$" out.txt ||
    { cat out.txt; fail "config table"; }
  # Two processes (DDP's no_sync over the first 3 micro-batches of each step) against --batch-size 32.
  dflags=(--nproc 2 --backend gloo --model mlp --hidden 16 --samples 1000 --epochs 2 -q)
  "$bin" "${dflags[@]}" --batch-size 32 --save "$work/big2.safetensors" >/dev/null || fail "--nproc 2 --batch-size 32"
  "$bin" "${dflags[@]}" --batch-size 8 --accumulate 4 --save "$work/acc2.safetensors" >/dev/null ||
    fail "--nproc 2 --accumulate 4"
  same_weights acc2.safetensors big2.safetensors 1e-5 >/dev/null
  # A step checkpoint falls between groups: killed after step 40 and resumed, the run ends at the
  # same bytes as one never interrupted.
  rflags=(--batch-size 8 --accumulate 4 --samples 1000 --epochs 2 --checkpoint-every 7 -q)
  "$bin" "${rflags[@]}" --checkpoint-dir a --save full.safetensors >/dev/null || fail "uninterrupted run failed"
  rc=0
  MT_TEST_KILL_STEP=40 "$bin" "${rflags[@]}" --checkpoint-dir b --save x.safetensors >/dev/null 2>&1 || rc=$?
  [[ $rc == 137 ]] || fail "the run to be killed exited with $rc, not 137 (SIGKILL)"
  "$bin" "${rflags[@]}" --checkpoint-dir b --resume auto --save resumed.safetensors >/dev/null 2>err.txt ||
    { cat err.txt; fail "resume failed"; }
  cmp full.safetensors resumed.safetensors || fail "resumed mid-epoch with --accumulate, the weights differ"
  expect_error "trained with --accumulate 4, this run asks for 2" --batch-size 8 --accumulate 2 --samples 1000 \
    --epochs 2 --checkpoint-dir b --resume auto
  expect_error "--accumulate must be in 1..65536 micro-batches, got 0" --accumulate 0
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
echo "ok: $case_name"
