#!/usr/bin/env bash
# The README's first command: install what is missing, build, run the main job (mini_train).
# Arguments go to mini_train: scripts/run.sh --dataset fashion-mnist --eval
# It builds only mini_train and what it links (scripts/test.sh builds everything), and the CUDA
# backend only where nvidia-smi lists a GPU: the kernels are a third of a cold build's CPU time and
# run nowhere else. (A build folder configured otherwise before keeps its setting.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cuda=OFF
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then cuda=AUTO; fi
cuda_option=()
[[ -f build/CMakeCache.txt ]] || cuda_option=(-DMT_CUDA=$cuda)
scripts/build.sh --target mini_train build "${cuda_option[@]}"
./build/mini_train "$@"
