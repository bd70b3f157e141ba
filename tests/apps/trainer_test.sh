#!/usr/bin/env bash
# End-to-end tests of mini_train's trainer features: gradient accumulation, per-step logs, the
# validation split and early stopping, loss curves, options refused or warned about, and models
# loaded from their files, mixed precision. Usage: trainer_test.sh MINI_TRAIN PYTHON CASE [EXAMPLE_LOAD_MODEL]
# (tests/CMakeLists.txt registers one CTest test per case). Each case runs in a fresh temp folder.
set -uo pipefail
bin=$1
py=$2
case_name=$3
load_model=${4:-}  # examples/load_model.cpp's binary, for case load_model
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

# Writes .npy files with Python's standard library: `write_npy NAME DTYPE SHAPE EXPR`, EXPR a Python
# expression of `i` (the flat index) and `rnd` (random.Random(0)) giving each value.
write_npy() {
  "$py" - "$@" <<'PY' || fail "could not write $1"
import array, random, sys
name, dtype, shape, expr = sys.argv[1], sys.argv[2], tuple(int(d) for d in sys.argv[3].split(",")), sys.argv[4]
rnd, n = random.Random(0), 1
for d in shape:
    n *= d
code = {"<f4": "f", "<i8": "q"}[dtype]
values = array.array(code, [eval(expr, {"rnd": rnd, "i": i}) for i in range(n)])
header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (dtype, "".join(f"{d}, " for d in shape))
header += " " * (63 - (10 + len(header)) % 64) + "\n"
open(name, "wb").write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + values.tobytes())
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
load_model)
  # nn::load_model (nn/model_file.h) in a C++ program of its own (examples/load_model.cpp) gives what
  # mini_train predict writes, byte for byte, for each network the trainer saves; a GPT continues a
  # prompt as mini_train generate --temperature 0 does.
  [[ -x $load_model ]] || fail "no examples/load_model binary given"
  write_npy x10.npy "<f4" 50,10 "rnd.gauss(0, 1)"
  "$bin" -q --epochs 1 --save linear.safetensors >/dev/null || fail "linear training failed"
  # An MLP classifier on standardised inputs: (x - mean) / std comes from the file, not the data.
  write_npy x4.npy "<f4" 300,4 "rnd.gauss(5, 3)"
  write_npy y4.npy "<i8" 300 "i % 3"
  "$bin" -q --inputs x4.npy --targets y4.npy --model mlp --hidden 8,8 --standardize --epochs 2 \
    --save mlp.safetensors >/dev/null || fail "mlp training failed"
  write_npy x784.npy "<f4" 40,28,28 "rnd.random() * 255"
  write_npy y784.npy "<i8" 40 "i % 10"
  "$bin" -q --inputs x784.npy --targets y784.npy --model cnn --epochs 1 --batch-size 20 --save cnn.safetensors \
    >/dev/null || fail "cnn training failed"
  for m in linear:x10 mlp:x4 cnn:x784; do
    model=${m%%:*} x=${m##*:}
    probabilities=--probabilities
    [[ $model == linear ]] && probabilities=
    "$bin" predict --init $model.safetensors --inputs $x.npy --output $model-predict.npy $probabilities >/dev/null ||
      fail "mini_train predict $model failed"
    "$load_model" $model.safetensors $x.npy $model-cpp.npy >out.txt || fail "example_load_model $model failed"
    cmp $model-predict.npy $model-cpp.npy || fail "$model: nn::load_model's outputs are not mini_train predict's"
  done
  grep -q "^cnn.safetensors (cnn:784-10): 40 rows$" out.txt || { cat out.txt; fail "example_load_model's line"; }
  # --probabilities: rows of the softmax (summing to 1), whose largest is predict's class index.
  "$bin" predict --init mlp.safetensors --inputs x4.npy --output classes.npy >out.txt || fail "predict classes"
  grep -q "^wrote classes.npy: 300 class indices (int64), shape \[300\]$" out.txt || { cat out.txt; fail "predict's line"; }
  "$py" - mlp-predict.npy classes.npy <<'PY' || fail "--probabilities are not the classes' softmax"
import array, ast, sys
def npy(path):
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[8:10], "little")
    header = ast.literal_eval(raw[10:10 + n].decode())
    return header["shape"], array.array({"<f4": "f", "<i8": "q"}[header["descr"]], raw[10 + n:])
