#!/usr/bin/env bash
# bench/steps.sh: bench/README.md's leading table, in one run: the GPT preset's and the CNN's training
# steps in minitrain (bench_gpt, bench_conv), libtorch (torch/bench_torch_gpt, torch/bench_conv_torch)
# and PyTorch (gpt_step_torch.py, conv_torch.py) at 1 and 2 threads; OpenBLAS alone on the same
# steps' matrix products and on a 1024² product (bench_gemm_floor), at the same thread counts; and
# the GPT preset's DDP overlap at world size 2 over MPI (`mini_train --ddp-stats`). Each step's
# GFLOP/s is the flops bench/step_products.h credits it with over its time. Every round runs every
# program once, the thread counts and frameworks interleaved, MT_BENCH_ROUNDS rounds (default 3; the
# table's header line says how long the run took); the table shows medians of wall time (a 2-thread step's
# other thread is outside the calling thread's CPU clock) and whether each target of issue 42 is met.
# MT_BENCH_CLOCK=cpu reads the one-thread figures on the thread's CPU time instead, the steadier
# figure on a shared machine (bench/timing.h); the 2-over-1 speed-ups then mix the two clocks.
#   bench/steps.sh            (libtorch-dev and python3-torch for those columns; OpenMPI for the DDP row)
#   MT_BENCH_BUILD_DIR=build MT_BENCH_SKIP_BUILD=1 bench/steps.sh   an existing build with -DMT_BUILD_BENCH=ON
# Environment: MT_BENCH_BUILD_DIR, MT_BENCH_TORCH_BUILD_DIR, MT_BENCH_PYTHON, MT_BENCH_ROUNDS, MT_BENCH_CLOCK,
# MT_BENCH_SKIP_BUILD (use the programs already built in both build folders), MT_BENCH_DDP_STEPS
# (default 20: the DDP run's steps),
# MT_BENCH_LOG (the raw output; default a file under /tmp, named at the end).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ddp_steps=${MT_BENCH_DDP_STEPS:-20}
suffix="" clock_words="wall clock"
case ${MT_BENCH_CLOCK:-wall} in
  wall) ;;
  cpu) suffix=":cpu" clock_words="one thread on the thread's CPU time, two threads on the wall clock" ;;
  *) echo "steps.sh: MT_BENCH_CLOCK must be wall or cpu, got ${MT_BENCH_CLOCK}" >&2; exit 2 ;;
esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # OpenMPI refuses root without both (docs/mpi.md)
log=${MT_BENCH_LOG:-$(mktemp /tmp/minitrain-steps.XXXXXX.log)}
work=$(mktemp -d /tmp/minitrain-steps.XXXXXX)
results=$work/results.txt
trap 'rm -rf "$work"' EXIT
say() { echo "steps.sh: $*" >&2; }
start=$(date +%s)
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
: >"$log"
bench_log=$log

if [[ -z ${MT_BENCH_SKIP_BUILD:-} ]]; then
  say "building bench_gpt, bench_conv, bench_gemm_floor and mini_train (Release) in $build"
  bench_build bench_gpt bench_conv bench_gemm_floor mini_train || { say "the build failed: $log"; exit 1; }
  bench_build_libtorch bench_torch_gpt bench_conv_torch || { say "the libtorch build failed: $log"; exit 1; }
else
  have_libtorch=0
  [[ -x $torch_build/bench_torch_gpt && -x $torch_build/bench_conv_torch ]] && have_libtorch=1
  [[ $have_libtorch == 1 ]] || say "no libtorch programs in $torch_build: no libtorch column"
fi
bench_find_pytorch
have_mpi=1
command -v mpirun >/dev/null || { have_mpi=0; say "no mpirun (apt install openmpi-bin): no DDP row"; }

# Runs "$@" with $threads threads everywhere (minitrain's pool, OpenBLAS, OpenMP, the torch programs'
# set_num_threads through MT_BENCH_THREADS) and files each output line under the count.
at() {
  local threads=$1
  shift
  echo "== $threads thread(s): $*" >>"$log"
  MT_NUM_THREADS=$threads MT_BENCH_THREADS=$threads OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
    MKL_NUM_THREADS=$threads "$@" 2>>"$log" | tee -a "$log" | sed "s/^/$threads /" >>"$results" ||
    { say "$* failed at $threads thread(s): $log"; exit 1; }
}

