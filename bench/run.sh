#!/usr/bin/env bash
# bench/run.sh: builds and runs the minitrain-vs-PyTorch benchmarks (bench/README.md) and prints one
# table. Run from anywhere, e.g. `bench/run.sh` from the repository root.
#   minitrain       bench/bench_core.cpp, built Release with MT_NATIVE=ON (always; failure = exit 1)
#   libtorch C++    bench/torch/, its own CMake project (skipped, with a note, when CMake cannot
#                   find libtorch)
#   PyTorch Python  bench/bench_torch.py (skipped, with a note, when $python cannot import torch)
# Everything runs single-threaded. The three programs run one after another, MT_BENCH_ROUNDS times
# (default 3), interleaved, and each figure is the median over the rounds: on a small shared
# machine the background load drifts, and interleaving spreads that drift over all three sides.
# It does not pin threads to cores or change CPU frequency settings.
#
# Environment (all optional):
#   MT_BENCH_BUILD_DIR        minitrain build (default <repo>/build-bench)
#   MT_BENCH_TORCH_BUILD_DIR  bench/torch build (default <repo>/build-bench-torch)
#   MT_BENCH_PYTHON           a Python with torch (default /usr/bin/python3: Debian's python3-torch)
#   MT_BENCH_ROUNDS           rounds (default 3)
#   MT_BENCH_CLOCK            wall (default: steady_clock, what a user waits) or cpu (the thread's
#                             CPU time: steadier when other processes load the machine; bench/timing.h).
#                             With wall, a busy machine (see cpu_share) gets the CPU-time table as well.
#   MT_BENCH_LOG              where the raw output goes (default a temporary file, shown at the end)
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
clock=${MT_BENCH_CLOCK:-wall}
case "$clock" in
  wall | cpu) ;;
  *) echo "run.sh: MT_BENCH_CLOCK must be wall or cpu, got '$clock'" >&2; exit 1 ;;
esac
log=${MT_BENCH_LOG:-$(mktemp /tmp/minitrain-bench.XXXXXX.log)}
results=$(mktemp /tmp/minitrain-bench.XXXXXX.txt)
trap 'rm -f "$results"' EXIT
bench_one_thread
bench_log=$log

say() { echo "run.sh: $*" >&2; }
fail() { say "$*"; say "raw output: $log"; exit 1; }
: >"$log"

# ---- build ----------------------------------------------------------------------------------------
say "building minitrain's bench_core (Release, MT_NATIVE=ON) in $build"
bench_build bench_core || fail "building bench_core failed"
say "building bench/torch (libtorch C++) in $torch_build"
bench_build_libtorch || fail "building bench/torch failed"
libtorch_note=""
[ "$have_libtorch" = 1 ] || libtorch_note="libtorch C++: not available (CMake could not find Torch; Debian: apt install libtorch-dev)"
bench_find_pytorch
pytorch_note=""
[ "$have_pytorch" = 1 ] || pytorch_note="PyTorch Python: not available ($python cannot import torch; Debian: apt install python3-torch)"

# ---- run ------------------------------------------------------------------------------------------
# Each program prints `<impl> <metric> <value>` lines on stdout (collected for the table, and
# copied to the log) and the spread of its repetitions on stderr (log).
run() {
  local name=$1
  shift
  echo "== round $round: $name" >>"$log"
  "$@" 2>>"$log" | tee -a "$results" >>"$log" || fail "$name failed (exit ${PIPESTATUS[0]})"
}
for round in $(seq 1 "$rounds"); do
  say "round $round of $rounds"
  run bench_core "$build/bench/bench_core"
  if [ "$have_libtorch" = 1 ]; then run bench_torch "$torch_build/bench_torch"; fi
  if [ "$have_pytorch" = 1 ]; then run bench_torch.py "$python" "$repo/bench/bench_torch.py"; fi
done
grep -q '^minitrain ' "$results" || fail "bench_core printed no results"

# ---- table ----------------------------------------------------------------------------------------
# (nproc would answer 1 here: GNU nproc honours OMP_NUM_THREADS.)
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //' || true)
echo
echo "minitrain vs PyTorch, $(date +%F), ${cpu:-unknown CPU} ($(getconf _NPROCESSORS_ONLN) cores)," \
  "single-threaded, median of $rounds round(s)"
