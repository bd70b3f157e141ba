#!/usr/bin/env bash
# mini_train --trace end to end: a 2-rank run of a multi-bucket MLP, 2 steps, checked against the
# trace-event format's rules (check_trace.py), then drawn by scripts/trace_to_svg.py and the SVG
# parsed (one lane per rank, a bucket row each). Also a world of one, and a bad --trace-steps.
# Usage: trace_test.sh MINI_TRAIN PYTHON
set -uo pipefail
bin=$1
py=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

# 256 -> 1024 -> 256 -> 1: 2 MiB of gradients, so that --bucket-cap-mb 0.25 makes several buckets.
"$bin" --nproc 2 --backend gloo --model mlp --features 256 --hidden 1024,256 --samples 128 --epochs 1 \
  --max-steps 2 --bucket-cap-mb 0.25 --checkpoint-dir ckpt --trace t.json --trace-steps 1:2 \
  --save "$work/m.safetensors" >out.txt 2>err.txt || { cat out.txt err.txt; fail "--nproc 2 --trace failed"; }
grep -q '^trace: steps 1:2 of every rank in t.json' out.txt || { cat out.txt; fail "no trace line"; }
"$py" "$here/check_trace.py" t.json 2 data step forward backward optimizer "AccumulateGrad 0.weight" \
  "AccumulateGrad 4.bias" "allreduce bucket 0" "allreduce bucket 2" "DDP finalize wait" bucket ||
  fail "the 2-rank trace breaks the format's rules"
grep -q '"name":"checkpoint"' t.json || fail "no checkpoint span (rank 0 checkpoints after step 2)"
"$py" "$here/../../scripts/trace_to_svg.py" t.json -o t.svg || fail "trace_to_svg.py failed"
"$py" - t.svg <<'PY' || fail "the SVG"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
lanes = [g for g in root.iter(ns + "g") if g.get("class") == "rank"]
assert [g.get("id") for g in lanes] == ["rank-0", "rank-1"], [g.get("id") for g in lanes]
for g in lanes:
    texts = [t.text for t in g.iter(ns + "text")]
    assert sum(1 for t in texts if t.startswith("bucket ")) >= 3, texts
print("svg: ok,", len(lanes), "lanes")
PY

# A world of one: one process, no buckets.
"$bin" --epochs 1 --trace one.json --trace-steps 2:3 --save "$work/one.safetensors" >out1.txt 2>err1.txt ||
  { cat out1.txt err1.txt; fail "--trace on one process failed"; }
"$py" "$here/check_trace.py" one.json 1 data step forward backward optimizer "AccumulateGrad 0.weight" ||
  fail "the 1-rank trace"
grep -q '"step":1\b' one.json && fail "step 1 was recorded outside --trace-steps 2:3"

# A bad range is one line naming the flag.
"$bin" --trace x.json --trace-steps 3:2 >out2.txt 2>err2.txt && fail "--trace-steps 3:2 was accepted"
[[ $(wc -l <err2.txt) -eq 1 ]] && grep -q -- "--trace-steps 3:2" err2.txt || { cat err2.txt; fail "--trace-steps error"; }
[[ ! -e x.json ]] || fail "a refused run wrote a trace"
# A --trace that cannot be written fails before training, naming the flag.
"$bin" --trace no/such/dir/t.json >out3.txt 2>err3.txt && fail "--trace into a missing folder was accepted"
[[ $(wc -l <err3.txt) -eq 1 ]] && grep -q -- "--trace no/such/dir/t.json: the folder no/such/dir does not exist" err3.txt ||
  { cat err3.txt; fail "--trace error"; }
grep -q '^Epoch' out3.txt && fail "the run trained before refusing its --trace path"
# scripts/trace_to_svg.py on bad input: one line naming the problem, a non-zero exit, no traceback.
svg_error() {
  local want=$1
  shift
  "$py" "$here/../../scripts/trace_to_svg.py" "$@" >svg_out.txt 2>svg_err.txt && fail "trace_to_svg.py $* succeeded"
  [[ $(wc -l <svg_err.txt) -eq 1 ]] && grep -qF -- "$want" svg_err.txt && ! grep -q Traceback svg_err.txt ||
    { cat svg_err.txt; fail "trace_to_svg.py $*: expected one line with '$want'"; }
}
svg_error "trace_to_svg: missing.json: No such file or directory" missing.json -o s.svg
printf '{"traceEvents": [' >cut.json
svg_error "trace_to_svg: cut.json: not JSON" cut.json -o s.svg
echo '[1, 2]' >list.json
svg_error 'list.json: no "traceEvents" list, so not a Chrome trace' list.json -o s.svg
echo '{"traceEvents": [{"ph": "X", "name": "step", "tid": 0}]}' >odd.json
svg_error "odd.json: an event is not what mini_train --trace writes (KeyError: 'args')" odd.json -o s.svg
svg_error "step 9 is not in the trace on every rank; it has [1, 2]" t.json -o s.svg --step 9
# A FIFO of our own stands for any path that is not a regular file; no system path is offered,
# so a broken refusal cannot replace one.
mkfifo fifo
svg_error "fifo: not a regular file" t.json -o fifo
svg_error "no/such/dir/s.svg: No such file or directory" t.json -o no/such/dir/s.svg
svg_error "trace_to_svg: the following arguments are required: -o/--output" t.json
[[ ! -e s.svg ]] || fail "trace_to_svg.py wrote an SVG after an error"
echo "trace_test: ok"
