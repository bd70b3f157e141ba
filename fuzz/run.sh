#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a while: the parsers of files we do not
# control (safetensors, NPY, IDX) must turn any input into data or an mt::Error.
#   fuzz/run.sh [LIBRARY_BUILD_DIR] [SECONDS_EACH]     (defaults: build, 60)
# The parser under test is compiled into the fuzzer with clang's coverage instrumentation and
# ASan+UBSan; the rest of the library comes from LIBRARY_BUILD_DIR's libminitrain.a (any compiler:
# it is not what is being fuzzed). Each fuzzer's header comment shows the fully instrumented build.
# CTest runs it for a few seconds per target; exit code 77 (no clang/libFuzzer) means skipped.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
lib_dir=$(cd "${1:-$repo/build}" && pwd)
seconds=${2:-60}
cxx=${CLANGXX:-clang++}
command -v "$cxx" >/dev/null || { echo "SKIP: $cxx not found (Debian: clang)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$work/probe.cpp"
"$cxx" -fsanitize=fuzzer "$work/probe.cpp" -o "$work/probe" 2>/dev/null ||
  { echo "SKIP: $cxx cannot link libFuzzer (Debian: libclang-rt-14-dev)"; exit 77; }

# The library and what it links (CMake writes the list: tests/CMakeLists.txt); older build folders
# without the list get the CPU-only default.
if [[ -f $lib_dir/fuzz_link_libraries.txt ]]; then
  mapfile -t libs <"$lib_dir/fuzz_link_libraries.txt"
  libs+=(-lpthread -ldl)
else
  libs=("$lib_dir/libminitrain.a" -lopenblas -lz -lpthread)
  ldconfig -p | grep -q libgloo && libs+=(-lgloo)
fi
# target  sources compiled with instrumentation
targets=(
  "safetensors nn/safetensors.cpp nn/safetensors_read.cpp nn/crc32c.cpp"
  "npy data/npy.cpp"
  "idx data/idx.cpp data/file_io.cpp"
)
cd "$repo"
for entry in "${targets[@]}"; do
  read -r name sources <<<"$entry"
  # shellcheck disable=SC2086
  "$cxx" -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I. "fuzz/fuzz_$name.cpp" $sources \
    "${libs[@]}" -o "$work/fuzz_$name"
  mkdir -p "$work/corpus_$name"
  echo "fuzz/run.sh: $name for ${seconds}s"
  "$work/fuzz_$name" "$work/corpus_$name" -max_total_time="$seconds" -dict="fuzz/$name.dict" \
    -rss_limit_mb=2048 -malloc_limit_mb=512 -print_final_stats=1 2>"$work/log_$name" ||
    { tail -n 40 "$work/log_$name"; echo "fuzz/run.sh: $name found a problem" >&2; exit 1; }
  grep -E "stat::number_of_executed_units" "$work/log_$name" | sed "s/^/  $name: /"
done
echo "fuzz/run.sh: no problems found"
