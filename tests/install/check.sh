#!/usr/bin/env bash
# Installs the build in $1 into a temporary prefix, then configures, builds and runs
# tests/install/consumer against it with find_package(minitrain). Registered with CTest.
# $2 (optional): linker flags a sanitizer build of the library needs in its consumers.
set -euo pipefail
build_dir=$1
link_flags=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$here/consumer" -B "$work/build" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_EXE_LINKER_FLAGS="$link_flags" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer"
