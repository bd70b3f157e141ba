#!/usr/bin/env bash
# End-to-end tests of the mini_train program: the seed job, presets, exact resume, files written
# atomically, and bad input refused with one line. Usage: mini_train_test.sh MINI_TRAIN CASE
# (tests/CMakeLists.txt registers one CTest test per case). Each case runs in a fresh temp folder.
set -uo pipefail
bin=$1
case_name=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

. "$here/lib.sh"  # fail, expect_error, mpi_leaks_are_not_ours

# Flips one bit in the data of tensor $2 of safetensors file $1, found through the file's header.
flip_tensor_bit() {
  local py=/usr/bin/python3
  [[ -x $py ]] || py=python3
  "$py" - "$1" "$2" <<'PY' || fail "could not damage $1"
import json, struct, sys
path, name = sys.argv[1], sys.argv[2]
raw = bytearray(open(path, "rb").read())
(n,) = struct.unpack("<Q", raw[:8])
begin, end = json.loads(raw[8:8 + n])[name]["data_offsets"]
raw[8 + n + (begin + end) // 2] ^= 0x08
open(path, "wb").write(raw)
PY
}

# same_tensors A B TOL: the two safetensors files hold the same tensor names and shapes, every value
# within TOL (relative to the larger magnitude, absolute below 1); else the first that differs, by how much.
same_tensors() {
  /usr/bin/python3 - "$@" <<'PY'
import json, struct, sys
import numpy as np
def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    kinds = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
    out = {}
    for name, t in header.items():
        a, b = t["data_offsets"]
        data = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=kinds[t["dtype"]])
        out[name] = data.reshape(t["shape"]).astype(np.float64)
    return out
x, y, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
assert x.keys() == y.keys(), sorted(x.keys() ^ y.keys())
for name in x:
    assert x[name].shape == y[name].shape, (name, x[name].shape, y[name].shape)
    d = np.abs(x[name] - y[name]) / np.maximum(1, np.maximum(np.abs(x[name]), np.abs(y[name])))
    assert d.size == 0 or d.max() <= tol, f"{name}: differs by {d.max():.3g} > {tol}"
PY
}

# --model cnn's cases: the first $1 training and $2 test images of Fashion-MNIST as x.npy/y.npy and
# xt.npy/yt.npy ((n, 28, 28) float32 pixels 0..255, int64 labels), so that a run takes seconds.
# Skips (77) without the dataset or numpy.
write_fashion_subset() {
  local dir=/usr/share/datasets/fashion-mnist py=/usr/bin/python3
  [[ -d $dir ]] || { echo "SKIP: dataset-fashion-mnist not installed"; exit 77; }
  [[ -x $py ]] || py=python3
  "$py" -c "import numpy" 2>/dev/null || { echo "SKIP: numpy not installed"; exit 77; }
  "$py" - "$dir" "$1" "$2" <<'PY' || fail "could not write the Fashion-MNIST subset"
import gzip, sys
import numpy as np
d, n_train, n_test = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def idx(name, n, header, shape):  # IDX files: a big-endian header, then one byte per value
    raw = gzip.open(f"{d}/{name}", "rb").read()
    return np.frombuffer(raw, np.uint8, offset=header)[: n * int(np.prod(shape))].reshape((n,) + shape)
for split, n, x, y in (("train", n_train, "x", "y"), ("t10k", n_test, "xt", "yt")):
    np.save(f"{x}.npy", idx(f"{split}-images-idx3-ubyte.gz", n, 16, (28, 28)).astype(np.float32))
    np.save(f"{y}.npy", idx(f"{split}-labels-idx1-ubyte.gz", n, 8, ()).astype(np.int64))
PY
}

case "$case_name" in
seed_job)
  "$bin" >out.txt 2>err.txt || { cat err.txt; fail "seed job failed"; }
  [[ $(grep -c '^Epoch \[[1-5]/5\], Loss: [0-9.]*, [0-9]* samples/s$' out.txt) -eq 5 ]] || { cat out.txt; fail "expected 5 epoch lines"; }
  # The loss must fall: the synthetic targets are a noisy linear function of the inputs.
  first=$(sed -n 's/^Epoch \[1\/5\], Loss: \([0-9.]*\).*/\1/p' out.txt)
  last=$(sed -n 's/^Epoch \[5\/5\], Loss: \([0-9.]*\).*/\1/p' out.txt)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a / 10) }' || fail "loss did not fall: $first -> $last"
  [[ -s final_model.safetensors ]] || fail "final_model.safetensors missing"
  grep -q "linear:10-1 (11 parameters)" out.txt || fail "config table missing the model line"
  ;;
quiet_eval_json)
  # --quiet: the score and the summary line, nothing else.
  "$bin" --quiet --eval --log-json log.jsonl --epochs 3 --save m.safetensors >out.txt 2>err.txt || fail "run failed"
  [[ $(wc -l <out.txt) -eq 2 ]] && grep -q '^Test loss: ' out.txt || { cat out.txt; fail "--quiet --eval: score"; }
  grep -q '^saved m.safetensors (3 epochs, last loss [0-9.]*, [0-9.]* s)$' out.txt || { cat out.txt; fail "--quiet: summary"; }
  [[ $(grep -c '"type":"epoch"' log.jsonl) -eq 3 ]] || fail "expected 3 epoch records"
  grep -q '"epoch":3' log.jsonl && grep -q '"samples_per_s"' log.jsonl || fail "JSON lines lack fields"
  # --eval scores every epoch: on the screen and in the log (an eval record after each epoch's).
  [[ $(grep -c '"metric":"loss","seconds":[0-9.e-]*,"split":"test","step":[0-9]*,"type":"eval","value":[0-9]' \
    log.jsonl) -eq 3 && $(wc -l <log.jsonl) -eq 6 ]] || { cat log.jsonl; fail "JSON lines lack the eval score"; }
  "$bin" --eval --epochs 2 --save m.safetensors >out.txt 2>err.txt || fail "run failed"
  [[ $(grep -c '^Epoch \[[12]/2\] test loss: [0-9.]*$' out.txt) -eq 2 ]] || { cat out.txt; fail "no validation line per epoch"; }
  # As --help says: a new run empties the log, --resume appends to it.
  "$bin" -q --log-json log.jsonl --epochs 2 --checkpoint-dir ck --save m.safetensors >/dev/null || fail "run failed"
  [[ $(wc -l <log.jsonl) -eq 2 ]] || fail "a new run did not start a new log"
  "$bin" -q --log-json log.jsonl --epochs 4 --checkpoint-dir ck --resume auto --save m.safetensors >/dev/null ||
    fail "resume failed"
  [[ $(wc -l <log.jsonl) -eq 4 ]] && grep -q '"epoch":4' log.jsonl || { cat log.jsonl; fail "--resume did not append"; }
  "$bin" --help | tr -s ' \n' ' ' | grep -q "emptied at the start of a run, appended to by --resume" ||
    fail "--help does not describe the log"
  ;;
resume_exact)
  # Uninterrupted 4 epochs vs stopping after 2 and resuming: the same bytes. An MLP with Adam, a cosine
  # schedule, shuffling and worker threads, so every piece of state has to come back.
  flags=(--model mlp --hidden 16,8 --optimizer adam --schedule cosine --num-workers 2 --samples 500 --quiet)
  "$bin" "${flags[@]}" --epochs 4 --checkpoint-dir a --save full.safetensors || fail "full run failed"
  "$bin" "${flags[@]}" --epochs 4 --stop-after 2 --checkpoint-dir b --save half.safetensors || fail "first half failed"
  [[ ! -e half.safetensors ]] || fail "--stop-after must not save a final model"
  "$bin" "${flags[@]}" --epochs 4 --checkpoint-dir b --resume auto --save resumed.safetensors || fail "resume failed"
  cmp full.safetensors resumed.safetensors || fail "resumed weights differ from the uninterrupted run"
  cmp a/checkpoint-epoch-000004.safetensors b/checkpoint-epoch-000004.safetensors || fail "checkpoints differ"
  ! cmp -s b/checkpoint-epoch-000002.safetensors b/checkpoint-epoch-000004.safetensors || fail "epochs 2 and 4 should differ"
  # The checkpoint reads in Python with json + numpy alone (the safetensors layout of nn/checkpoint.h).
  py=/usr/bin/python3
  [[ -x $py ]] || py=python3
  if "$py" -c "import numpy" 2>/dev/null; then
    "$py" - a/checkpoint-epoch-000004.safetensors <<'PY' || fail "Python could not read the checkpoint"
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
meta = header.pop("__metadata__")
assert meta["format"] == "minitrain-checkpoint-1" and meta["epoch"] == "4", meta
assert meta["info/model"] == "mlp:10-16-8-1", meta
w = header["model/0.weight"]
assert w["dtype"] == "F32" and w["shape"] == [16, 10], w
b, e = w["data_offsets"]
values = np.frombuffer(raw[8 + n + b:8 + n + e], dtype="<f4")
assert np.isfinite(values).all() and values.std() > 0
assert "optimizer/state.0.exp_avg" in header and "scheduler/last_epoch" in header
PY
  else
    echo "SKIP (part of this case): numpy is not installed, so the checkpoint is not read back in Python"
  fi
  # --keep 3 by default: epochs 2..4 remain.
  [[ $(ls a | wc -l) -eq 3 && ! -e a/checkpoint-epoch-000001.safetensors ]] || { ls a; fail "--keep did not prune"; }
  ;;
damaged_checkpoint)
  # A bit flipped in the newest checkpoint's weights (Note [Tensor checksums], Note [Damaged checkpoints]).
  flags=(--model mlp --hidden 16,8 --optimizer adam --schedule cosine --samples 500 --epochs 4 --quiet)
  "$bin" "${flags[@]}" --checkpoint-dir a --save full.safetensors || fail "full run failed"
  "$bin" "${flags[@]}" --stop-after 3 --checkpoint-dir b >/dev/null || fail "first part failed"
  flip_tensor_bit b/checkpoint-epoch-000003.safetensors model/0.weight
  # Named by --resume, it is refused: one line naming the file and the tensor.
  expect_error "b/checkpoint-epoch-000003.safetensors: tensor 'model/0.weight' fails its checksum" \
    "${flags[@]}" --checkpoint-dir b --resume b/checkpoint-epoch-000003.safetensors --save resumed.safetensors
  # --resume auto takes epoch 2's, says so in one line that --quiet keeps, and ends where the run
  # that was never interrupted ended.
  "$bin" "${flags[@]}" --checkpoint-dir b --resume auto --save resumed.safetensors >out.txt 2>err.txt ||
    { cat err.txt; fail "--resume auto did not fall back to the older checkpoint"; }
  [[ $(wc -l <err.txt) -eq 1 ]] || { cat err.txt; fail "expected one line about the fallback"; }
  grep -qF "resuming from b/checkpoint-epoch-000002.safetensors, the newest checkpoint that loads; skipped \
b/checkpoint-epoch-000003.safetensors: tensor 'model/0.weight' fails its checksum" err.txt ||
    { cat err.txt; fail "the fallback line does not name both checkpoints"; }
  cmp full.safetensors resumed.safetensors || fail "resumed weights differ from the uninterrupted run"
  # The model file carries the same check.
  cp full.safetensors damaged.safetensors
  flip_tensor_bit damaged.safetensors 0.weight
  expect_error "damaged.safetensors: tensor '0.weight' fails its checksum" eval --init damaged.safetensors
  # Nothing intact left: an error, not a silent fresh start.
  for f in b/checkpoint-epoch-*.safetensors; do flip_tensor_bit "$f" model/0.weight; done
  expect_error "none of the 3 checkpoints in b loads" "${flags[@]}" --checkpoint-dir b --resume auto --save x.safetensors
  ;;
