#!/usr/bin/env bash
# mini_train under torchrun as it is (no --standalone): torchrun's agent hosts a PyTorch TCPStore at
# MASTER_PORT and sets TORCHELASTIC_USE_AGENT_STORE=True, and the workers join that store (Note
# [torchrun's agent store] in distributed/process_group/init_process_group.cpp). The job must train exactly like mini_train's own
# launcher: the same final weights, bit for bit. torchrun is Debian's python3-torch's, through
# scripts/torchrun.sh (its Python 3.11 fix).
#   torchrun.sh MINI_TRAIN        (MT_TEST_PYTHON: the interpreter with torch, default /usr/bin/python3;
#                                  exit 77: skipped without torch)
set -euo pipefail
bin=$(realpath "$1")
python=${MT_TEST_PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if ! "$python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)" 2>/dev/null; then
  echo "skipped: no torch for $python (Debian: apt install python3-torch)"; exit 77
fi
work=$(mktemp -d /tmp/minitrain-torchrun.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
job=(--backend gloo --epochs 3 --seed 5 -q)
port=$(( 20000 + RANDOM % 20000 ))
MT_TORCHRUN_PYTHON=$python timeout 120 "$here/../../scripts/torchrun.sh" --nproc_per_node 2 --master_port "$port" --no_python "$bin" "${job[@]}" \
  --save torchrun.safetensors >torchrun.log 2>&1 || { cat torchrun.log; echo "torchrun.sh: the torchrun job failed"; exit 1; }
"$bin" --nproc 2 "${job[@]}" --save launcher.safetensors >launcher.log 2>&1 ||
  { cat launcher.log; echo "torchrun.sh: the --nproc 2 job failed"; exit 1; }
cmp torchrun.safetensors launcher.safetensors || { echo "torchrun.sh: torchrun's weights differ from --nproc 2's"; exit 1; }
echo "torchrun.sh: torchrun --nproc_per_node 2 (agent store) trained the same weights as --nproc 2"
