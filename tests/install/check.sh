#!/usr/bin/env bash
# Installs the build in $1 into a temporary prefix, then checks what a user of the installed copy
# meets: mini_train runs from PREFIX/bin; tests/install/consumer configures, builds and runs against
# it with find_package(minitrain); the consumer, which uses no GPU, links no CUDA library (ldd);
# and an error from a check inlined from an installed header names it as "tensor/tensor.h", not by
# the prefix. Registered with CTest.
# $2 (optional): linker flags a sanitizer build of the library needs in its consumers.
set -euo pipefail
build_dir=$1
link_flags=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
[[ -x $work/prefix/bin/mini_train ]] || fail "cmake --install put no mini_train in PREFIX/bin"
(cd "$work" && "$work/prefix/bin/mini_train" --epochs 1 -q --save "$work/m.safetensors" >/dev/null) ||
  fail "the installed mini_train does not run"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$here/consumer" -B "$work/build" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_EXE_LINKER_FLAGS="$link_flags" >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer" >"$work/out.txt" || { cat "$work/out.txt"; fail "the consumer failed"; }
cat "$work/out.txt"

# A CPU-only program pays for no GPU stack: no libcudart, libcublas or libnccl among its libraries.
if ldd "$work/build/consumer" | grep -E 'libcudart|libcublas|libnccl' >&2; then
  fail "a CPU-only consumer links CUDA libraries"
fi
grep -q "^consumer: error: .*(tensor/tensor.h:[0-9]*)$" "$work/out.txt" ||
  fail "an error from an installed header does not name it as tensor/tensor.h"
! grep -qF "$work/prefix" "$work/out.txt" || fail "an error names the install prefix"
