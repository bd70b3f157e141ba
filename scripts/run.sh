#!/usr/bin/env bash
# The README's first command: install what is missing, build, run the main job (mini_train).
# Arguments go to mini_train: scripts/run.sh --dataset fashion-mnist --eval
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh --target mini_train build  # only what the main job runs: the tests build in scripts/test.sh
./build/mini_train "$@"
