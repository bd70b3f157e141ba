# bench/lib.sh: what the bench scripts share, sourced by them (`source "$(dirname ...)/lib.sh"`): the
# folders and settings every script reads from the environment, the Release build of minitrain's
# benchmark programs, the libtorch C++ build and the PyTorch check. Each script keeps its own rounds
# loop and table (bench/median.awk gives them the median).
# Environment: MT_BENCH_BUILD_DIR (default <repo>/build-bench), MT_BENCH_TORCH_BUILD_DIR (default
# <repo>/build-bench-torch), MT_BENCH_PYTHON (default /usr/bin/python3: Debian's python3-torch),
# MT_BENCH_ROUNDS (default 3).

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${MT_BENCH_BUILD_DIR:-$repo/build-bench}
torch_build=${MT_BENCH_TORCH_BUILD_DIR:-$repo/build-bench-torch}
python=${MT_BENCH_PYTHON:-/usr/bin/python3}
rounds=${MT_BENCH_ROUNDS:-3}
median_awk=$repo/bench/median.awk
bench_log=/dev/null  # where the builds' output goes; run.sh points it at its log
bench_generator=()
command -v ninja >/dev/null && bench_generator=(-G Ninja)

# One thread everywhere: OpenBLAS (ours and torch's), OpenMP (torch) and minitrain's pool read these
# at start-up. threads.sh sets its own counts per run instead.
bench_one_thread() { export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 MT_NUM_THREADS=1; }

# Builds minitrain's benchmark targets "$@" in $build: Release, tuned for this CPU (MT_NATIVE), no
# tests, no CUDA. Returns non-zero when either step fails (and set -e stops the script there).
bench_build() {
  cmake -S "$repo" -B "$build" "${bench_generator[@]}" -DCMAKE_BUILD_TYPE=Release -DMT_NATIVE=ON \
    -DMT_BUILD_TESTS=OFF -DMT_BUILD_BENCH=ON -DMT_CUDA=OFF >>"$bench_log" 2>&1 || return 1
  cmake --build "$build" --target "$@" >>"$bench_log" 2>&1 || return 1
}

# Builds bench/torch's targets "$@" (all of them when none are named) in $torch_build and sets
# have_libtorch=1; where CMake cannot find libtorch, says so on stderr and sets have_libtorch=0. A
# build that fails once libtorch was found is a real failure: non-zero (set -e stops the script).
bench_build_libtorch() {
  have_libtorch=0
  if ! cmake -S "$repo/bench/torch" -B "$torch_build" "${bench_generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    >>"$bench_log" 2>&1; then
    echo "$(basename "$0"): libtorch C++ not available (CMake could not find Torch; Debian: apt install libtorch-dev): no libtorch column" >&2
    return 0
  fi
  if [ $# -gt 0 ]; then cmake --build "$torch_build" --target "$@" >>"$bench_log" 2>&1 || return 1
  else cmake --build "$torch_build" >>"$bench_log" 2>&1 || return 1; fi
  have_libtorch=1
}

# Sets have_pytorch=1 when $python imports torch; else says so on stderr and sets it to 0.
bench_find_pytorch() {
  have_pytorch=0
  if "$python" -c "import torch" >>"$bench_log" 2>&1; then have_pytorch=1; return 0; fi
  echo "$(basename "$0"): PyTorch not available ($python cannot import torch; Debian: apt install python3-torch): no PyTorch column" >&2
}

# "load average 1.2 1.5 1.7", for the per-round progress lines.
bench_load() { echo "load average $(cut -d' ' -f1-3 /proc/loadavg)"; }
