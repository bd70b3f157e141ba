#!/usr/bin/env bash
# The README's first command: install what is missing, build, run the main job.
# Until mini_train lands this is the engine demo (examples/linear_regression.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
./build/mt_demo "$@"