(shape, p), (_, classes) = npy(sys.argv[1]), npy(sys.argv[2])
assert shape == (300, 3), shape
for r in range(300):
    row = p[3 * r:3 * r + 3]
    assert abs(sum(row) - 1) < 1e-5 and min(row) >= 0, row
    assert max(range(3), key=lambda c: row[c]) == classes[r], (row, classes[r])
PY
  for i in $(seq 40); do echo "the quick brown fox $i jumps over the lazy dog"; done >t.txt
  "$bin" -q --text t.txt --layers 1 --dim 16 --context 16 --max-steps 20 --save gpt.safetensors >/dev/null ||
    fail "gpt training failed"
  "$bin" generate --init gpt.safetensors --prompt "the quick" --tokens 30 --temperature 0 >generate.txt ||
    fail "generate failed"
  "$load_model" gpt.safetensors --greedy "the quick" 30 >cpp.txt || fail "example_load_model --greedy failed"
  cmp generate.txt cpp.txt || { cat generate.txt cpp.txt; fail "the loaded GPT continues differently"; }
  # What is not a model file, or not a classifier, is one line.
  expect_error "holds a regression model ('linear:10-1'), whose outputs are values, not classes" predict \
    --init linear.safetensors --inputs x10.npy --output p.npy --probabilities
  "$bin" -q --epochs 1 --checkpoint-dir ck --save m.safetensors >/dev/null || fail "checkpoint run failed"
  "$load_model" ck/checkpoint-epoch-000001.safetensors x10.npy o.npy >out.txt 2>err.txt && fail "a checkpoint loaded"
  [[ $(wc -l <err.txt) == 1 ]] && grep -q "not a model file saved by mini_train" err.txt || { cat err.txt; fail "error"; }
  ;;
