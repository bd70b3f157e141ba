#!/usr/bin/env bash
# bench/ddp.sh: data-parallel training steps at world size 2 on this machine — minitrain's DDP over MPI
# and over Gloo (bench/bench_allreduce_mpi.cpp, one mpirun job that runs both) beside PyTorch DDP with
# Gloo (bench/ddp_torch.py) — with the same models, batches and optimizers, in the same run:
#   seed  Linear(10, 1), batch 32 per rank, MSE, SGD lr 0.01
#   mlp   784-256-10 with ReLU, batch 128 per rank, cross-entropy, SGD lr 0.01 momentum 0.9
#   mlp4  784-512-512-512-10, batch 64 per rank, in 4 buckets (minitrain only): the overlap, with
#         MPI's progress thread and without it (Note [Progress thread]), and with Gloo
# Each rank is one single-threaded process; the two sides run one after the other, MT_BENCH_ROUNDS
# times (default 3), interleaved, and each figure is the median over the rounds. Also prints the
# all-reduce latencies (MPI and Gloo) that explain the step times.
#   bench/ddp.sh        (needs OpenMPI for the MPI column and python3-torch for PyTorch's)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_one_thread
# OpenMPI refuses to start as root without both of these (docs/mpi.md).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log=$(mktemp /tmp/minitrain-ddp-bench.XXXXXX.log)
results=$(mktemp /tmp/minitrain-ddp-bench.XXXXXX.txt)
trap 'rm -f "$results"' EXIT
say() { echo "ddp.sh: $*" >&2; }
fail() { say "$*"; say "raw output: $log"; exit 1; }

say "building bench_allreduce_mpi (Release) in $build"
bench_log=$log
bench_build bench_allreduce_mpi ||
  fail "building bench_allreduce_mpi failed (this build needs MPI and Gloo: scripts/install-deps.sh)"
command -v mpirun >/dev/null || fail "no mpirun (apt install openmpi-bin)"
have_pytorch=1
"$python" -c "import torch" >>"$log" 2>&1 || { have_pytorch=0; say "PyTorch: not available ($python)"; }

for round in $(seq 1 "$rounds"); do
  say "round $round of $rounds"
  echo "== round $round: minitrain" >>"$log"
  mpirun -np 2 --bind-to none "$build/bench/bench_allreduce_mpi" 2>>"$log" | tee -a "$results" >>"$log" ||
    fail "bench_allreduce_mpi failed"
  if [[ $have_pytorch == 1 ]]; then
    echo "== round $round: pytorch" >>"$log"
    "$python" "$repo/bench/ddp_torch.py" 2>>"$log" | tee -a "$results" >>"$log" || fail "ddp_torch.py failed"
  fi
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //' || true)
echo
echo "DDP at world size 2, $(date +%F), ${cpu:-unknown CPU} ($(getconf _NPROCESSORS_ONLN) cores), one thread per" \
  "rank, median of $rounds round(s); ratio = time(PyTorch DDP) / time(minitrain)"
echo
awk -f "$median_awk" -f <(cat <<'AWK'
  { collect() }
  function fmt(x) { return x == "" ? "n/a" : sprintf("%.4g", x) }
  function ratio(torch, mine) { return torch == "" || mine == "" ? "n/a" : sprintf("%.1f×", torch / mine) }
  function row(title, what,    m, g, p) {
    m = med("minitrain mpi_" what); g = med("minitrain gloo_" what); p = med("pytorch " what)
    printf "| %s | %s | %s | %s | %s | %s |\n", title, fmt(m), fmt(g), fmt(p), ratio(p, m), ratio(p, g)
  }
  function latency(n,    m, g) {
    m = med("minitrain mpi_allreduce_" n "_us"); g = med("minitrain gloo_allreduce_" n "_us")
    printf "| all-reduce, %s floats [µs] | %s | %s | | | |\n", n, fmt(m), fmt(g)
  }
  END {
    print "| workload | minitrain MPI | minitrain Gloo | PyTorch DDP (Gloo) | PyTorch / MPI | PyTorch / Gloo |"
    print "|---|---:|---:|---:|---:|---:|"
    row("seed step, batch 32 per rank [µs]", "ddp_seed_step_us")
    row("MLP 784-256-10 step, batch 128 per rank [µs]", "ddp_mlp_step_us")
    m = med("minitrain mpi_ddp_mlp_2buckets_step_us"); g = med("minitrain gloo_ddp_mlp_2buckets_step_us")
    printf "| … MLP with the last layer in its own bucket (overlap) [µs] | %s | %s | | | |\n", fmt(m), fmt(g)
    m = med("minitrain mpi_ddp_mlp4_step_us"); g = med("minitrain gloo_ddp_mlp4_step_us")
    n = med("minitrain mpi_nothread_ddp_mlp4_step_us")
    printf "| MLP 784-512-512-512-10 in 4 buckets, batch 64 per rank [µs] | %s (%s without the progress thread) | %s | | | |\n", fmt(m), fmt(n), fmt(g)
    m = med("minitrain mpi_ddp_mlp4_overlap_pct"); g = med("minitrain gloo_ddp_mlp4_overlap_pct")
    n = med("minitrain mpi_nothread_ddp_mlp4_overlap_pct")
    printf "| … its gradient bytes reduced during backward (overlap) [%%] | %s (%s without) | %s | | | |\n", fmt(m), fmt(n), fmt(g)
    latency(11); latency(1000); latency(203530)
  }
AWK
) "$results"
echo
echo "Overlap and the split of each step (DDPStats) are in the raw output: $log"