kill_during_checkpoints)
  # kill -9 the trainer at arbitrary moments while it writes checkpoints: whatever checkpoints are
  # left must load. The model is big and the epochs tiny, so most of the time goes into writing
  # (6 MB per checkpoint) and most kills land mid-write. --lr 0.001: at the default 0.01 this model
  # diverges at epoch 47 (the loss check then stops a resume there), which a fast run reaches.
  flags=(--model mlp --hidden 1024,1024 --features 512 --samples 64 --lr 0.001 --checkpoint-dir ck --keep 2 --quiet)
  count() { ls ck/checkpoint-epoch-*.safetensors 2>/dev/null | wc -l; }
  for delay in 0.05 0.13 0.21 0.37; do
    "$bin" "${flags[@]}" --epochs 100000 --resume auto >/dev/null 2>err.txt &
    pid=$!
    # Wait for this run to write something (slow under sanitizers), then kill at `delay`.
    before=$(ls -l --time-style=+%s.%N ck 2>/dev/null | md5sum)
    for _ in $(seq 600); do
      [[ $(ls -l --time-style=+%s.%N ck 2>/dev/null | md5sum) != "$before" ]] && break
      kill -0 "$pid" 2>/dev/null || { cat err.txt; fail "trainer exited early"; }
      sleep 0.1
    done
    sleep "$delay"
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  [[ $(count) -ge 1 ]] || fail "no checkpoint was written"
  # Every checkpoint file left behind is whole: each resumes (temp files of cut-off saves are not
  # checkpoints and are ignored).
  for f in ck/checkpoint-epoch-*.safetensors; do
    n=$(basename "$f" | sed 's/checkpoint-epoch-0*\([0-9]*\).safetensors/\1/')
    "$bin" "${flags[@]}" --epochs $((n + 1)) --resume "$f" --save m.safetensors >/dev/null 2>err.txt ||
      { cat err.txt; fail "resume from $f after kill -9 failed"; }
  done
  ;;
file_data)
  # Debian's python3 with python3-numpy (scripts/install-deps.sh); skip where numpy is missing.
  py=/usr/bin/python3
  [[ -x $py ]] || py=python3
  "$py" -c "import numpy" 2>/dev/null || { echo "SKIP: numpy not available"; exit 77; }
  "$py" - <<'PY' || fail "could not write the test files"
import numpy as np
rng = np.random.default_rng(0)
x = rng.standard_normal((300, 4)).astype(np.float32)
labels = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
np.save("x.npy", x); np.save("y.npy", labels)
np.savetxt("x.csv", x, delimiter=",", header="a,b,c,d", comments="")
np.savetxt("y.csv", x @ np.array([1, -2, 0.5, 3], dtype=np.float32), delimiter=",")
PY
  "$bin" --inputs x.npy --targets y.npy --optimizer adam --lr 0.05 --epochs 20 --eval --quiet >out.txt 2>err.txt ||
    { cat err.txt; fail "npy classification failed"; }
  awk '/accuracy/ { exit !($NF > 0.9) }' out.txt || { cat out.txt; fail "npy classification did not learn"; }
  "$bin" --inputs x.csv --targets y.csv --epochs 30 --eval --quiet >out.txt 2>err.txt || { cat err.txt; fail "csv regression failed"; }
  awk '/loss/ { exit !($NF < 0.01) }' out.txt || { cat out.txt; fail "csv regression did not learn"; }
  # A class index past 2^20 is a wrong file, not a layer of that many outputs; no columns, no model.
  rm -f final_model.safetensors  # the runs above saved one; a refused run must not
  "$py" -c "
import numpy as np
y = np.zeros(300, dtype=np.int64); y[7] = 2**62; np.save('huge.npy', y)
np.save('none.npy', np.zeros((300, 0), dtype=np.float32))" || fail "could not write the test files"
  expect_error "--targets huge.npy: class index 4611686018427387904 makes more than 1048576 classes" \
    --inputs x.npy --targets huge.npy
  expect_error "--inputs none.npy has shape [300, 0]: no feature columns" --inputs none.npy --targets y.npy
  ;;
fashion_mnist_short)
  [[ -d /usr/share/datasets/fashion-mnist ]] || { echo "SKIP: dataset-fashion-mnist not installed"; exit 77; }
  # CI's shorter version of the issue's 5-epoch run (which reaches ~0.89): one epoch, lower bar.
  "$bin" --dataset fashion-mnist --epochs 1 --eval --quiet >out.txt 2>err.txt || { cat err.txt; fail "run failed"; }
  awk '/Test accuracy/ { exit !($NF >= 0.83) }' out.txt || { cat out.txt; fail "accuracy below 0.83 after one epoch"; }
  ;;
bad_input)
  expect_error "--epochs must be at least 1" --epochs 0
  expect_error "--batch-size must be at least 1" --batch-size 0
  expect_error "--lr must be a positive number" --lr -1
  expect_error "--inputs and --targets go together" --inputs x.npy
  expect_error "x.npy" --inputs x.npy --targets y.npy
  expect_error "dataset-fashion-mnist" --dataset fashion-mnist --data-dir nowhere
  expect_error "--resume auto looks in --checkpoint-dir" --resume auto
  expect_error "do not go together" --gpus 0,1 --nproc 2
  expect_error "not-there.safetensors" --resume not-there.safetensors
  printf 'garbage' >bad.safetensors
  expect_error "bad.safetensors" --init bad.safetensors
  # A checkpoint of another model is refused before training.
  "$bin" --quiet --epochs 1 --checkpoint-dir ck --save other.safetensors >/dev/null || fail "setup run failed"
  expect_error "but this run builds 'mlp:10-64-1'" --model mlp --resume ck/checkpoint-epoch-000001.safetensors
  # A command line that does not parse: one line with our prefix, exit code 2 (CLI11's own were
  # 104-109, without the prefix).
  for args in "--model transformer" "--epochs x" "--bogus" "eval" "predict --init m.safetensors"; do
    # shellcheck disable=SC2086
    "$bin" $args >out.txt 2>err.txt
    rc=$?
    [[ $rc -eq 2 && $(wc -l <err.txt) -eq 1 ]] && grep -q '^mini_train: error: ' err.txt ||
      { cat err.txt; fail "mini_train $args: expected one 'mini_train: error:' line and exit 2, got $rc"; }
  done
  expect_error "--seed must be >= 0, got -1" --seed -1
  expect_error "--hidden 64 applies to --model mlp" --hidden 64
  expect_error "--zero: 1.5 is not 0, 1, 2 or 3" --zero 1.5
  expect_error "--zero: 4 is not 0, 1, 2 or 3" --zero 4
  # An empty value is refused, not read as 0 or as "not given".
  expect_error "--seed was given an empty value" --seed ""
  expect_error "--heartbeat-timeout was given an empty value" --heartbeat-timeout ""
  expect_error "--log-json was given an empty value" --log-json ""
  # A whole number past int64 is refused, not clamped to the largest (CLI11's strtoll would).
  expect_error "--seed 99999999999999999999 is past the range of a 64-bit integer" --seed 99999999999999999999
  # Sizes whose bytes would wrap are refused naming the flag (a wrapped size once overran its block).
  expect_error "--samples must be in 1..2147483648, got 4611686018427387904" --samples 4611686018427387904
  # A model file that is a FIFO is refused, not opened (which would wait for a writer forever).
  mkfifo pipe.safetensors
  expect_error "--init pipe.safetensors: not a regular file (a FIFO); give a file" --init pipe.safetensors
  mkdir folder.npy
  expect_error "--inputs folder.npy: not a regular file (a directory); give a file" --inputs folder.npy --targets folder.npy
  expect_error "load_safetensors: 'pipe.safetensors' is not a regular file" eval --init pipe.safetensors
  # A worker of torchrun (which sets TORCHELASTIC_RUN_ID) is pointed to torchrun's own flag.
  TORCHELASTIC_RUN_ID=job RANK=0 WORLD_SIZE=2 MASTER_PORT=29500 \
    expect_error "started by torchrun, which restarts workers itself: give torchrun --max-restarts 2 instead" \
    --max-restarts 2
  ;;
outputs_checked)
  # Every output path is checked before training: nothing trains, the user's path is named.
  check_refused() {
    expect_error "$@"
    ! grep -q '^Epoch' out.txt || fail "mini_train ${*:2}: trained before refusing"
  }
  check_refused "--save nodir/m.safetensors: the folder nodir does not exist" --save nodir/m.safetensors
  check_refused "--save /proc/m.safetensors: cannot write in /proc" --save /proc/m.safetensors
  mkdir adir
  check_refused "--save adir: not a regular file (a directory)" --save adir
  check_refused "--checkpoint-dir /proc/ck: cannot create the folder" --checkpoint-dir /proc/ck
  check_refused "--log-json nodir/log.jsonl: the folder nodir does not exist" --log-json nodir/log.jsonl
  # The same for a data-parallel job: the launcher refuses before any worker starts.
  "$bin" --nproc 2 --backend gloo --save nodir/m.safetensors >out.txt 2>err.txt && fail "--nproc 2: bad --save accepted"
  grep -q "^mini_train: error: --save nodir/m.safetensors: the folder nodir does not exist" err.txt &&
    ! grep -q '^Epoch' out.txt || { cat out.txt err.txt; fail "--nproc 2: bad --save"; }
  [[ ! -e nodir ]] || fail "a probe left a folder behind"
  [[ -z $(ls -A adir) ]] || fail "a probe left a file behind"
  # Note [An output is never an input]: an output over an input, or two outputs in one file, is
  # refused before training, and the input is left as it was.
  printf 'not a log' >kept.txt
  check_refused "--log-json ./kept.txt is also --init kept.txt, which this command reads" --init kept.txt --log-json ./kept.txt
  check_refused "--save a.st and --trace a.st are one file" --save a.st --trace a.st
  ln -s kept.txt link.txt
  check_refused "--save link.txt is also --resume kept.txt" --resume kept.txt --save link.txt
  [[ $(cat kept.txt) == "not a log" && ! -e a.st ]] || fail "a refused run wrote over its input"
  "$bin" --epochs 1 -q --save m.safetensors --log-json l.jsonl >/dev/null || fail "setup run failed"
  "$bin" --epochs 1 -q --init m.safetensors --save m.safetensors >/dev/null 2>err.txt ||
    { cat err.txt; fail "--save over its own --init (a model updated in place) was refused"; }
  expect_error "-o l.jsonl is also the log l.jsonl, which this command reads" plot l.jsonl -o l.jsonl
  expect_error "--output m.safetensors is also --init m.safetensors" predict --init m.safetensors --inputs l.jsonl \
    --output m.safetensors
  expect_error "--output p.csv: predict writes an NPY file" predict --init m.safetensors --inputs l.jsonl --output p.csv
  ;;
output_rule)
  # Note [Output files], for every file mini_train writes: a symlink's file gets the output and the
  # link stays a link; a FIFO, a folder or a device node is refused before any training, in one line
  # naming the flag and the path. The device is our own copy of /dev/null made in this temp folder
  # (mknod, root only); /dev itself is never touched.
  mkdir real
  for f in m.safetensors log.jsonl t.json p.npy; do ln -s "real/$f" "link-$f"; done
  "$bin" --epochs 2 -q --save link-m.safetensors --log-json link-log.jsonl --trace link-t.json --trace-steps 1:2 \
    >/dev/null 2>err.txt || { cat err.txt; fail "training through symlinks failed"; }
  # predict --output, on two rows of the model's 10 inputs (an NPY file written without numpy).
  python3 -c '