# The GPT preset at world size 2 over MPI, one thread per rank: the two overlap figures of
# --ddp-stats (Note [Overlap] in distributed/ddp/ddp_stats.h) as "ddp overlap_pct" and
# "ddp launched_early_pct" lines.
ddp() {
  echo "== mini_train --model gpt --nproc 2 --backend mpi --ddp-stats" >>"$log"
  "$build/mini_train" --model gpt --nproc 2 --backend mpi --threads 1 --max-steps "$ddp_steps" --epochs 1 \
    --ddp-stats --save "$work/gpt.safetensors" --log-json "$work/gpt.json" >"$work/ddp.txt" 2>&1 ||
    { cat "$work/ddp.txt" >>"$log"; say "mini_train --nproc 2 --backend mpi failed: $log"; exit 1; }
  cat "$work/ddp.txt" >>"$log"
  sed -n 's/.* \([0-9.]*\)% of the bytes reduced before backward ended.*/ddp overlap_pct \1/p' "$work/ddp.txt" >>"$results"
  sed -n 's/.* \([0-9.]*\)% launched before its last gradient arrived.*/ddp launched_early_pct \1/p' "$work/ddp.txt" \
    >>"$results"
}

for round in $(seq 1 "$rounds"); do
  for threads in 1 2; do
    say "round $round of $rounds, $threads thread(s), $(bench_load)"
    at "$threads" "$build/bench/bench_gemm_floor"
    at "$threads" "$build/bench/bench_gpt"
    if [[ $have_libtorch == 1 ]]; then at "$threads" "$torch_build/bench_torch_gpt"; fi
    if [[ $have_pytorch == 1 ]]; then (cd "$repo/bench" && at "$threads" "$python" gpt_step_torch.py); fi
    at "$threads" "$build/bench/bench_conv" cnn
    if [[ $have_libtorch == 1 ]]; then at "$threads" "$torch_build/bench_conv_torch" cnn; fi
    if [[ $have_pytorch == 1 ]]; then (cd "$repo/bench" && at "$threads" "$python" conv_torch.py cnn); fi
  done
  if [[ $have_mpi == 1 ]]; then say "round $round of $rounds, DDP at world size 2"; ddp; fi
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //' || true)
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo "unknown commit")
echo
echo "bench/steps.sh, $(date -u '+%F %H:%M UTC'), $commit, ${cpu:-unknown CPU} ($(getconf _NPROCESSORS_ONLN) cores);" \
  "load average $load_at_start at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end; median of $rounds" \
  "round(s), $clock_words; $(($(date +%s) - start)) s in all"
