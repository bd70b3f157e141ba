#!/usr/bin/env bash
# Configures and builds minitrain into a build folder (default build/, Release).
#   scripts/build.sh [BUILD_DIR] [extra cmake -D options...]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
elif [[ $# -gt 0 ]]; then
  cmake "$build_dir" "$@"
fi
cmake --build "$build_dir" --parallel "$(nproc)"