import struct
h = "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 10), }"
h += " " * (117 - len(h)) + "\n"
open("x.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + struct.pack("<20f", *range(20)))
' || fail "could not write x.npy"
  "$bin" predict --init link-m.safetensors --inputs x.npy --output link-p.npy >/dev/null 2>err.txt ||
    { cat err.txt; fail "predict through a symlink failed"; }
  for f in m.safetensors log.jsonl t.json p.npy; do
    [[ -L link-$f && -f real/$f && -s real/$f ]] || { ls -l . real; fail "link-$f: the link was replaced or real/$f not written"; }
  done
  [[ $(wc -l <real/log.jsonl) -eq 2 ]] || fail "--log-json through a symlink: expected 2 lines"
  [[ -z $(find . -name '*.tmp.*') ]] || fail "a temporary was left behind"
  # Refused paths: a FIFO, a folder, and a character device where root may make one.
  mkfifo pipe
  mkdir adir
  refused=("pipe:a FIFO" "adir:a directory")
  if mknod null c 1 3 2>/dev/null; then
    refused+=("null:a character device")
  else
    echo "output_rule: SKIP the device-node checks: mknod is not permitted here (needs root)"
  fi
  for entry in "${refused[@]}"; do
    path=${entry%%:*} kind=${entry#*:}
    for flag in --save --log-json --trace; do
      expect_error "$flag $path: not a regular file ($kind); give a file path" --epochs 1 "$flag" "$path"
      ! grep -q '^Epoch' out.txt || fail "$flag $path: trained before refusing"
    done
    expect_error "--output $path: not a regular file ($kind); give a file path" \
      predict --init real/m.safetensors --inputs x.npy --output "$path"
    # --checkpoint-dir names a folder: anything else there is refused too.
    [[ $path == adir ]] || expect_error "--checkpoint-dir $path: not a folder" --epochs 1 --checkpoint-dir "$path"
  done
  [[ -p pipe && -d adir && -z $(ls -A adir) ]] || fail "a refused path was changed"
  [[ ! -e null || -c null ]] || fail "the device node was replaced"
  ;;
version)
  # One line: the project's version, the commit, and the backends this build has.
  "$bin" --version >out.txt 2>err.txt || { cat err.txt; fail "--version failed"; }
  [[ $(wc -l <out.txt) -eq 1 && ! -s err.txt ]] || { cat out.txt err.txt; fail "--version: expected one line"; }
  grep -qE '^mini_train [0-9]+\.[0-9]+\.[0-9]+ \([^)]+\), CUDA (yes|no), MPI (yes|no), Gloo (yes|no)$' out.txt ||
    { cat out.txt; fail "--version's line"; }
  ;;
interrupt_line)
  # Ctrl-C of a training process: one line naming where it stopped and the newest checkpoint, and
  # the exit status of a process killed by SIGINT (130). env --default-signal=INT: a background job
  # of a non-interactive shell starts with SIGINT ignored, which mini_train respects.
  env --default-signal=INT "$bin" --epochs 100000 --checkpoint-dir ck --save m.safetensors >out.txt 2>err.txt &
  pid=$!
  for _ in $(seq 300); do [[ -n $(ls ck 2>/dev/null | grep -v tmp) ]] && break; sleep 0.1; done
  kill -INT "$pid"
  wait "$pid"
  rc=$?
  [[ $rc -eq 130 ]] || { cat err.txt; fail "SIGINT: exit code $rc, expected 130"; }
  [[ $(wc -l <err.txt) -eq 1 ]] || { cat err.txt; fail "SIGINT: expected one line on stderr"; }
  grep -qE '^mini_train: interrupted \(SIGINT\) in epoch [0-9]+ after step [0-9]+: checkpoint ck/checkpoint-epoch-[0-9]{6}\.safetensors is the newest; resume with --resume auto$' err.txt ||
    { cat err.txt; fail "SIGINT: the line"; }
  newest=$(sed -n 's/.*: checkpoint \(ck\/[^ ]*\) is the newest.*/\1/p' err.txt)
  [[ -f $newest ]] || { ls ck; fail "the line names $newest, which is not there"; }
  # SIGTERM, without --checkpoint-dir: the line says nothing was saved; no model file.
  "$bin" --epochs 100000 --save m.safetensors >out.txt 2>err.txt &
  pid=$!
  for _ in $(seq 300); do grep -q '^Epoch' out.txt && break; sleep 0.1; done
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  [[ $rc -eq 143 ]] || { cat err.txt; fail "SIGTERM: exit code $rc, expected 143"; }
  grep -qxE 'mini_train: interrupted \(SIGTERM\) in epoch [0-9]+ after step [0-9]+: nothing saved \(no --checkpoint-dir\)' err.txt ||
    { cat err.txt; fail "SIGTERM: the line"; }
  [[ ! -e m.safetensors ]] || fail "an interrupted run saved a model"
  ;;
full_disk)
  # Writes that fail mid-file, without root: a file-size limit (bash's ulimit -f counts KiB) of
  # 256 KiB, below the 1 MB model, with SIGXFSZ ignored so that write() fails with EFBIG instead of
  # the signal killing the process. What is on disk is never half-written: the model file keeps its
  # last complete version, a checkpoint folder only complete checkpoints, and no temporary is left.
  flags=(--model mlp --hidden 512 --features 512 --samples 64)  # 263k parameters: about 1 MB
  limited() { (ulimit -f 256 && trap '' XFSZ && "$@"); }
  "$bin" "${flags[@]}" --epochs 1 -q --save m.safetensors --checkpoint-dir ck >/dev/null || fail "the unlimited run failed"
  cp m.safetensors m.before && cp ck/checkpoint-epoch-000001.safetensors ck.before
  limited expect_error "cannot write 'm.safetensors' (its temporary" "${flags[@]}" --epochs 1 --seed 1 --save m.safetensors || exit 1
  grep -qF "at most 262144 bytes (ulimit -f)" err.txt || { cat err.txt >&2; fail "the error does not name the limit"; }
  cmp -s m.safetensors m.before || fail "a failed save changed m.safetensors"
  limited expect_error "cannot write 'ck/checkpoint-epoch-000002.safetensors'" "${flags[@]}" --epochs 2 \
    --checkpoint-dir ck --resume auto --save m2.safetensors || exit 1
  [[ $(ls ck) == checkpoint-epoch-000001.safetensors ]] || { ls -l ck >&2; fail "ck holds more than epoch 1's checkpoint"; }
  cmp -s ck/checkpoint-epoch-000001.safetensors ck.before || fail "a failed checkpoint changed epoch 1's"
  [[ ! -e m2.safetensors && -z $(find . -name '*.tmp.*') ]] || fail "a failed save left a file behind"
  # Where a small tmpfs can be mounted (root): a filesystem without room is refused before training.
  mkdir small
  if mount -t tmpfs -o size=256k tmpfs small 2>/dev/null; then
    trap 'umount "$work/small"; rm -rf "$work"' EXIT
    flags+=(--epochs 1)
    expect_error "--save small/m.safetensors: small has" "${flags[@]}" --save small/m.safetensors
    ! grep -q '^Epoch' out.txt || fail "trained before refusing"
    expect_error "--checkpoint-dir small/ck: small/ck has" "${flags[@]}" --checkpoint-dir small/ck --save m3.safetensors
    # A model that fits is saved there.
    "$bin" --epochs 1 -q --save small/m.safetensors >/dev/null || fail "a small model did not fit"
    [[ -s small/m.safetensors ]] || fail "small/m.safetensors missing"
  fi
  ;;
batch_overflow)
  # A batch larger than the data is the whole data: one step per epoch, never 0 or -1 steps.
  for b in 9223372036854775807 9223372036854775000 5000; do
    "$bin" --batch-size "$b" --epochs 2 --save m.safetensors >out.txt 2>err.txt || { cat err.txt; fail "--batch-size $b"; }
    grep -q "batch        1000 per device, 1000 global, 1 steps per epoch (--batch-size $b is more than" out.txt ||
      { cat out.txt; fail "--batch-size $b: config table"; }
  done
  # ... and trains exactly like --batch-size 1000.
  "$bin" --batch-size 1000 --epochs 2 -q --save ref.safetensors >/dev/null || fail "--batch-size 1000"
  cmp -s m.safetensors ref.safetensors || fail "a clamped batch trained differently from the whole data"
  ;;
resume_overrides)
  # What cannot change mid-run is refused; what the checkpoint decides is said, and shown in effect.
  "$bin" -q --epochs 4 --stop-after 2 --checkpoint-dir ck --save half.safetensors || fail "first half failed"
  expect_error "trained with --batch-size 32, this run asks for 64" --epochs 4 --checkpoint-dir ck --resume auto \
    --batch-size 64
  expect_error "the checkpoint's optimizer is sgd, this run asks for adam" --epochs 4 --checkpoint-dir ck \
    --resume auto --optimizer adam
  cp -r ck ck2
  "$bin" --epochs 4 --checkpoint-dir ck --resume auto --lr 0.05 --save resumed.safetensors >out.txt 2>err.txt ||
    { cat err.txt; fail "resume with --lr failed"; }
  grep -q "optimizer    sgd lr=0.01$" out.txt || { cat out.txt; fail "the config table does not show the lr in effect"; }
  # The explicit --lr that does not apply is a warning, which --quiet does not hide.
  "$bin" -q --epochs 4 --checkpoint-dir ck2 --resume auto --lr 0.05 --save quiet.safetensors >out.txt 2>err.txt ||
    { cat err.txt; fail "resume with --lr -q failed"; }
  [[ $(cat err.txt) == "mini_train: warning: --resume ck2/checkpoint-epoch-000002.safetensors: the checkpoint's lr 0.01 continues, not --lr 0.05 (a resumed optimizer keeps its settings)" ]] ||
    { cat err.txt; fail "no warning about --lr under -q"; }
  "$bin" -q --epochs 4 --save full.safetensors >/dev/null || fail "full run failed"
  cmp -s full.safetensors resumed.safetensors || fail "the resumed run did not use the checkpoint's lr"
  ;;
nonfinite)
  # A NaN in the data stops the run at the step it reaches the loss; --allow-nonfinite trains on.
  { echo "a,b"; for i in $(seq 100); do echo "$i,$((2 * i))"; done; echo "nan,3"; } >x.csv
  { for i in $(seq 100); do echo "$((2 * i)).5"; done; echo "1.5"; } >y.csv
  expect_error "the loss is nan at step 4 (epoch 1, batch 4 of 4)" --inputs x.csv --targets y.csv --no-shuffle
  # Its source location is repository-relative (apps/..., not ../apps/... nor this machine's path).
  grep -q ' (apps/mini_train/train_epoch.cpp:[0-9]*)$' err.txt ||
    { cat err.txt; fail "the error's source location is not repository-relative"; }
  "$bin" --inputs x.csv --targets y.csv --no-shuffle --allow-nonfinite --epochs 1 -q >out.txt 2>err.txt ||
    { cat err.txt; fail "--allow-nonfinite stopped"; }
  ;;
csv_classes)
  # --task auto: a CSV column of whole numbers is classes, and the config table says why.
  { for i in $(seq 200); do echo "$((i % 7)),$((i % 3))"; done; } >x.csv
  { for i in $(seq 200); do echo "$((i % 3))"; done; } >y.csv
  "$bin" --inputs x.csv --targets y.csv --epochs 1 >out.txt 2>err.txt || { cat err.txt; fail "run failed"; }
  grep -q "task         classification, cross-entropy (--task auto: the CSV targets are whole numbers" out.txt ||
    { cat out.txt; fail "whole-number CSV targets: task line"; }
  grep -q "linear:2-3 " out.txt || { cat out.txt; fail "three classes expected"; }
  "$bin" --inputs x.csv --targets y.csv --epochs 1 --task regression >out.txt 2>err.txt || fail "regression failed"
  grep -q "task         regression, mean squared error$" out.txt || { cat out.txt; fail "--task regression"; }
  # Whole numbers from 1000 up are quantities, not classes.
  { for i in $(seq 200); do echo "$((1000 + i))"; done; } >big.csv
  "$bin" --inputs x.csv --targets big.csv --epochs 1 >out.txt 2>err.txt || fail "large targets failed"
  grep -q "task         regression, mean squared error$" out.txt || { cat out.txt; fail "large whole numbers"; }
  ;;
