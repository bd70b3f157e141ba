#!/usr/bin/env bash
# End-to-end tests of the mini_train program: the seed job, presets, exact resume, files written
# atomically, and bad input refused with one line. Usage: mini_train_test.sh MINI_TRAIN CASE
# (tests/CMakeLists.txt registers one CTest test per case). Each case runs in a fresh temp folder.
set -uo pipefail
bin=$1
case_name=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }
# In sanitizer builds: OpenMPI's own allocations still held at exit (its dlopen'ed components) are
# reported by LeakSanitizer as leaks of the rank; they are not ours, and their stacks name no module
# a suppression could match. Leak checks go off for MPI ranks; AddressSanitizer's checks stay on.
mpi_leaks_are_not_ours() { export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"; }

# Runs mini_train expecting failure: exactly one line on stderr containing $1, non-zero exit.
expect_error() {
  local want=$1
  shift
  "$bin" "$@" >out.txt 2>err.txt && fail "mini_train $* succeeded; expected an error with '$want'"
  [[ $(wc -l <err.txt) -eq 1 ]] || { cat err.txt >&2; fail "mini_train $*: expected one error line"; }
  grep -qF -- "$want" err.txt || { cat err.txt >&2; fail "mini_train $*: error does not mention '$want'"; }
  [[ ! -e final_model.safetensors ]] || fail "mini_train $*: left a model file behind after an error"
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
  "$bin" --quiet --eval --log-json log.jsonl --epochs 3 --save m.safetensors >out.txt 2>err.txt || fail "run failed"
  [[ $(wc -l <out.txt) -eq 1 ]] && grep -q '^Test loss: ' out.txt || { cat out.txt; fail "--quiet --eval prints one line"; }
  [[ $(wc -l <log.jsonl) -eq 3 ]] || fail "expected 3 JSON lines"
  grep -q '"epoch":3' log.jsonl && grep -q '"samples_per_s"' log.jsonl || fail "JSON lines lack fields"
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
  fi
  # --keep 3 by default: epochs 2..4 remain.
  [[ $(ls a | wc -l) -eq 3 && ! -e a/checkpoint-epoch-000001.safetensors ]] || { ls a; fail "--keep did not prune"; }
  ;;
kill_during_checkpoints)
  # kill -9 the trainer at arbitrary moments while it writes checkpoints: whatever checkpoints are
  # left must load. The model is big and the epochs tiny, so most of the time goes into writing
  # (6 MB per checkpoint) and most kills land mid-write.
  flags=(--model mlp --hidden 1024,1024 --features 512 --samples 64 --checkpoint-dir ck --keep 2 --quiet)
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
  # Option errors come from CLI11 with its own exit code.
  "$bin" --model transformer >/dev/null 2>err.txt && fail "unknown model accepted"
  grep -q "model" err.txt || fail "unknown model: no message"
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
nnodes2)
  # Two "machines" on loopback: two launchers, --nnodes 2 with one worker each, meet at node 0's
  # fixed port and train exactly like one launcher with --nproc 2 (same ranks, same shards, same
  # sums): byte-identical weights. fp16 compression changes the weights but still trains.
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
  # Rank 1 exits with code 3 at the start of epoch 2 (the MT_TEST_FAIL_* test hook in trainer.cpp):
  # the launcher stops rank 0 and reports rank 1 in one line, quickly, and nothing is left running.
  start=$SECONDS
  MT_TEST_FAIL_RANK=1 MT_TEST_FAIL_EPOCH=2 timeout 60 "$bin" --nproc 2 --backend gloo --epochs 5 --save "$work/f.safetensors" \
    >out.txt 2>err.txt && fail "a failing rank did not fail the job"
  (( SECONDS - start < 20 )) || fail "the job took $((SECONDS - start)) s to end after a rank failed"
  grep -qx "mini_train: rank 1 exited with code 3" err.txt || { cat err.txt; fail "no line naming rank 1"; }
  [[ $(grep -c "^mini_train: rank" err.txt) -eq 2 ]] || { cat err.txt; fail "expected the hook's line and the launcher's"; }
  sleep 0.2
  ! pgrep -f -- "$work/f.safetensors" >/dev/null || fail "processes left running after a failure"
  [[ ! -e f.safetensors ]] || fail "a failed job saved a model"
  # Ctrl-C (SIGINT to the launcher) stops every worker.
  "$bin" --nproc 2 --epochs 100000 --save "$work/i.safetensors" >out.txt 2>err.txt &
  pid=$!
  for _ in $(seq 100); do grep -q '^Epoch' out.txt && break; sleep 0.1; done
  kill -INT "$pid"
  wait "$pid"
  rc=$?
  [[ $rc -eq 130 ]] || { cat err.txt; fail "SIGINT: launcher exit code $rc, expected 130"; }
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
env)
  "$bin" --env >out.txt 2>err.txt || fail "--env failed"
  for row in GPUs "CUDA backend" NCCL Gloo MPI; do
    grep -q "^  $row " out.txt || { cat out.txt; fail "--env: no $row row"; }
  done
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
echo "ok: $case_name"