echo "Ratios are time(other) / time(minitrain): larger = minitrain faster."
awk -v have_libtorch="$have_libtorch" -v have_pytorch="$have_pytorch" -v clock="$clock" -f "$median_awk" -f <(cat <<'AWK'
  { collect() }
  $2 == "cpu_share" && (min_share == "" || $3 + 0 < min_share + 0) { min_share = $3 }
  # The median over the rounds of what impl reported for metric on the current clock; "" if none.
  function figure(impl, metric) { return med(impl " " metric suffix) }
  function fmt(x) { return x == "" ? "n/a" : (x + 0 >= 100 ? sprintf("%.0f", x) : sprintf("%.3g", x)) }
  # time(other)/time(minitrain), from times (lower is better) or rates (higher is better).
  function ratio(label, other, mine, rate) {
    if (other == "" || mine == "") return ""
    return sprintf("%s/minitrain = %.2f×", label, rate ? mine / other : other / mine)
  }
  function join(a, b) { return a == "" ? b : (b == "" ? a : a ", " b) }
  function row(title, metric, rate,    m, l, p, o, r) {
    m = figure("minitrain", metric); l = figure("libtorch", metric); p = figure("pytorch", metric)
    r = join(ratio("libtorch", l, m, rate), ratio("pytorch", p, m, rate))
    o = figure("openblas", metric)
    if (metric == "gemm1024_gflops" && o != "" && m != "")
      r = join(sprintf("minitrain = %.0f %% of OpenBLAS", 100 * m / o), r)
    printf "| %s | %s | %s | %s | %s |\n", title, fmt(m), have_libtorch ? fmt(l) : "—", have_pytorch ? fmt(p) : "—", r
  }
  function reference(title, impl) {
    if (figure(impl, "gemm1024_gflops") != "") printf "| %s | %s | | | |\n", title, fmt(figure(impl, "gemm1024_gflops"))
  }
  function table(which) {
    suffix = which == "cpu" ? ":cpu" : ""
    printf "\n%s\n\n", which == "cpu" ? "CPU time of the benchmark thread (CLOCK_THREAD_CPUTIME_ID):" \
                                      : "Wall-clock time (steady_clock):"
    print "| workload | minitrain | libtorch C++ | PyTorch Python | ratios |"
    print "|---|---:|---:|---:|---|"
    row("a + b, 16 floats, no grad [µs/op]", "tiny_add_us", 0)
    row("matmul 1024×1024 f32 [GFLOP/s]", "gemm1024_gflops", 1)
    reference("… OpenBLAS cblas_sgemm called directly [GFLOP/s]", "openblas")
    reference("… Eigen GEMM called directly [GFLOP/s]", "eigen")
    row("seed model fwd+bwd, linear [µs/step]", "seed_linear_us", 0)
    row("seed model fwd+bwd, matmul + add [µs/step]", "seed_matmul_us", 0)
    row("seed train step: Linear(10,1), SGD, MSE, batch 32 [µs/step]", "seed_step_us", 0)
    row("MLP 784-256-10 step: SGD momentum, cross-entropy, batch 128 [ms/step]", "mlp_step_ms", 0)
  }
  END {
    table(clock)
    # A benchmark thread that was on a CPU for less than 90 % of its timed wall time shared the
    # machine: wall-clock figures then measure the load as much as the code.
    if (clock == "wall" && min_share != "" && min_share + 0 < 0.9) {
      printf "\nWARNING: the machine was busy: a benchmark thread was on a CPU only %.0f %% of the time it\n", 100 * min_share
      print "was timed, so the wall-clock figures above are inflated and noisy. The same runs on CPU time:"
      table("cpu")
    }
  }
AWK
) "$results"
echo
if [ -n "$libtorch_note" ]; then echo "$libtorch_note"; fi
if [ -n "$pytorch_note" ]; then echo "$pytorch_note"; fi
echo "Raw output (per-repetition spread, build logs): $log"