log_json)
  # --log-json's records (Note [Log records] in apps/mini_train/json_log.h): step records every
  # --log-every N steps, an epoch record and an eval record per epoch. 1024 examples in batches of
  # 32: every step sees 32 of them, so an epoch's loss is the mean of its steps' losses, and a
  # cosine schedule's first step uses the base lr; with 2 processes the step losses are global.
  for run in "1:" "2:--nproc 2 --backend gloo --batch-size 16"; do
    nproc=${run%%:*} extra=${run#*:}
    # shellcheck disable=SC2086
    "$bin" --samples 1024 --epochs 2 --schedule cosine --eval --log-json log$nproc.jsonl --log-every 1 $extra \
      --save "$work/m$nproc.safetensors" >out$nproc.txt 2>err.txt || { cat err.txt; fail "run with --nproc $nproc failed"; }
    "$py" - log$nproc.jsonl out$nproc.txt <<'PY' || fail "--nproc $nproc: the records are not the run's"
import json, math, re, sys
records = [json.loads(line) for line in open(sys.argv[1])]
steps = [r for r in records if r["type"] == "step"]
assert [r["step"] for r in steps] == list(range(1, 65)), [r["step"] for r in steps]
assert [r["type"] for r in records if r["type"] != "step"] == ["epoch", "eval"] * 2, records
assert records[32]["type"] == "epoch" and records[32]["step"] == 32, records[32]  # after step 32's record
for r in records:
    assert {"type", "epoch", "step"} <= r.keys() and r["epoch"] in (1, 2), r
assert steps[0]["lr"] == 0.01 and steps[63]["lr"] < steps[62]["lr"] < steps[0]["lr"], (steps[0], steps[63])
assert all(s["samples_per_s"] > 0 and math.isfinite(s["loss"]) for s in steps)
epochs = [r for r in records if r["type"] == "epoch"]
for e in epochs:
    mean = sum(s["loss"] for s in steps if s["epoch"] == e["epoch"]) / 32
    assert abs(mean - e["loss"]) <= 1e-9 * e["loss"], (mean, e)
# The eval records say what the screen says.
screen = re.findall(r"^Epoch \[(\d)/2\] test loss: ([0-9.]+)$", open(sys.argv[2]).read(), re.M)
evals = [(str(r["epoch"]), "%.4f" % r["value"]) for r in records if r["type"] == "eval"]
assert screen == evals, (screen, evals)
assert all(r["split"] == "test" and r["metric"] == "loss" for r in records if r["type"] == "eval")
PY
  done
  # Killed after step 23 and resumed from its step checkpoint of step 21, the log is the
  # uninterrupted run's: the records past the checkpoint went, then the run wrote them again.
  flags=(--model mlp --hidden 8 --samples 500 --epochs 3 --eval --log-every 1 --checkpoint-every 7 -q)
  "$bin" "${flags[@]}" --log-json a.jsonl --checkpoint-dir a --save full.safetensors >/dev/null || fail "full run"
  rc=0
  MT_TEST_KILL_STEP=23 "$bin" "${flags[@]}" --log-json b.jsonl --checkpoint-dir b --save x.safetensors >/dev/null \
    2>&1 || rc=$?
  [[ $rc == 137 ]] || fail "the run to be killed exited with $rc, not 137 (SIGKILL)"
  grep -q '"step":23,"type":"step"' b.jsonl || { cat b.jsonl; fail "no record of step 23 before the kill"; }
  "$bin" "${flags[@]}" --log-json b.jsonl --checkpoint-dir b --resume auto --save y.safetensors >/dev/null ||
    fail "resume failed"
  "$py" - a.jsonl b.jsonl <<'PY' || fail "the resumed run's log is not the uninterrupted run's"
import json, sys
def records(path):  # without the rates and times, which differ from run to run
    out = [json.loads(line) for line in open(path)]
    for r in out:
        r.pop("samples_per_s", None), r.pop("seconds", None)
    return out
a, b = records(sys.argv[1]), records(sys.argv[2])
assert len(a) == 48 + 3 + 3 and a == b, (len(a), len(b))
PY
  expect_error "--log-every 5 writes step records into --log-json: give a --log-json FILE" --log-every 5
  ;;
val_split_early_stop)
  # --val-split F holds out round(F·n) rows picked by --seed; --early-stop PATIENCE ends training
  # when the validation score has not improved for PATIENCE epochs and saves the best epoch's
  # weights. The data: 400 rows whose class is the sign of a noisy first column, so that a wide MLP
  # at a high lr overfits within a few epochs.
  write_npy x.npy "<f4" 400,6 "rnd.gauss(0, 1)"
  "$py" - <<'PY' || fail "could not write y.npy"