model_file)
  # The saved model carries its shape, task and preprocessing; eval and predict use them.
  "$bin" --model mlp --hidden 8 --standardize --epochs 2 --eval -q --save m.safetensors >train.txt 2>err.txt ||
    { cat err.txt; fail "training failed"; }
  "$bin" eval --init m.safetensors >eval.txt 2>err.txt || { cat err.txt; fail "eval failed"; }
  [[ $(grep '^Test loss' train.txt) == $(cat eval.txt) ]] || { cat train.txt eval.txt; fail "eval scored differently"; }
  py=/usr/bin/python3
  [[ -x $py ]] || py=python3
  "$py" - m.safetensors <<'PY' || fail "metadata"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
meta = json.loads(raw[8:8 + n])["__metadata__"]
assert meta["format"] == "minitrain-model-1" and meta["model"] == "mlp:10-8-1", meta
assert meta["task"] == "regression" and meta["outputs"] == "1" and meta["inputs"] == "10", meta
assert abs(float(meta["standardize_std"]) - 1) < 0.1 and abs(float(meta["standardize_mean"])) < 0.1, meta
assert meta["dataset"] == "synthetic" and meta["seed"] == "0", meta
PY
  if "$py" -c "import numpy" 2>/dev/null; then
    "$py" - <<'PY' || fail "could not write the test files"
import numpy as np
rng = np.random.default_rng(0)
x = (rng.standard_normal((300, 4)) * 3 + 5).astype(np.float32)
np.save("x.npy", x); np.save("y.npy", (x[:, 0] + x[:, 1] > 10).astype(np.int64))
PY
    "$bin" --inputs x.npy --targets y.npy --standardize --optimizer adam --lr 0.05 --epochs 20 -q --save c.safetensors \
      >/dev/null || fail "classifier training failed"
    "$bin" predict --init c.safetensors --inputs x.npy --output p.npy >out.txt 2>err.txt || { cat err.txt; fail "predict"; }
    grep -q "^wrote p.npy: 300 class indices (int64), shape \[300\]$" out.txt || { cat out.txt; fail "predict's line"; }
    "$py" -c "
import numpy as np
p, y = np.load('p.npy'), np.load('y.npy')
assert p.dtype == np.int64 and p.shape == (300,) and (p == y).mean() > 0.95, (p.dtype, p.shape, (p == y).mean())
" || fail "predictions are not the trained classifier's"
  else
    echo "SKIP (part of this case): numpy is not installed, so the classifier and predict's output are not checked"
  fi
  "$bin" -q --epochs 1 --checkpoint-dir ck --save m.safetensors >/dev/null || fail "checkpoint run failed"
  # A checkpoint carries the model file's metadata: eval takes it as the model it holds.
  "$bin" eval --init m.safetensors >want.txt || fail "eval of the model file"
  "$bin" eval --init ck/checkpoint-epoch-000001.safetensors >got.txt || fail "eval of a checkpoint"
  cmp want.txt got.txt || { cat want.txt got.txt; fail "a checkpoint's eval differs from its model file's"; }
  "$py" -c "import json, struct; h = json.dumps({'__metadata__': {'format': 'other'}}).encode() + b'  '
open('other.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h)" || fail "could not write other.safetensors"
  expect_error "not a model file saved by mini_train" eval --init other.safetensors
  printf 'garbage' >bad.safetensors
  expect_error "bad.safetensors" eval --init bad.safetensors
  ;;
cnn_resume)
  # --model cnn on 512 images: 2 epochs uninterrupted vs stopping after 1 and resuming give the same
  # bytes, which needs the BatchNorm running statistics (buffers) in the checkpoint; they are in the
  # final model too, and `mini_train eval` rebuilds the CNN from its metadata.
  write_fashion_subset 512 256
  flags=(--inputs x.npy --targets y.npy --model cnn --standardize --optimizer adam --schedule cosine --batch-size 64 --epochs 2 -q)
  "$bin" "${flags[@]}" --checkpoint-dir a --save full.safetensors >/dev/null 2>err.txt || { cat err.txt; fail "full run"; }
  "$bin" "${flags[@]}" --checkpoint-dir b --stop-after 1 >/dev/null 2>err.txt || { cat err.txt; fail "first half"; }
  "$bin" "${flags[@]}" --checkpoint-dir b --resume auto --save resumed.safetensors >/dev/null 2>err.txt ||
    { cat err.txt; fail "resume"; }
  cmp full.safetensors resumed.safetensors || fail "resumed CNN differs from the uninterrupted run"
  cmp a/checkpoint-epoch-000002.safetensors b/checkpoint-epoch-000002.safetensors || fail "checkpoints differ"
  /usr/bin/python3 - a/checkpoint-epoch-000001.safetensors full.safetensors <<'PY' || fail "buffers missing or untouched"
import json, struct, sys
import numpy as np
def read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__")
    def get(name):
        h = header[name]
        a, b = h["data_offsets"]
        return np.frombuffer(raw[8 + n + a:8 + n + b], {"F32": np.float32, "I64": np.int64}[h["dtype"]]).reshape(h["shape"])
    return meta, header, get
meta, header, get = read(sys.argv[2])
assert meta["model"] == "cnn:784-10", meta
for bn, c in (("2", 32), ("6", 64)):  # Sequential indices of the two BatchNorm2d layers
    assert get(bn + ".running_mean").shape == (c,) and get(bn + ".running_var").shape == (c,)
    assert get(bn + ".num_batches_tracked") == 16, get(bn + ".num_batches_tracked")  # 2 epochs x 8 steps
    assert np.abs(get(bn + ".running_var") - 1).max() > 1e-3  # updated from the ones it starts at
_, header, get = read(sys.argv[1])
assert get("model/2.num_batches_tracked") == 8, header.keys()
PY
  "$bin" eval --init full.safetensors --inputs xt.npy --targets yt.npy >eval.txt 2>err.txt || { cat err.txt; fail "eval"; }
  awk '/^Data accuracy/ { ok = $NF >= 0.6 } END { exit !ok }' eval.txt || { cat eval.txt; fail "CNN did not learn (test subset)"; }
  # Rows that are not 1x28x28 images: one line, before any training.
  /usr/bin/python3 -c "import numpy as np; np.save('x10.npy', np.zeros((8, 10), np.float32)); np.save('y10.npy', np.zeros(8, np.int64))"
  expect_error "--model cnn takes 1x28x28 images, rows of 784 values" --inputs x10.npy --targets y10.npy --model cnn
  expect_error "this data has 10 values per row" --model cnn --dataset synthetic
  expect_error "has 10 values per row, but the model 'cnn:784-10' takes 784" eval --init full.safetensors --inputs x10.npy \
    --targets y10.npy
  ;;
cnn_nproc2)
  # --model cnn data-parallel on 2 processes (Gloo): BatchNorm normalises with each rank's batch and
  # every forward starts from rank 0's running statistics (broadcast_buffers); rank 0 saves, resume is
  # exact, and the model file evaluates and predicts. Then the same with --sync-bn.
  write_fashion_subset 512 256
  flags=(--nproc 2 --backend gloo --inputs x.npy --targets y.npy --model cnn --standardize --optimizer adam
         --batch-size 32 --epochs 2)
  "$bin" "${flags[@]}" --checkpoint-dir a --save "$work/c2.safetensors" >out.txt 2>err.txt ||
    { cat out.txt err.txt; fail "--nproc 2"; }
  # Resumed from rank 0's checkpoint, every rank starts from rank 0's running statistics; in training
  # BatchNorm normalises with batch statistics, so the weights (and rank 0's statistics) are exact.
  "$bin" "${flags[@]}" -q --checkpoint-dir b --stop-after 1 >/dev/null 2>err.txt || { cat err.txt; fail "first half"; }
  "$bin" "${flags[@]}" -q --checkpoint-dir b --resume auto --save "$work/r2.safetensors" >/dev/null 2>err.txt ||
    { cat err.txt; fail "resume"; }
  cmp c2.safetensors r2.safetensors || fail "resumed --nproc 2 CNN differs from the uninterrupted run"
  [[ $(grep -c '^Epoch \[[1-2]/2\], Loss: ' out.txt) -eq 2 ]] || { cat out.txt; fail "expected 2 epoch lines"; }
  grep -q "cnn:784-10" out.txt && grep -q "cpu, 2 processes (gloo)" out.txt || { cat out.txt; fail "config table"; }
  "$bin" eval --init c2.safetensors --inputs xt.npy --targets yt.npy >eval.txt 2>err.txt || { cat err.txt; fail "eval"; }
  awk '/^Data accuracy/ { ok = $NF >= 0.6 } END { exit !ok }' eval.txt || { cat eval.txt; fail "CNN did not learn"; }
  "$bin" predict --init c2.safetensors --inputs xt.npy --output p.npy >out.txt 2>err.txt || { cat err.txt; fail "predict"; }
  grep -q "^wrote p.npy: 256 class indices (int64), shape \[256\]$" out.txt || { cat out.txt; fail "predict's line"; }
  # --sync-bn: statistics over both ranks' batches, so other weights than per-rank BatchNorm, and
  # the same weights again from the same seed.
  "$bin" "${flags[@]}" -q --sync-bn --save "$work/s1.safetensors" >/dev/null 2>err.txt || { cat err.txt; fail "--sync-bn"; }
  "$bin" "${flags[@]}" -q --sync-bn --save "$work/s2.safetensors" >/dev/null 2>err.txt || { cat err.txt; fail "--sync-bn"; }
  cmp -s s1.safetensors s2.safetensors || fail "--sync-bn is not deterministic"
  ! cmp -s s1.safetensors c2.safetensors || fail "--sync-bn trained the same weights as per-rank BatchNorm"
  "$bin" --nproc 2 --model mlp --sync-bn >out.txt 2>err.txt && fail "--sync-bn with --model mlp accepted"
  grep -q "only --model cnn has it" err.txt || { cat err.txt; fail "--sync-bn with mlp: message"; }
  ;;
cnn_fashion_reload)
  # The preset on the full dataset, a few steps: the model file names fashion-mnist, so `mini_train
  # eval` needs nothing but --init and scores what training scored.
  [[ -d /usr/share/datasets/fashion-mnist ]] || { echo "SKIP: dataset-fashion-mnist not installed"; exit 77; }
  # --model cnn alone implies --dataset fashion-mnist and its preset (the config table says batch 64, adam).
  "$bin" --model cnn --max-steps 20 --eval --save f.safetensors >train.txt 2>err.txt ||
    { cat err.txt; fail "train"; }
  "$bin" eval --init f.safetensors >eval.txt 2>err.txt || { cat err.txt; fail "eval failed"; }
  grep -q "Fashion-MNIST" train.txt && grep -q "64 per device" train.txt && grep -q "adam lr=0.001, cosine" train.txt ||
    { cat train.txt; fail "--model cnn did not imply the Fashion-MNIST preset"; }
  [[ $(grep '^Test accuracy' train.txt) == $(cat eval.txt) ]] || { cat train.txt eval.txt; fail "reloaded CNN scored differently"; }
  awk '/^Test accuracy/ { exit !($NF >= 0.5) }' eval.txt || { cat eval.txt; fail "CNN did not learn in 20 steps"; }
  ;;