echo
awk -v suffix="$suffix" -f "$median_awk" -f <(cat <<'AWK'
  { collect() }
  # The median of a timing at t threads: one-thread figures on the clock asked for (suffix ":cpu" for
  # the thread's CPU time), two-thread ones always on the wall clock.
  function at(t, impl, metric) { return med(t " " impl " " metric (t == 1 ? suffix : "")) }
  function na(x) { return x == "" ? "n/a" : x }
  function ms(x) { return x == "" ? "n/a" : sprintf("%.1f", x) }
  function rate(flop, t) { return flop == "" || t == "" ? "" : flop / t * 1e3 }   # GFLOP, ms -> GFLOP/s
  function gf(x) { return x == "" ? "n/a" : sprintf("%.1f", x) }
  function times(a, b) { return a == "" || b == "" ? "" : a / b }
  function x(r) { return r == "" ? "n/a" : sprintf("%.2f×", r) }
  # "≥ 1.3× PyTorch: 1.16×, not met": the target, the figure it is read from, the verdict.
  function verdict(target, shown, value, bound) {
    return value == "" ? target ": n/a" : sprintf("%s: %s, %s", target, shown, value >= bound ? "met" : "not met")
  }
  # A step's GFLOP/s, and in brackets its share of OpenBLAS's rate on the step's products: the same
  # flops, so the share is OpenBLAS's time over the step's.
  function gf_share(flop, t, products_ms) {
    if (flop == "" || t == "") return "n/a"
    return products_ms == "" ? gf(rate(flop, t)) : sprintf("%.1f (%.0f %%)", rate(flop, t), 100 * products_ms / t)
  }
  # One step at one thread count: two rows, milliseconds and GFLOP/s.
  function step_rows(title, flop, m, t, targets_ms, targets_rate,    a, l, p, o) {
    a = at(t, "minitrain", m "_step_ms"); l = at(t, "libtorch", m "_step_ms"); p = at(t, "pytorch", m "_step_ms")
    o = at(t, "openblas", m "_products_ms")
    printf "| %s, %d thread%s [ms] | %s | %s | %s | %s (its products alone) | %s |\n", title, t, (t > 1 ? "s" : ""),
      ms(a), ms(l), ms(p), ms(o), targets_ms
    printf "| … [GFLOP/s] (%% of OpenBLAS on its products) | %s | %s | %s | %s on its products, %s on 1024² | %s |\n",
      gf_share(flop, a, o), gf_share(flop, l, o), gf_share(flop, p, o), gf(at(t, "openblas", m "_products_gflops")),
      gf(at(t, "openblas", "gemm1024_gflops")), targets_rate
  }
  function speedup(impl, metric) { return times(at(1, impl, metric), at(2, impl, metric)) }
  function speedup_row(title, m, target, bound,    s) {
    s = speedup("minitrain", m "_step_ms")
    printf "| %s, 2 threads over 1 [speed-up] | %s | %s | %s | %s | %s |\n", title, x(s),
      x(speedup("libtorch", m "_step_ms")), x(speedup("pytorch", m "_step_ms")), x(speedup("openblas", m "_products_ms")),
      verdict(target, x(s), s, bound)
  }
  END {
    gpt = med("1 flops gpt_step_gflop"); cnn = med("1 flops cnn_step_gflop")
    print "| figure | minitrain | libtorch | PyTorch | OpenBLAS alone | target (issue 42): met/not met |"
    print "|---|---:|---:|---:|---:|---|"
    a = at(1, "minitrain", "gpt_step_ms")
    vs_torch = times(at(1, "pytorch", "gpt_step_ms"), a)
    floor = times(at(1, "openblas", "gpt_products_ms"), a)  # = minitrain's GFLOP/s over OpenBLAS's on the products
    step_rows("GPT step", gpt, "gpt", 1, verdict("≥ 1.3× PyTorch", x(vs_torch), vs_torch, 1.3),
      verdict("≥ 80 % of OpenBLAS on its products", sprintf("%.0f %%", 100 * floor), floor, 0.8))
    step_rows("GPT step", gpt, "gpt", 2, "", "")
    speedup_row("GPT step", "gpt", "≥ 1.8×", 1.8)
    a = at(1, "minitrain", "cnn_step_ms")
    vs_torch = times(at(1, "pytorch", "cnn_step_ms"), a)
    step_rows("CNN step", cnn, "cnn", 1, verdict("≥ 2× PyTorch", x(vs_torch), vs_torch, 2), "")
    step_rows("CNN step", cnn, "cnn", 2, "", "")
    speedup_row("CNN step", "cnn", "≥ 1.7×", 1.7)
    o = med("ddp overlap_pct"); e = med("ddp launched_early_pct")
    printf "| GPT preset, world 2 over MPI: gradient bytes reduced before backward ends [%%] | %s (%s launched early) | | | | %s |\n",
      o == "" ? "n/a" : sprintf("%.1f", o), e == "" ? "n/a" : sprintf("%.1f %%", e),
      verdict("≥ 60 %", o == "" ? "" : sprintf("%.1f %%", o), o, 60)
    printf "\nFlops credited to a step (bench/step_products.h): GPT %s GFLOP, CNN %s GFLOP.\n", na(gpt), na(cnn)
    printf "Per round [ms]:\n"
    n = split("gpt cnn", steps, " ")
    for (k = 1; k <= n; k++) for (t = 1; t <= 2; t++) {
      c = t == 1 ? suffix : ""
      printf "  %s, %d thread(s): minitrain%s; libtorch%s; PyTorch%s; OpenBLAS products%s\n", steps[k], t,
        na(values[t " minitrain " steps[k] "_step_ms" c]), na(values[t " libtorch " steps[k] "_step_ms" c]),
        na(values[t " pytorch " steps[k] "_step_ms" c]), na(values[t " openblas " steps[k] "_products_ms" c])
    }
    printf "  DDP overlap [%%]:%s\n", na(values["ddp overlap_pct"])
  }
AWK
) "$results"
echo
echo "Raw output: $log"