import array
x = array.array("f", open("x.npy", "rb").read()[128:])
y = array.array("q", [int(x[6 * i] + 0.3 * ((i * 7919) % 13 - 6) / 6 > 0) for i in range(400)])
header = "{'descr': '<i8', 'fortran_order': False, 'shape': (400,), }"
header += " " * (63 - (10 + len(header)) % 64) + "\n"
open("y.npy", "wb").write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + y.tobytes())
PY
  data=(--inputs x.npy --targets y.npy --model mlp --hidden 64 --optimizer adam --lr 0.05)
  flags=("${data[@]}" --val-split 0.25)
  "$bin" "${flags[@]}" --epochs 2 --early-stop 5 --save a.safetensors >out.txt || fail "--val-split run failed"
  grep -q "x.npy -> y.npy (400 rows: 300 train, 100 validation by --val-split 0.25 and --seed 0)$" out.txt &&
    grep -q "10 steps per epoch" out.txt && grep -q "^Epoch \[2/2\] validation accuracy: [0-9.]*$" out.txt &&
    grep -q "^Validation accuracy: [0-9.]*$" out.txt || { cat out.txt; fail "--val-split: config table or scores"; }
  # --early-stop that does not stop the run still saves the best epoch, and says so.
  grep -q "^  epochs       2, ending after 5 without a better validation score (--early-stop)$" out.txt &&
    grep -q "^--early-stop: the saved model is epoch [12]'s, the best validation accuracy ([0-9.]*)$" out.txt ||
    { cat out.txt; fail "--early-stop that did not stop: config table or final line"; }
  # The same seed holds out the same rows (the same bytes after training); another seed, others.
  "$bin" "${flags[@]}" --epochs 2 --early-stop 5 -q --save b.safetensors >/dev/null || fail "second run failed"
  cmp -s a.safetensors b.safetensors || fail "--val-split with the same seed trained differently"
  "$bin" "${flags[@]}" --epochs 2 -q --no-shuffle --save c.safetensors >/dev/null || fail "--no-shuffle run failed"
  "$bin" "${flags[@]}" --epochs 2 -q --no-shuffle --seed 1 --save d.safetensors >/dev/null || fail "--seed 1 run failed"
  ! cmp -s c.safetensors d.safetensors || fail "--seed 1 held out the same rows (same weights without shuffling)"
  # Early stop: the line says when and what is kept (also under -q); the saved weights are the best
  # epoch's checkpoint's; the log's eval records agree.
  "$bin" "${flags[@]}" --epochs 40 --early-stop 3 -q --checkpoint-dir ck --keep 100 --log-json log.jsonl \
    --save es.safetensors >out.txt || fail "--early-stop run failed"
  "$py" - out.txt log.jsonl es.safetensors ck <<'PY' || { cat out.txt; fail "--early-stop did not keep the best epoch"; }
import json, re, struct, sys
out, log = open(sys.argv[1]).read(), [json.loads(line) for line in open(sys.argv[2])]
m = re.search(r"^early stop after epoch (\d+): the validation accuracy has not improved for 3 epochs; "
              r"the saved model is epoch (\d+)'s \(validation accuracy ([0-9.]+)\)$", out, re.M)
assert m, out
stopped, best = int(m.group(1)), int(m.group(2))
evals = {r["epoch"]: r["value"] for r in log if r["type"] == "eval"}
assert sorted(evals) == list(range(1, stopped + 1)) and stopped < 40, evals
assert best == max(evals, key=lambda e: (evals[e], -e)) and stopped - best == 3, (best, stopped, evals)
assert "%.4f" % evals[best] == m.group(3) and f"Validation accuracy: {m.group(3)}" in out, out
assert re.search(rf"^saved es.safetensors \({stopped} epochs, ", out, re.M), out
def tensors(path, prefix=""):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    h = json.loads(raw[8:8 + n])
    return {k[len(prefix):]: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
            for k, v in h.items() if k.startswith(prefix) and k != "__metadata__"}
kept = tensors(sys.argv[3])
assert kept == tensors(f"{sys.argv[4]}/checkpoint-epoch-{best:06d}.safetensors", "model/"), "not the best epoch's"
assert kept != tensors(f"{sys.argv[4]}/checkpoint-epoch-{stopped:06d}.safetensors", "model/")
PY
  # Two processes stop together after the same epoch (rank 0 decides), and say so once.
  "$bin" "${flags[@]}" --epochs 40 --early-stop 2 --nproc 2 --backend gloo -q --save "$work/es2.safetensors" >out.txt 2>err.txt ||
    { cat err.txt; fail "--early-stop with 2 processes failed"; }
  [[ $(grep -c "^early stop after epoch" out.txt) == 1 ]] || { cat out.txt; fail "2 processes: the early-stop line"; }
  expect_error "--val-split holds out rows of --inputs/--targets; --dataset synthetic has its own test split" \
    --val-split 0.2
  expect_error "--val-split must be in [0, 1), got 1" "${data[@]}" --val-split 1
  expect_error "--val-split 0.001 of 400 rows holds out 0 and trains on 400" "${data[@]}" --val-split 0.001
  expect_error "--early-stop 3 watches the score --eval takes after each epoch: add --eval" --early-stop 3
  ;;