fashion_mnist_reload)
  [[ -d /usr/share/datasets/fashion-mnist ]] || { echo "SKIP: dataset-fashion-mnist not installed"; exit 77; }
  # The standardisation travels with the model: the reloaded model scores what training scored.
  "$bin" --dataset fashion-mnist --epochs 1 --eval -q --save f.safetensors >train.txt 2>err.txt || { cat err.txt; fail "train"; }
  "$bin" eval --init f.safetensors >eval.txt 2>err.txt || { cat err.txt; fail "eval failed"; }
  [[ $(grep '^Test accuracy' train.txt) == $(cat eval.txt) ]] || { cat train.txt eval.txt; fail "reloaded model scored differently"; }
  ;;
init_prefix)
  # PyTorch's names: a plain nn.Linear ("weight", "bias"), a module attribute ("net.weight"), in
  # float32 and in float16. The error says which --init-prefix maps them; with it they load.
  py=/usr/bin/python3
  [[ -x $py ]] || py=python3
  "$py" - <<'PY' || fail "could not write the test files"
import json, struct
def save(path, tensors, fmt, dtype):
    header, data = {}, b""
    for name, values in tensors.items():
        raw = struct.pack("<%d%s" % (len(values), fmt), *values)
        header[name] = {"dtype": dtype, "shape": [1, 10] if len(values) == 10 else [1], "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
w = [0.5 * i for i in range(10)]
save("linear.safetensors", {"weight": w, "bias": [0.25]}, "f", "F32")
save("net.safetensors", {"net.weight": w, "net.bias": [0.25]}, "f", "F32")
save("half.safetensors", {"weight": w, "bias": [0.25]}, "e", "F16")
PY
  expect_error "map the names with --init-prefix =0." --init linear.safetensors
  grep -q "load_state_dict" err.txt && fail "the CLI error names a C++ call"
  expect_error "map the names with --init-prefix net.=0." --init net.safetensors
  expect_error "--init-prefix 'net.': expected OLD=NEW" --init net.safetensors --init-prefix net.
  for f in linear half; do
    "$bin" --init $f.safetensors --init-prefix =0. --epochs 1 --lr 1e-9 --save $f-out.safetensors >out.txt 2>err.txt ||
      { cat err.txt; fail "--init $f.safetensors --init-prefix =0. failed"; }
    grep -q "^  init         $f.safetensors (names mapped by --init-prefix =0.)$" out.txt || { cat out.txt; fail "no init row"; }
  done
  "$bin" --init net.safetensors --init-prefix net.=0. --epochs 1 --lr 1e-9 -q --save net-out.safetensors >/dev/null ||
    fail "--init-prefix net.=0. failed"
  # The loaded weights are the file's (lr 1e-9 barely moves them), F16 ones exactly widened.
  "$py" - linear-out.safetensors half-out.safetensors net-out.safetensors <<'PY' || fail "weights not loaded"
import json, struct, sys
for path in sys.argv[1:]:
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    e = json.loads(raw[8:8 + n])["0.weight"]
    b, end = e["data_offsets"]
    w = struct.unpack("<10f", raw[8 + n + b:8 + n + end])
    assert all(abs(a - 0.5 * i) < 1e-5 for i, a in enumerate(w)), (path, w)
PY
  ;;
progress_bar)
  # In a terminal 50 columns wide: every redraw fits in 49 columns and shows the rate, ETA and
  # loss; --eval's scoring of the 40000 test rows has a bar of its own. Not in a file, and not under
  # mpirun even in a terminal.
  command -v script >/dev/null || { echo "SKIP: no script(1)"; exit 77; }
  flags="--epochs 2 --samples 200000 --eval --save $work/m.safetensors"
  COLUMNS=50 script -qec "stty cols 50 2>/dev/null; $bin $flags" /dev/null >tty.txt 2>&1 || { cat tty.txt; fail "run failed"; }
  grep -q $'\r' tty.txt || fail "no progress bar in a terminal"
  tr '\r' '\n' <tty.txt | grep 'ETA' >bars.txt
  [[ -s bars.txt ]] || { cat -A tty.txt | head; fail "no bar with an ETA"; }
  awk 'length($0) > 49 { bad = 1 } END { exit bad }' bars.txt || { cat bars.txt; fail "a bar is wider than the terminal"; }
  grep -Eq 'loss [0-9.]+ [0-9.]+[kM]?( samples)?/s ETA [0-9]+:[0-9][0-9]$' bars.txt || { cat bars.txt; fail "bar fields"; }
  grep -Eq '^Evaluating test .*40000/40000 [0-9.]+[kM]?( samples)?/s ETA [0-9]+:[0-9][0-9] *$' bars.txt ||
    { cat bars.txt; fail "no progress bar during evaluation"; }
  # shellcheck disable=SC2086
  "$bin" $flags >file.txt 2>&1 || fail "run failed"
  ! grep -q $'\r' file.txt || fail "carriage returns in a file"
  OMPI_COMM_WORLD_SIZE=1 script -qec "$bin $flags" /dev/null >mpi.txt 2>&1 || fail "run failed"
  ! grep -q 'ETA' mpi.txt || fail "a progress bar under mpirun"
  ;;
gpus_refused)
  # --gpus requests that cannot be met fail before anything starts, with one line each. Which of the
  # last two applies depends on the build and the machine: --env says how many GPUs are usable.
  expect_error "comma-separated list of GPU indices" --gpus 0,,1
  expect_error "comma-separated list of GPU indices" --gpus gpu0
  expect_error "GPU 1 is listed twice" --gpus 1,1
  expect_error "do not go together" --gpus 0 --nproc 2
  usable=$("$bin" --env | sed -n 's/^  CUDA backend *built; \([0-9]*\) usable.*/\1/p')
  if [[ -z $usable ]]; then
    expect_error "--gpus 0: this build has no CUDA backend" --gpus 0
  elif [[ $usable -eq 0 ]]; then
    expect_error "--gpus 0,1: no CUDA GPU is visible" --gpus 0,1
  else
    expect_error "GPU $usable does not exist; this machine has $usable" --gpus "$usable"
  fi
  ;;
nproc2_seed)
  # The seed job data-parallel on 2 processes (Gloo): rank 0 alone prints and saves; nothing is left
  # running afterwards (the --save path, unique to this temp folder, marks our processes).
  "$bin" --nproc 2 --backend gloo --epochs 2 --ddp-stats --save "$work/m2.safetensors" >out.txt 2>err.txt ||
    { cat out.txt err.txt; fail "--nproc 2 failed"; }
  [[ $(grep -c '^Epoch \[[1-2]/2\], Loss: [0-9.]*, [0-9]* samples/s$' out.txt) -eq 2 ]] || { cat out.txt; fail "expected 2 epoch lines"; }
  [[ $(grep -c '^mini_train$' out.txt) -eq 1 ]] || { cat out.txt; fail "expected one config table (rank 0's)"; }
  grep -q "cpu, 2 processes (gloo)" out.txt && grep -q "32 per device, 64 global" out.txt || { cat out.txt; fail "config table"; }
  grep -q '^DDP: 1 buckets, 44 bytes' out.txt && grep -q '^DDP: .*overlap' out.txt || { cat out.txt; fail "--ddp-stats"; }
  [[ -s m2.safetensors ]] || fail "m2.safetensors missing"
  sleep 0.2
  ! pgrep -f -- "$work/m2.safetensors" >/dev/null || fail "mini_train processes left running"
  ;;
worker_names)
  # Workers run this binary by its real path, so ps shows mini_train and its arguments, never
  # /proc/self/exe.
  "$bin" --nproc 2 --backend gloo --epochs 100000 --save "$work/w.safetensors" >out.txt 2>err.txt &
  pid=$!
  for _ in $(seq 100); do grep -q '^Epoch' out.txt && break; sleep 0.1; done
  ps -eo args | grep -F -- "--save $work/w.safetensors" | grep -v grep >ps.txt
  kill -INT "$pid"
  wait "$pid"
  [[ $(grep -c "^$bin " ps.txt) -eq 3 ]] || { cat ps.txt; fail "expected the launcher and 2 workers as $bin"; }
  ! grep -q "/proc/self/exe" ps.txt || { cat ps.txt; fail "workers show as /proc/self/exe"; }
  ;;
readme_mpirun)
  # Every 'mpirun' command line of the README works here as written (as root too, on 2 cores).
  mpi_leaks_are_not_ours
  command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 77; }
  readme=$(dirname "$0")/../../README.md
  grep -o '^\$ mpirun[^#]*' "$readme" | sed 's/^\$ //' >lines.txt
  [[ -s lines.txt ]] || fail "the README shows no mpirun line"
  while read -r line; do
    # shellcheck disable=SC2086
    timeout 120 ${line//build\/mini_train/$bin} --epochs 1 --save "$work/r.safetensors" >out.txt 2>&1 </dev/null || {
      grep -q "this build has no MPI" out.txt && { echo "SKIP: no MPI in this build"; exit 77; }
      cat out.txt; fail "README line failed: $line"
    }
    grep -q "(mpi" out.txt && [[ -s r.safetensors ]] || { cat out.txt; fail "README line did not train with MPI: $line"; }
  done <lines.txt
  ;;
nnodes2)
  # Two "machines" on loopback: two launchers, --nnodes 2 with one worker each, meet at node 0's
  # fixed port and train exactly like one launcher with --nproc 2 (same ranks, same shards, same
  # sums): byte-identical weights. fp16 and bf16 compression change the weights but still train.
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$bin" --nproc 1 --nnodes 2 --node-rank 1 --master-port "$port" --epochs 2 --save "$work/n.safetensors" -q \
    >node1.txt 2>&1 &
  node1=$!
  timeout 60 "$bin" --nproc 1 --nnodes 2 --node-rank 0 --master-port "$port" --epochs 2 --save "$work/n.safetensors" \
    >out.txt 2>&1 || { cat out.txt node1.txt; fail "node 0 failed"; }
  wait "$node1" || { cat node1.txt; fail "node 1 failed"; }
  grep -q "cpu, 2 processes on 2 nodes (gloo" out.txt || { cat out.txt; fail "config table"; }
  "$bin" --nproc 2 --backend gloo --epochs 2 --save "$work/one.safetensors" -q || fail "--nproc 2 failed"
  cmp -s n.safetensors one.safetensors || fail "2 nodes x 1 process trained differently from 1 node x 2"
  "$bin" --nproc 2 --backend gloo --epochs 2 --comm-hook fp16 --ddp-stats --save "$work/h.safetensors" >out.txt 2>&1 ||
    { cat out.txt; fail "--comm-hook fp16 failed"; }
  grep -q "comm hook fp16" out.txt && grep -q "(gloo, fp16 compression)" out.txt || { cat out.txt; fail "fp16 stats"; }
  ! cmp -s h.safetensors one.safetensors || fail "fp16 compression changed nothing"
  "$bin" --nproc 2 --backend gloo --epochs 2 --comm-hook bf16 --ddp-stats --save "$work/b.safetensors" >out.txt 2>&1 ||
    { cat out.txt; fail "--comm-hook bf16 failed"; }
  grep -q "comm hook bf16" out.txt && grep -q "(gloo, bf16 compression)" out.txt || { cat out.txt; fail "bf16 stats"; }
  ! cmp -s b.safetensors one.safetensors || fail "bf16 compression changed nothing"
  ! cmp -s b.safetensors h.safetensors || fail "bf16 compression trained exactly like fp16"
  "$bin" --nnodes 2 --node-rank 0 2>err.txt && fail "--nnodes without --master-port was accepted"
  grep -q "give --master-port" err.txt || { cat err.txt; fail "--nnodes error"; }
  ;;
