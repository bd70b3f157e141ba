#!/usr/bin/env bash
# Configures and builds minitrain into a build folder (default build/, Release).
#   scripts/build.sh [--target NAME] [BUILD_DIR] [extra cmake -D options...]
# --target: build only NAME and what it links (scripts/run.sh builds mini_train alone); default: all.
set -euo pipefail
cd "$(dirname "$0")/.."
target=()
if [[ "${1:-}" == "--target" ]]; then
  target=(--target "$2")
  shift 2
fi
build_dir=${1:-build}
shift || true
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
elif [[ $# -gt 0 ]]; then
  cmake "$build_dir" "$@"
fi
cmake --build "$build_dir" --parallel "$(nproc)" "${target[@]}"