unused_options)
  # An option the run would not use is refused in one line (before any work), or, when it only
  # tunes or reports DDP in a run of one process, ignored with a warning that --quiet does not hide.
  write_npy x.npy "<f4" 64,3 "rnd.gauss(0, 1)"
  write_npy y.npy "<f4" 64 "rnd.gauss(0, 1)"
  expect_error "--dataset fashion-mnist and --inputs/--targets both choose the data: give one of them" \
    --dataset fashion-mnist --inputs x.npy --targets y.npy
  expect_error "--samples sizes --dataset synthetic; this run's data is --inputs/--targets" --inputs x.npy \
    --targets y.npy --samples 10
  expect_error "--features sizes --dataset synthetic; this run's data is --dataset fashion-mnist" \
    --dataset fashion-mnist --features 3
  expect_error "--data-dir is Fashion-MNIST's folder; this run's data is --dataset synthetic" --data-dir /tmp
  expect_error "--text is the corpus of --dataset text (--model gpt); this run's data is --dataset fashion-mnist" \
    --dataset fashion-mnist --text t.txt
  expect_error "--standardize applies to rows of numbers; --dataset text is bytes" --model gpt --standardize
  expect_error "--keep counts the checkpoints of --checkpoint-dir: give one" --keep 5
  expect_error "--trace-steps chooses the steps --trace records: give --trace FILE" --trace-steps 2:4
  expect_error "--init-prefix renames the tensors of --init: give --init FILE" --init-prefix =0.
  expect_error "--comm-hook fp16 compresses DDP's gradient all-reduce, and this run is one process" \
    --comm-hook fp16 --epochs 1
  expect_error "--zero 1 shards the optimizer state over the ranks of a distributed run, and this run is one" \
    --zero 1 --epochs 1
  "$bin" -q --epochs 1 --ddp-stats --bucket-cap-mb 4 --check-replicas 2 --save m.safetensors >out.txt 2>err.txt ||
    { cat err.txt; fail "one process with DDP options failed"; }
  [[ "$(cat err.txt)" == "mini_train: warning: ignored in a run of one process (they tune or report DDP between processes): --bucket-cap-mb, --check-replicas" ]] ||
    { cat err.txt; fail "no warning for the DDP options of a one-process run"; }
  # --ddp-stats at one process: the peak memory alone, with what it was made of.
  grep -q "^memory: peak [0-9.]* MiB of CPU tensors on rank 0: parameters [0-9.]*, gradients [0-9.]*, optimizer state" out.txt ||
    { cat out.txt; fail "--ddp-stats at one process shows no peak memory"; }
  # ... and none where they apply, or without them.
  "$bin" -q --epochs 1 --nproc 2 --backend gloo --ddp-stats --bucket-cap-mb 4 --save "$work/m2.safetensors" \
    >out.txt 2>err.txt || { cat err.txt; fail "two processes with DDP options failed"; }
  [[ ! -s err.txt ]] || { cat err.txt; fail "two processes: a warning"; }
  "$bin" -q --epochs 1 --save m.safetensors >out.txt 2>err.txt && [[ ! -s err.txt ]] || { cat err.txt; fail "a warning"; }
  ;;