nproc_mpi)
  # --backend mpi: the launcher starts the ranks through mpirun; the job trains exactly like the Gloo
  # one (two ranks sum the same two numbers either way), and a failing rank ends it at once.
  mpi_leaks_are_not_ours
  command -v mpirun >/dev/null || { echo "skipped: no mpirun"; exit 77; }
  "$bin" --nproc 2 --backend mpi --epochs 2 --save "$work/mpi.safetensors" >out.txt 2>err.txt || {
    grep -q "this build has no MPI" err.txt && { echo "skipped: no MPI in this build"; exit 77; }
    cat out.txt err.txt; fail "--backend mpi failed"
  }
  grep -q "cpu, 2 processes (mpi)" out.txt || { cat out.txt; fail "config table"; }
  # Each rank takes its share of the cores from mpirun's count of ranks on the machine, as under
  # mini_train's own launcher (it read the whole machine's cores before).
  share=$(( $(nproc) / 2 )); (( share >= 1 )) || share=1
  grep -q "^  threads  *$share per process" out.txt || { cat out.txt; fail "the MPI ranks do not share the cores"; }
  "$bin" --nproc 2 --backend gloo --epochs 2 --save "$work/gloo.safetensors" -q || fail "--backend gloo failed"
  cmp -s mpi.safetensors gloo.safetensors || fail "MPI and Gloo trained differently"
  "$bin" --nproc 2 --epochs 1 --save "$work/auto.safetensors" >out.txt 2>&1 || { cat out.txt; fail "--backend auto"; }
  grep -q "(mpi, chosen by --backend auto)" out.txt || { cat out.txt; fail "auto did not pick mpi"; }
  start=$SECONDS
  MT_TEST_FAIL_RANK=1 MT_TEST_FAIL_EPOCH=2 timeout 60 "$bin" --nproc 2 --backend mpi --epochs 5 \
    --save "$work/mf.safetensors" >out.txt 2>err.txt && fail "a failing MPI rank did not fail the job"
  (( SECONDS - start < 20 )) || fail "the MPI job took $((SECONDS - start)) s to end after a rank failed"
  grep -q "^mini_train: rank 1: MT_TEST_FAIL_RANK" err.txt && grep -q "^mini_train: the MPI job failed" err.txt ||
    { cat err.txt; fail "no lines naming the failure"; }
  sleep 0.3
  ! pgrep -f -- "$work/mf.safetensors" >/dev/null || fail "MPI ranks left running after a failure"
  [[ ! -e mf.safetensors ]] || fail "a failed job saved a model"
  ;;
nproc_failure)
  # Rank 1 exits with code 3 at the start of epoch 2 (the MT_TEST_FAIL_* test hook in train_epoch.cpp):
  # the launcher stops rank 0 and reports rank 1 in one line, quickly, and nothing is left running.
  start=$SECONDS
  MT_TEST_FAIL_RANK=1 MT_TEST_FAIL_EPOCH=2 timeout 60 "$bin" --nproc 2 --backend gloo --epochs 5 --save "$work/f.safetensors" \
    >out.txt 2>err.txt && fail "a failing rank did not fail the job"
  (( SECONDS - start < 20 )) || fail "the job took $((SECONDS - start)) s to end after a rank failed"
  grep -qx "mini_train: rank 1 exited with code 3" err.txt || { cat err.txt; fail "no line naming rank 1"; }
  # The hook's line and the launcher's, which comes last (it stops the workers, then speaks). Rank 0
  # may add one line of its own: its collective fails the moment rank 1's sockets close, and on a
  # loaded machine it can print before the launcher's SIGTERM reaches it (seen 1 run in ~15 under
  # ASan). The launcher's line still names rank 1, the cause.
  [[ $(grep "^mini_train: rank" err.txt | tail -1) == "mini_train: rank 1 exited with code 3" ]] ||
    { cat err.txt; fail "the launcher's line naming rank 1 is not the last"; }
  lines=$(grep -c "^mini_train: rank" err.txt)
  (( lines == 2 || (lines == 3 && $(grep -c "^mini_train: rank 0" err.txt) == 1) )) ||
    { cat err.txt; fail "expected the hook's line and the launcher's (and at most one of rank 0's)"; }
  sleep 0.2
  ! pgrep -f -- "$work/f.safetensors" >/dev/null || fail "processes left running after a failure"
  [[ ! -e f.safetensors ]] || fail "a failed job saved a model"
  # Ctrl-C (SIGINT to the launcher) stops every worker, and the launcher says what is saved.
  "$bin" --nproc 2 --epochs 100000 --save "$work/i.safetensors" >out.txt 2>err.txt &
  pid=$!
  for _ in $(seq 100); do grep -q '^Epoch' out.txt && break; sleep 0.1; done
  kill -INT "$pid"
  wait "$pid"
  rc=$?
  [[ $rc -eq 130 ]] || { cat err.txt; fail "SIGINT: launcher exit code $rc, expected 130"; }
  grep -qx "mini_train: interrupted (SIGINT), stopped the workers: nothing saved (no --checkpoint-dir)" err.txt ||
    { cat err.txt; fail "SIGINT: the launcher's line does not say what is saved"; }
  sleep 0.2
  ! pgrep -f -- "$work/i.safetensors" >/dev/null || fail "processes left running after SIGINT"
  ;;
nproc_resume)
  # Checkpoint with --nproc 2, stop, resume with --nproc 2 --resume auto: same bytes as an
  # uninterrupted --nproc 2 run (every rank loads the checkpoint; rank 0 wrote it).
  mpi_leaks_are_not_ours  # --backend auto: MPI when the build has it
  flags=(--nproc 2 --model mlp --hidden 16,8 --optimizer adam --samples 500 --quiet)
  "$bin" "${flags[@]}" --epochs 4 --checkpoint-dir a --save full.safetensors || fail "full run failed"
  "$bin" "${flags[@]}" --epochs 4 --stop-after 2 --checkpoint-dir b --save half.safetensors || fail "first half failed"
  [[ -e b/checkpoint-epoch-000002.safetensors && ! -e half.safetensors ]] || { ls b; fail "first half: files"; }
  "$bin" "${flags[@]}" --epochs 4 --checkpoint-dir b --resume auto --save resumed.safetensors || fail "resume failed"
  cmp full.safetensors resumed.safetensors || fail "resumed weights differ from the uninterrupted run"
  ;;
step_resume)
  # --checkpoint-every (Note [Mid-epoch resume] in apps/mini_train/checkpoint_step.h): a run killed
  # with SIGKILL at step 23, two steps after its step checkpoint of step 21 (16 steps per epoch: in
  # epoch 2), resumes mid-epoch and ends at the same bytes, and the same JSON log, as a run never
  # interrupted. Adam, a cosine schedule, shuffling and worker threads: every piece of state counts.
  flags=(--model mlp --hidden 16,8 --optimizer adam --schedule cosine --num-workers 2 --samples 500 --epochs 4 --quiet)
  "$bin" "${flags[@]}" --log-json a.jsonl --save full.safetensors || fail "full run failed"
  rc=0
  MT_TEST_KILL_STEP=23 "$bin" "${flags[@]}" --log-json b.jsonl --checkpoint-dir b --checkpoint-every 7 \
    --save x.safetensors 2>err.txt || rc=$?
  [[ $rc == 137 ]] || { cat err.txt; fail "the run to be killed exited with $rc, not 137 (SIGKILL)"; }
  # Note [Checkpoint names]: epoch 1's step checkpoints (7, 14) went when its epoch checkpoint came.
  [[ "$(ls b | tr '\n' ' ')" == "checkpoint-epoch-000001.safetensors checkpoint-epoch-000002-step-000000021.safetensors " ]] ||
    { ls b; fail "checkpoints after the kill"; }
  "$bin" "${flags[@]}" --log-json b.jsonl --checkpoint-dir b --checkpoint-every 7 --resume auto \
    --save resumed.safetensors >/dev/null 2>err.txt || { cat err.txt; fail "resume failed"; }
  cmp full.safetensors resumed.safetensors || fail "resumed mid-epoch, the weights differ from the uninterrupted run"
  drop_rates() { sed 's/"samples_per_s":[^,]*,"seconds":[^,]*,//' "$1"; }
  diff <(drop_rates a.jsonl) <(drop_rates b.jsonl) || fail "the resumed run's JSON log differs (losses, steps, lr)"
  # --keep 3: the newest epoch checkpoints; no step checkpoint is older than an epoch's.
  [[ "$(ls b | tr '\n' ' ')" == "checkpoint-epoch-000002.safetensors checkpoint-epoch-000003.safetensors checkpoint-epoch-000004.safetensors " ]] ||
    { ls b; fail "--keep after the resumed run"; }
  expect_error "needs a --checkpoint-dir" --checkpoint-every 5
  # A mid-epoch checkpoint of 2 processes does not resume on 1: the epoch's split depends on it.
  MT_TEST_KILL_STEP=5 MT_TEST_KILL_RANK=1 "$bin" --nproc 2 --backend gloo --samples 500 --checkpoint-dir w \
    --checkpoint-every 3 -q >/dev/null 2>&1 && fail "the --nproc 2 run was to be killed"
  expect_error "was taken mid-epoch (3 batches into epoch 1) by 2 processes, this run has 1" --samples 500 \
    --checkpoint-dir w --resume auto
  ;;
gpt_tiny)
  # A tiny GPT on a repetitive text: it trains (the loss falls), saves its shape in the metadata,
  # resumes bit-exact, and generates the same text for the same seed.
  for i in $(seq 40); do echo "the quick brown fox $i jumps over the lazy dog"; done >t.txt
  base=(--text t.txt --layers 1 --heads 2 --dim 16 --context 16 --batch-size 64 --lr 1e-2 --num-workers 2)
  flags=("${base[@]}" --max-steps 0)
  "$bin" "${flags[@]}" --epochs 3 --eval --log-json log.jsonl --checkpoint-dir a --save full.safetensors >out.txt 2>err.txt ||
    { cat err.txt; fail "gpt run failed"; }
  grep -q 'gpt:layers1-heads2-dim16-context16 (' out.txt || { cat out.txt; fail "config table: no gpt model line"; }
  grep -q 'weight_decay=0.1 (matrices only), 100 warm-up steps then cosine decay to 0.001, gradients clipped to norm 1$' \
    out.txt || { cat out.txt; fail "config table: not the gpt recipe"; }
  first=$(sed -n 's/^Epoch \[1\/3\], Loss: \([0-9.]*\).*/\1/p' out.txt)
  last=$(sed -n 's/^Epoch \[3\/3\], Loss: \([0-9.]*\).*/\1/p' out.txt)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1) }' || { cat out.txt; fail "loss did not fall: $first -> $last"; }
  grep -Eq '^Test loss: [0-9.]+ nats per byte \([0-9.]+ bits per byte\)$' out.txt || { cat out.txt; fail "--eval line"; }
  # The schedule: 27 steps per epoch, so after epoch 1 the warm-up is at 28/100 of --lr; a run of
  # 120 steps ends its cosine at lr/10.
  lr_of() { sed -n "$2"'s/.*"lr":\([0-9.e-]*\).*/\1/p' "$1"; }
  awk -v lr="$(lr_of log.jsonl 1)" 'BEGIN { exit !(lr > 0.0028 - 1e-9 && lr < 0.0028 + 1e-9) }' ||
    { cat log.jsonl; fail "warm-up: lr after 27 steps is not 0.28 * 1e-2"; }
  "$bin" "${base[@]}" --max-steps 120 --epochs 5 --quiet --log-json cos.jsonl --save cos.safetensors >/dev/null ||
    fail "120-step run failed"
  awk -v lr="$(lr_of cos.jsonl '$')" 'BEGIN { exit !(lr > 0.001 - 1e-9 && lr < 0.001 + 1e-9) }' ||
    { cat cos.jsonl; fail "cosine: lr after the last step is not 1e-2 / 10"; }
  "$bin" "${flags[@]}" --epochs 3 --stop-after 1 --checkpoint-dir b --quiet --save half.safetensors >/dev/null ||
    fail "first part"
  "$bin" "${flags[@]}" --epochs 3 --checkpoint-dir b --resume auto --quiet --save resumed.safetensors >/dev/null ||
    fail "resume"
  cmp full.safetensors resumed.safetensors || fail "resumed gpt weights differ from the uninterrupted run"
  grep -aq '"layers":"1"' full.safetensors && grep -aq '"context":"16"' full.safetensors ||
    fail "the model file's metadata lacks the gpt shape"
  # mini_train eval rebuilds the GPT from its metadata and scores it as training's --eval did.
  "$bin" eval --init full.safetensors >eval.txt || fail "mini_train eval of a gpt failed"
  [[ $(cat eval.txt) == "$(grep '^Test loss' out.txt)" ]] || { cat eval.txt out.txt; fail "eval differs from --eval"; }
  gen=(generate --init full.safetensors --prompt "the quick" --tokens 40)
  "$bin" "${gen[@]}" --seed 3 >g1.txt && "$bin" "${gen[@]}" --seed 3 >g2.txt && "$bin" "${gen[@]}" --seed 4 >g3.txt ||
    fail "generate failed"
  cmp g1.txt g2.txt || fail "generate with the same seed gave different text"
  ! cmp -s g1.txt g3.txt || fail "generate with another seed gave the same text"
  [[ $(head -c 9 g1.txt) == "the quick" && $(wc -c <g1.txt) -eq 50 ]] || fail "generate: not prompt + 40 bytes + newline"
  ;;