plot)
  # mini_train plot: three panels (loss, eval metric, lr) against the step, a curve per log in each,
  # the points those of the logs' records; bad input is one line.
  "$bin" -q --samples 1024 --epochs 3 --eval --log-json a.jsonl --log-every 4 --save m.safetensors >/dev/null ||
    fail "first run failed"
  "$bin" -q --samples 1024 --epochs 3 --eval --lr 0.05 --schedule cosine --log-json b.jsonl --save m.safetensors \
    >/dev/null || fail "second run failed"
  "$bin" plot a.jsonl b.jsonl -o curves.svg --title "lr 0.01 & 0.05" >out.txt 2>err.txt || { cat err.txt; fail "plot failed"; }
  [[ $(cat out.txt) == "wrote curves.svg: 2 logs" ]] || { cat out.txt; fail "plot's line"; }
  "$py" - curves.svg <<'PY' || fail "the SVG is not the logs' curves"
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == ns + "svg", root.tag
panels = {g.get("id"): g for g in root.iter(ns + "g") if g.get("class") == "panel"}
assert list(panels) == ["loss", "metric", "lr"], list(panels)
texts = [t.text for t in root.iter(ns + "text")]
assert "lr 0.01 & 0.05" in texts and "eval: test loss" in texts and "a.jsonl" in texts and "b.jsonl" in texts, texts
# a.jsonl: a step record every 4 of 96 steps; b.jsonl has none, so its loss and lr are its 3 epochs'.
want = {"loss": {"a.jsonl": 24, "b.jsonl": 3}, "metric": {"a.jsonl": 3, "b.jsonl": 3}, "lr": {"a.jsonl": 24, "b.jsonl": 3}}
for name, g in panels.items():
    curves = {c.get("data-log"): [tuple(map(float, p.split(","))) for p in c.get("points").split()]
              for c in g.iter(ns + "polyline")}
    assert {log: len(pts) for log, pts in curves.items()} == want[name], (name, curves.keys())
    for pts in curves.values():
        xs = [x for x, _ in pts]
        assert xs == sorted(xs) and 80 <= xs[0] and xs[-1] <= 736.01, (name, xs)
    # The same last step (96) on both logs: the same x.
    assert abs(curves["a.jsonl"][-1][0] - curves["b.jsonl"][-1][0]) < 1e-6, name
# b's lr falls (cosine), a's stays: the last point of b is lower on the page's scale (larger y).
lr = {c.get("data-log"): c.get("points").split() for c in panels["lr"].iter(ns + "polyline")}
assert float(lr["b.jsonl"][-1].split(",")[1]) > float(lr["b.jsonl"][0].split(",")[1]), lr["b.jsonl"]
PY
  expect_error "error: nope.jsonl: no such file" plot nope.jsonl -o c.svg
  { head -1 a.jsonl; echo "not json"; } >bad.jsonl
  expect_error "error: bad.jsonl:2: not a --log-json record" plot a.jsonl bad.jsonl -o c.svg
  : >empty.jsonl
  expect_error "error: empty.jsonl: no records (mini_train --log-json FILE writes them)" plot empty.jsonl -o c.svg
  mkfifo fifo  # not a regular file, made here: a broken refusal cannot replace a system path
  expect_error "-o fifo: not a regular file" plot a.jsonl -o fifo
  expect_error "--output is required" plot a.jsonl
  expect_error "logs is required" plot -o c.svg
  [[ ! -e c.svg ]] || fail "plot wrote an SVG after an error"
  ;;
precision)
  # --precision bf16 (autograd/autocast.h): the GPT and CNN presets train under autocast (the loss
  # falls), the weights stay float32 master weights (every tensor of the model file is F32), and the
  # config table and the model file's metadata say so.
  for i in $(seq 40); do echo "the quick brown fox $i jumps over the lazy dog"; done >t.txt
  "$bin" --text t.txt --layers 1 --heads 2 --dim 16 --context 16 --batch-size 64 --lr 1e-2 --max-steps 0 --epochs 3 \
    --precision bf16 --save gpt.safetensors >out.txt 2>err.txt || { cat err.txt; fail "gpt --precision bf16 failed"; }
  grep -q '^  precision    bf16 (autocast: matmul, linear, conv and attention in bfloat16, float32 master weights)$' \
    out.txt ||
    { cat out.txt; fail "config table: no precision row"; }
  first=$(sed -n 's/^Epoch \[1\/3\], Loss: \([0-9.]*\).*/\1/p' out.txt)
  last=$(sed -n 's/^Epoch \[3\/3\], Loss: \([0-9.]*\).*/\1/p' out.txt)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1) }' ||
    { cat out.txt; fail "gpt bf16: loss did not fall: $first -> $last"; }
  write_npy x784.npy "<f4" 40,28,28 "rnd.random() * 255"
  write_npy y784.npy "<i8" 40 "i % 10"
  "$bin" --inputs x784.npy --targets y784.npy --model cnn --epochs 4 --batch-size 20 --precision bf16 \
    --save cnn.safetensors >cnn.txt 2>err.txt || { cat err.txt; fail "cnn --precision bf16 failed"; }
  first=$(sed -n 's/^Epoch \[1\/4\], Loss: \([0-9.]*\).*/\1/p' cnn.txt)
  last=$(sed -n 's/^Epoch \[4\/4\], Loss: \([0-9.]*\).*/\1/p' cnn.txt)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
    { cat cnn.txt; fail "cnn bf16: loss did not fall: $first -> $last"; }
  for f in gpt cnn; do
    "$py" - $f.safetensors <<'PY' || fail "$f.safetensors: not float32 weights with precision bf16 in the metadata"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
meta = header.pop("__metadata__")
assert meta["precision"] == "bf16", meta
assert all(t["dtype"] == "F32" or name.endswith("num_batches_tracked") for name, t in header.items()), header
PY
  done
  "$bin" eval --init gpt.safetensors >/dev/null || fail "mini_train eval of a bf16-trained gpt failed"
  expect_error "--precision: bf32 not in {fp32,bf16,fp16}" --precision bf32
  ;;
precision_fp16)
  # --precision fp16: autocast in float16 and a GradScaler (optim/grad_scaler.h). The CNN trains (the
  # loss falls) and says how many steps the scaler skipped; an interrupted and resumed run equals the
  # uninterrupted one byte for byte, which needs the scaler's state in the checkpoint (grad_scaler/);
  # two ranks decide each skip together and end with the same weights as the checkpoint says.
  write_npy x784.npy "<f4" 40,28,28 "rnd.random() * 255"
  write_npy y784.npy "<i8" 40 "i % 10"
  "$bin" --inputs x784.npy --targets y784.npy --model cnn --epochs 4 --batch-size 20 --precision fp16 \
    >cnn.txt 2>err.txt || { cat err.txt; fail "cnn --precision fp16 failed"; }
  grep -q '^  precision    fp16 (autocast: .* in float16, float32 master weights; loss scaled by a GradScaler from 65536)$' \
    cnn.txt || { cat cnn.txt; fail "config table: no fp16 precision row"; }
  grep -q '^fp16: [0-9]* steps\? skipped for inf or NaN gradients; loss scale now [0-9.e+]*$' cnn.txt ||
    { cat cnn.txt; fail "no fp16 skipped-steps line"; }
  first=$(sed -n 's/^Epoch \[1\/4\], Loss: \([0-9.]*\).*/\1/p' cnn.txt)
  last=$(sed -n 's/^Epoch \[4\/4\], Loss: \([0-9.]*\).*/\1/p' cnn.txt)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
    { cat cnn.txt; fail "cnn fp16: loss did not fall: $first -> $last"; }
  flags=(--model mlp --hidden 16,8 --optimizer adam --samples 300 --precision fp16 --clip-grad 1 --quiet)
  "$bin" "${flags[@]}" --epochs 4 --checkpoint-dir a --save full.safetensors || fail "fp16 full run failed"
  "$bin" "${flags[@]}" --epochs 4 --stop-after 2 --checkpoint-dir b || fail "fp16 first half failed"
  "$bin" "${flags[@]}" --epochs 4 --checkpoint-dir b --resume auto --save resumed.safetensors || fail "fp16 resume failed"
  cmp full.safetensors resumed.safetensors || fail "fp16: resumed weights differ from the uninterrupted run"
  "$py" - b/checkpoint-epoch-000002.safetensors <<'PY' || fail "the fp16 checkpoint has no GradScaler state"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
assert "grad_scaler/scale" in header and "grad_scaler/_growth_tracker" in header, sorted(header)
PY
  # Gloo: MPI's own allocations would read as leaks under LeakSanitizer (lib.sh).
  "$bin" "${flags[@]}" --epochs 2 --nproc 2 --backend gloo --save ddp.safetensors || fail "fp16 under --nproc 2 failed"
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
echo "ok: $case_name"