gpt_nproc2)
  # A tiny GPT data-parallel on 2 processes (its tied embedding reduced once): resumed, the same bytes.
  mpi_leaks_are_not_ours  # --backend auto: MPI when the build has it
  for i in $(seq 40); do echo "the quick brown fox $i jumps over the lazy dog"; done >t.txt
  flags=(--nproc 2 --text t.txt --layers 1 --heads 2 --dim 16 --context 16 --batch-size 32 --max-steps 0 --quiet)
  "$bin" "${flags[@]}" --epochs 2 --ddp-stats --checkpoint-dir a --save full.safetensors >out.txt 2>err.txt ||
    { cat err.txt; fail "full run failed"; }
  grep -q '^DDP: 1 buckets, [0-9]* bytes of gradients' out.txt || { cat out.txt; fail "--ddp-stats"; }
  "$bin" "${flags[@]}" --epochs 2 --stop-after 1 --checkpoint-dir b --save half.safetensors >/dev/null || fail "first half"
  "$bin" "${flags[@]}" --epochs 2 --checkpoint-dir b --resume auto --save resumed.safetensors >/dev/null || fail "resume"
  cmp full.safetensors resumed.safetensors || fail "resumed gpt weights differ from the uninterrupted --nproc 2 run"
  ;;
gpt_bad_input)
  for i in $(seq 40); do echo "the quick brown fox $i jumps over the lazy dog"; done >t.txt
  tiny=(--layers 1 --dim 16 --context 16 --max-steps 3)
  expect_error "--heads 3 does not divide --dim 16" --text t.txt "${tiny[@]}" --heads 3
  head -c 20 t.txt >short.txt
  expect_error "short.txt: 20 bytes is shorter than two windows of context + 1 = 17" --text short.txt "${tiny[@]}"
  expect_error "--layers applies to --model gpt" --model mlp --layers 2
  expect_error "--model gpt trains on --dataset text" --model gpt --dataset synthetic
  "$bin" -q --save mlp.safetensors >/dev/null || fail "linear run failed"
  expect_error "not a GPT" generate --init mlp.safetensors --prompt "x"
  "$bin" --text t.txt "${tiny[@]}" -q --save g.safetensors >/dev/null || fail "gpt run failed"
  expect_error "--prompt is 17 bytes, more than the model's context of 16 bytes" \
    generate --init g.safetensors --prompt "0123456789abcdefg"
  expect_error "--prompt was given an empty value" generate --init g.safetensors --prompt ""
  ;;
max_steps_clip_grad)
  # --max-steps ends training mid-epoch (32 steps per epoch here), for any model, and a resumed
  # run that has them all does nothing more.
  "$bin" --max-steps 40 --schedule cosine --log-json l.jsonl --checkpoint-dir ck --save m.safetensors >out.txt 2>err.txt ||
    { cat err.txt; fail "--max-steps run failed"; }
  [[ $(wc -l <l.jsonl) -eq 2 ]] && grep -q '"step":40' l.jsonl || { cat l.jsonl; fail "expected 2 epochs, 40 steps"; }
  grep -q '^saved m.safetensors (40 steps, ' out.txt || { cat out.txt; fail "summary does not count steps"; }
  "$bin" --max-steps 40 --schedule cosine --checkpoint-dir ck --resume auto --save m.safetensors >out.txt ||
    fail "resume failed"
  grep -q 'nothing to train: the checkpoint already has 40 of --max-steps 40 steps' out.txt || { cat out.txt; fail "resume"; }
  # A schedule spans --max-steps: resuming with another is refused, as another --batch-size is.
  expect_error "the checkpoint's learning-rate schedule spans --max-steps 40, this run asks for 80" \
    --max-steps 80 --schedule cosine --checkpoint-dir ck --resume auto
  # SGD at lr 1.5 diverges on the synthetic regression; clipped to norm 1, each step is bounded.
  expect_error "the loss is inf" --lr 1.5
  "$bin" -q --lr 1.5 --clip-grad 1 --save c.safetensors >/dev/null || fail "--clip-grad did not keep the run finite"
  expect_error "--clip-grad must be >= 0" --clip-grad -1
  ;;
env)
  "$bin" --env >out.txt 2>err.txt || fail "--env failed"
  for row in GPUs "CUDA backend" NCCL Gloo MPI threads; do
    grep -q "^  $row " out.txt || { cat out.txt; fail "--env: no $row row"; }
  done
  # The intra-op thread count (tensor/parallel.h): --threads, else MT_NUM_THREADS; shown by --env
  # and the config table; a malformed value is one error line.
  "$bin" --threads 3 --env | grep -q "^  threads  *3 per process" || fail "--env does not show --threads 3"
  # The GEMM library of this build (Note [Which GEMM]), and MT_GEMM's choice where OpenBLAS is linked.
  "$bin" --env | grep -Eq "GEMM runs on them in blocks \((Eigen|OpenBLAS), single-threaded\)" ||
    fail "--env does not name the GEMM library"
  MT_GEMM=eigen "$bin" --env | grep -q "GEMM runs on them in blocks (Eigen, single-threaded)" ||
    fail "--env does not show MT_GEMM=eigen"
  if MT_GEMM=openblas "$bin" --env >out.txt 2>err.txt; then
    grep -q "GEMM runs on them in blocks (OpenBLAS, single-threaded)" out.txt || fail "--env does not show MT_GEMM=openblas"
  else
    grep -q "MT_GEMM=openblas, but this build has no OpenBLAS" err.txt || { cat err.txt; fail "MT_GEMM=openblas: wrong error"; }
  fi
  MT_GEMM=blas expect_error "MT_GEMM must be eigen or openblas, got 'blas'" --epochs 1
  MT_NUM_THREADS=2 "$bin" --env | grep -q "^  threads  *2 per process" || fail "--env does not show MT_NUM_THREADS=2"
  MT_NUM_THREADS=2 "$bin" --epochs 1 --threads 3 >out.txt || fail "training with --threads 3 failed"
  grep -q "^  threads  *3 per process" out.txt || { cat out.txt; fail "the config table does not show --threads 3"; }
  rm -f final_model.safetensors
  expect_error "--threads must be a whole number of threads in 1..1024, got '0'" --threads 0
  expect_error "--threads must be a whole number of threads in 1..1024, got 'two'" --threads two
  MT_NUM_THREADS=lots expect_error "MT_NUM_THREADS must be a whole number of threads in 1..1024, got 'lots'" --epochs 1
  # The idle spin (Note [Spin, then sleep]): MT_SPIN_US, shown by --env, read with or without --threads.
  "$bin" --env | grep -q "spins 50 µs before it sleeps" || fail "--env does not show the default spin"
  MT_SPIN_US=0 "$bin" --threads 2 --env | grep -q "spins 0 µs before it sleeps" || fail "--env ignores MT_SPIN_US=0"
  OMP_WAIT_POLICY=passive "$bin" --env | grep -q "spins 0 µs" || fail "--env ignores OMP_WAIT_POLICY=passive"
  MT_SPIN_US=fast expect_error "MT_SPIN_US must be a whole number of microseconds in 0..1000000, got 'fast'" --epochs 1
  MT_SPIN_US=-1 expect_error "MT_SPIN_US must be a whole number of microseconds in 0..1000000, got '-1'" --epochs 1 --threads 2
  ;;
zero_nproc2 | zero2_nproc2 | zero3_nproc2)
  # --zero 1 (ZeRO-1), --zero 2 (ZeRO-2) or --zero 3 (fully sharded) on 2 processes: the losses of
  # plain DDP; stopped and resumed, the bytes of an uninterrupted run; its checkpoint carried on by 3
  # processes; clipping over the shards (the GPT preset clips, and ties its head to its embedding);
  # refused in a one-process run.
  stage=1
  [[ $case_name == zero2_nproc2 ]] && stage=2
  [[ $case_name == zero3_nproc2 ]] && stage=3
  flags=(--model mlp --hidden 16,8 --optimizer adam --samples 300 --backend gloo --epochs 3)
  losses() { sed -n 's/^\(Epoch .*Loss: [0-9.]*\),.*/\1/p'; }
  "$bin" "${flags[@]}" --nproc 2 --save plain.safetensors >plain.txt || fail "plain DDP failed"
  "$bin" "${flags[@]}" --nproc 2 --zero $stage --checkpoint-dir a --save full.safetensors >zero.txt ||
    fail "--zero $stage failed"
  grep -q "ZeRO-$stage: .*optimizer state" zero.txt || { cat zero.txt; fail "the config table does not say ZeRO-$stage"; }
  [[ -n $(losses <zero.txt) && $(losses <zero.txt) == "$(losses <plain.txt)" ]] ||
    { losses <plain.txt; losses <zero.txt; fail "--zero $stage losses differ from plain DDP's"; }
  "$bin" "${flags[@]}" --nproc 2 --zero $stage --stop-after 2 --checkpoint-dir b --save half.safetensors >/dev/null ||
    fail "first half"
  "$bin" "${flags[@]}" --nproc 2 --zero $stage --checkpoint-dir b --resume auto --save resumed.safetensors >/dev/null ||
    fail "resume"
  cmp full.safetensors resumed.safetensors || fail "resumed --zero $stage weights differ from the uninterrupted run"
  "$bin" "${flags[@]}" --nproc 3 --zero $stage --resume b/checkpoint-epoch-000002.safetensors --quiet \
    --save three.safetensors >/dev/null || fail "the 2-process ZeRO checkpoint does not carry on at 3 processes"
  if [[ $stage == 3 ]]; then
    # Sharded by default: each rank's shard holds its pieces of the weights (nothing gathered to
    # save them) and of the optimizer state; the index says stage 3.
    /usr/bin/python3 - <<'PY' || fail "the --zero 3 checkpoint is not sharded by rank"
import json, struct
raw = open("b/checkpoint-epoch-000002.safetensors", "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
meta = json.loads(raw[8:8 + n])["__metadata__"]
assert meta["format"] == "minitrain-sharded-checkpoint-1" and meta["world"] == "2" and meta["stage"] == "3", meta
for r in ("00000", "00001"):
    names = {l.split()[0] for l in meta["shard." + r].splitlines()}
    assert any(x.startswith("model/") for x in names) and any(x.startswith("optimizer/state.") for x in names), (r, names)
PY
    # Carried on at 3 processes, the 2-process shards give what plain DDP resumed from them gives, to
    # float tolerance (the reduce-scatters sum in another order than the all-reduce).
    "$bin" "${flags[@]}" --nproc 3 --resume b/checkpoint-epoch-000002.safetensors --quiet \
      --save three_plain.safetensors >/dev/null || fail "plain DDP does not carry on from the --zero 3 shards"
    same_tensors three.safetensors three_plain.safetensors 1e-5 ||
      fail "resumed at 3 processes, --zero 3 differs from plain DDP"
    # --checkpoint-format single: the same training, and the file that consolidate makes of the shards.
    "$bin" "${flags[@]}" --nproc 2 --zero 3 --checkpoint-format single --checkpoint-dir s --save single.safetensors \
      >/dev/null || fail "--zero 3 --checkpoint-format single failed"
    cmp full.safetensors single.safetensors || fail "the checkpoint format changed the --zero 3 training"
    [[ ! -e s/checkpoint-epoch-000003.shards ]] || fail "--checkpoint-format single wrote shards"
    "$bin" consolidate a -o c.safetensors >/dev/null || fail "consolidate of --zero 3 shards failed"
    same_tensors c.safetensors s/checkpoint-epoch-000003.safetensors 0 ||
      fail "consolidated --zero 3 shards differ from the single file"
    "$bin" eval --init full.safetensors >want.txt || fail "eval of --save's model"
    "$bin" eval --init a/checkpoint-epoch-000003.safetensors >got.txt || fail "eval of the --zero 3 shards failed"
    cmp want.txt got.txt || { cat want.txt got.txt; fail "eval of the --zero 3 shards differs from --save's model"; }
  fi
  for i in $(seq 40); do echo "the quick brown fox $i jumps over the lazy dog"; done >t.txt
  "$bin" --nproc 2 --backend gloo --zero $stage --text t.txt --layers 1 --heads 2 --dim 16 --context 16 --batch-size 16 \
    --max-steps 3 --quiet --ddp-stats --save gpt.safetensors >gpt.txt ||
    fail "--zero $stage with the GPT preset (--clip-grad 1) failed"
  grep -q "^memory: peak .* MiB of CPU tensors on rank 0" gpt.txt || { cat gpt.txt; fail "--ddp-stats shows no peak memory"; }
  if [[ $stage == 3 ]]; then  # --accumulate: the micro-batches before the last run under no_sync
    "$bin" "${flags[@]}" --nproc 2 --accumulate 2 --save acc0.safetensors >acc0.txt || fail "plain --accumulate 2 failed"
    "$bin" "${flags[@]}" --nproc 2 --accumulate 2 --zero 3 --save acc3.safetensors >acc3.txt || fail "--accumulate 2 failed"
    [[ -n $(losses <acc3.txt) && $(losses <acc3.txt) == "$(losses <acc0.txt)" ]] ||
      { losses <acc0.txt; losses <acc3.txt; fail "--zero 3 --accumulate 2 losses differ from plain DDP's"; }
  fi
  if [[ $stage == 3 ]]; then  # a unit per block, the root; every all-gather and reduce-scatter counted
    grep -q "^fsdp: 2 units, .* all-gathers, 6 reduce-scatters; waited .* ms" gpt.txt ||
      { cat gpt.txt; fail "--ddp-stats does not show FSDP's collectives"; }
    "$bin" --nproc 2 --backend gloo --zero 3 --text t.txt --layers 1 --heads 2 --dim 16 --context 16 --batch-size 16 \
      --max-steps 2 --quiet --trace gpt-trace.json --save gpt-t.safetensors >/dev/null || fail "--zero 3 --trace failed"
    for span in "all-gather unit 0" "reduce-scatter unit 0" "all-gather unit 1 done" "fsdp unit 1"; do
      grep -q "\"$span\"" gpt-trace.json || fail "the trace has no \"$span\" (Note [FSDP on the trace])"
    done
  fi
  expect_error "this run is one process" --zero $stage --epochs 1
  ;;
zero_sharded)
  # --zero 2 on 2 processes writes sharded checkpoints (Note [Sharded checkpoints]): a shard per rank
  # and an index. Training is that of --checkpoint-format single; a stopped run resumes to the same
  # bytes; a 2-process checkpoint carries on at 3 processes exactly as its single-file twin does;
  # consolidate gives back the single-file checkpoint byte for byte, and the model that eval and
  # predict use directly; a missing or damaged shard is one line, and --resume auto falls back.
  flags=(--model mlp --hidden 16,8 --optimizer adam --samples 300 --backend gloo --epochs 3)
  "$bin" "${flags[@]}" --nproc 2 --zero 2 --checkpoint-dir a --save full.safetensors >/dev/null || fail "--zero 2 failed"
  for f in a/checkpoint-epoch-000003.safetensors a/checkpoint-epoch-000003.shards/shard-0000{0,1}-of-00002.safetensors; do
    [[ -f $f ]] || { ls -R a; fail "no $f"; }
  done
  /usr/bin/python3 - <<'PY' || fail "the index is not a sharded checkpoint's"
import json, struct
raw = open("a/checkpoint-epoch-000003.safetensors", "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
meta = header.pop("__metadata__")
assert header == {}, header  # no tensors of its own
assert meta["format"] == "minitrain-sharded-checkpoint-1" and meta["world"] == "2" and meta["stage"] == "2", meta
assert meta["shards"] == "checkpoint-epoch-000003.shards" and meta["epoch"] == "3", meta
lines = [l.split() for r in ("00000", "00001") for l in meta["shard." + r].splitlines()]
names = {l[0] for l in lines}
assert "model/0.weight" in names and "optimizer/state.0.exp_avg" in names, sorted(names)
PY
  "$bin" "${flags[@]}" --nproc 2 --zero 2 --checkpoint-format single --checkpoint-dir s --save single.safetensors \
    >/dev/null || fail "--checkpoint-format single failed"
  cmp full.safetensors single.safetensors || fail "the checkpoint format changed the training"
  [[ ! -e s/checkpoint-epoch-000003.shards ]] || fail "--checkpoint-format single wrote shards"
  # Stopped after 2 epochs and resumed: the bytes of the uninterrupted run.
  "$bin" "${flags[@]}" --nproc 2 --zero 2 --stop-after 2 --checkpoint-dir b --save half.safetensors >/dev/null ||
    fail "first half"
  cp -r b b2
  mkdir b/checkpoint-epoch-000001-step-000000009.shards  # a save cut short before its index: pruned
  "$bin" "${flags[@]}" --nproc 2 --zero 2 --checkpoint-dir b --resume auto --save resumed.safetensors >/dev/null ||
    fail "resume"
  [[ ! -e b/checkpoint-epoch-000001-step-000000009.shards ]] || fail "shards without an index were not pruned"
  cmp full.safetensors resumed.safetensors || fail "resumed from shards, the weights differ from the uninterrupted run"
  # At 3 processes, from the 2-process shards: what the single file of the same state gives.
  "$bin" "${flags[@]}" --nproc 3 --zero 2 --resume b/checkpoint-epoch-000002.safetensors --quiet \
    --save three.safetensors >/dev/null || fail "the 2-process shards do not carry on at 3 processes"
  "$bin" "${flags[@]}" --nproc 3 --zero 2 --resume s/checkpoint-epoch-000002.safetensors --quiet \
    --save three_single.safetensors >/dev/null || fail "the single file does not carry on at 3 processes"
  cmp three.safetensors three_single.safetensors || fail "resharded at 3 processes, the shards differ from the single file"
  # consolidate: the single-file checkpoint, byte for byte; the model, which eval scores as --save's.
  "$bin" consolidate a -o c.safetensors >out.txt || { cat out.txt; fail "consolidate failed"; }
  grep -q "^wrote c.safetensors: the single-file checkpoint of a/checkpoint-epoch-000003.safetensors (epoch 3" out.txt ||
    { cat out.txt; fail "consolidate's line"; }
  cmp c.safetensors s/checkpoint-epoch-000003.safetensors || fail "consolidated shards differ from the single file"
  "$bin" consolidate a/checkpoint-epoch-000003.shards --as model -o m.safetensors >/dev/null || fail "consolidate --as model"
  "$bin" eval --init full.safetensors >want.txt || fail "eval of --save's model"
  for model in m.safetensors a/checkpoint-epoch-000003.safetensors c.safetensors; do
    "$bin" eval --init $model >got.txt || fail "eval --init $model failed"
    cmp want.txt got.txt || { cat want.txt got.txt; fail "eval --init $model differs from --save's model"; }
  done
  /usr/bin/python3 -c "import numpy as np; np.save('x.npy', np.random.default_rng(0).standard_normal((5, 10)).astype(np.float32))"
  "$bin" predict --init full.safetensors --inputs x.npy --output want.npy >/dev/null || fail "predict with --save's model"
  "$bin" predict --init a/checkpoint-epoch-000003.safetensors --inputs x.npy --output got.npy >/dev/null ||
    fail "predict from the sharded checkpoint"
  cmp want.npy got.npy || fail "predict from the sharded checkpoint differs"
  # generate continues a prompt from a GPT's sharded checkpoint as from its model file.
  for i in $(seq 40); do echo "the quick brown fox $i jumps over the lazy dog"; done >t.txt
  "$bin" --nproc 2 --backend gloo --zero 2 --text t.txt --layers 1 --heads 2 --dim 16 --context 16 --batch-size 16 \
    --epochs 1 --quiet --checkpoint-dir g --save gpt.safetensors >/dev/null || fail "the GPT under --zero 2 failed"
  "$bin" generate --init gpt.safetensors --prompt "the " --tokens 20 --temperature 0 >want.txt || fail "generate"
  "$bin" generate --init g/checkpoint-epoch-000001.safetensors --prompt "the " --tokens 20 --temperature 0 >got.txt ||
    fail "generate from the sharded checkpoint"
  cmp want.txt got.txt || { cat want.txt got.txt; fail "generate from the sharded checkpoint differs"; }
  # Bad shards: one line naming the shard; --resume auto resumes from the newest checkpoint that loads.
  rm b2/checkpoint-epoch-000002.shards/shard-00001-of-00002.safetensors
  expect_error "checkpoint-epoch-000002.shards/shard-00001-of-00002.safetensors is missing" consolidate b2 -o x.safetensors
  [[ ! -e x.safetensors ]] || fail "consolidate wrote a file from a checkpoint with a missing shard"
  "$bin" "${flags[@]}" --nproc 2 --zero 2 --checkpoint-dir b2 --resume auto --save fell_back.safetensors \
    >/dev/null 2>err.txt || { cat err.txt; fail "--resume auto with a missing shard"; }
  grep -q "resuming from b2/checkpoint-epoch-000001.safetensors, the newest checkpoint that loads; skipped .*is missing" \
    err.txt || { cat err.txt; fail "--resume auto does not say it fell back"; }
  cmp full.safetensors fell_back.safetensors || fail "resumed from epoch 1, the weights differ from the uninterrupted run"
  flip_tensor_bit a/checkpoint-epoch-000003.shards/shard-00001-of-00002.safetensors "optimizer/state.0.exp_avg@0"
  expect_error "shard-00001-of-00002.safetensors: tensor 'optimizer/state.0.exp_avg@0' fails its checksum" \
    eval --init a/checkpoint-epoch-000003.safetensors
  expect_error "--checkpoint-format sharded writes each rank's shard of the state of --zero 1|2|3 (this run: --zero 0)" --checkpoint-format sharded --checkpoint-dir d --epochs 1
  expect_error "--checkpoint-format chooses how the checkpoints of --checkpoint-dir are written" --checkpoint-format single
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
echo "ok: $case_name"
