#!/usr/bin/env bash
# bench/zero.sh: ZeRO against plain DDP on the GPT preset widened until the optimizer state
# matters (`mini_train --model gpt --dim 256`, AdamW: about 3.3 M parameters, 25 MiB of Adam
# moments per rank under plain DDP), 2 CPU processes, in the same run: peak tensor memory per rank
# (the CPU allocator's count, printed by --ddp-stats), peak RSS (the largest process, /usr/bin/time),
# and the time per step. Plain DDP and each stage alternate, MT_BENCH_ROUNDS times (default 3); each
# figure is the median over the rounds.
#   bench/zero.sh            MT_BENCH_STEPS (default 30) steps per run; MT_BENCH_ZERO_STAGES (default
#                            "1") the stages set against plain DDP; MT_BENCH_BACKEND (default gloo)
#   MT_BENCH_BUILD_DIR=build MT_BENCH_SKIP_BUILD=1 bench/zero.sh   uses an existing build's mini_train
#   MT_BENCH_ZERO_STAGES=2 MT_BENCH_BACKEND=mpi bench/zero.sh      ZeRO-2's step time over MPI
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
steps=${MT_BENCH_STEPS:-30}
read -r -a stages <<<"${MT_BENCH_ZERO_STAGES:-1}"
backend=${MT_BENCH_BACKEND:-gloo}
bench_one_thread
work=$(mktemp -d /tmp/minitrain-zero-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
say() { echo "zero.sh: $*" >&2; }

if [[ -z ${MT_BENCH_SKIP_BUILD:-} ]]; then
  say "building mini_train (Release) in $build"
  bench_build mini_train
fi

# One run: prints "<zero> <peak tensor MiB> <peak RSS MiB> <wall ms per step> <CPU ms per step>"; the
# CPU time is every process's user + system time, which a loaded machine distorts less than the wall.
run() {
  local zero=$1
  /usr/bin/time -v -o "$work/time.txt" "$build/mini_train" --model gpt --dim 256 --heads 4 --layers 4 \
    --nproc 2 --backend "$backend" --zero "$zero" --max-steps "$steps" --epochs 1 --batch-size 8 --ddp-stats \
    --log-json "$work/log.json" --save "$work/model.safetensors" >"$work/out.txt" 2>&1 ||
    { cat "$work/out.txt" >&2; exit 1; }
  local peak rss seconds cpu
  peak=$(sed -n 's/^memory: peak \([0-9.]*\) MiB of CPU tensors on rank 0.*/\1/p' "$work/out.txt")
  rss=$(awk '/Maximum resident set size/ { printf "%.1f", $NF / 1024 }' "$work/time.txt")
  seconds=$(tail -1 "$work/log.json" | sed 's/.*"seconds":\([0-9.e+-]*\).*/\1/')
  cpu=$(awk -F': ' '/User time|System time/ { t += $2 } END { printf "%.3f", t }' "$work/time.txt")
  echo "$zero $peak $rss $(awk -v s="$seconds" -v c="$cpu" -v n="$steps" 'BEGIN { printf "%.2f %.2f", 1000 * s / n, 1000 * c / n }')"
}

results="$work/results.txt"
for round in $(seq 1 "$rounds"); do
  say "round $round of $rounds"
  run 0 >>"$results"
  for stage in "${stages[@]}"; do run "$stage" >>"$results"; done
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //' || true)
echo
echo "ZeRO (--zero ${stages[*]}) vs plain DDP, GPT dim 256 x 4 layers, AdamW, 2 processes ($backend), batch 8 per" \
  "rank, $steps steps, $(date +%F), ${cpu:-unknown CPU} ($(getconf _NPROCESSORS_ONLN) cores, load average" \
  "$(cut -d' ' -f1-3 /proc/loadavg) at the end), median of $rounds round(s); in brackets: / plain DDP's"
echo
awk -v stages="${stages[*]}" -f "$median_awk" -f <(cat <<'AWK'
  { peak[$1] = peak[$1] " " $2; rss[$1] = rss[$1] " " $3; ms[$1] = ms[$1] " " $4; cpu[$1] = cpu[$1] " " $5 }
  function row(name, list,    i, line) {
    line = sprintf("| %s | %.2f |", name, median(list[0]))
    for (i = 1; i <= n; i++) line = line sprintf(" %.2f (%.2f) |", median(list[s[i]]), median(list[s[i]]) / median(list[0]))
    print line
  }
  END {
    n = split(stages, s, " ")
    header = "| | plain DDP |"; rule = "|---|---:|"
    for (i = 1; i <= n; i++) { header = header " --zero " s[i] " |"; rule = rule "---:|" }
    print header; print rule
    row("peak CPU tensor memory, rank 0 [MiB]", peak)
    row("peak RSS, largest process [MiB]", rss)
    row("wall time per step (epoch seconds / steps) [ms]", ms)
    row("CPU time per step, all processes, whole run / steps [ms]", cpu)
  }
AWK
) "$results"
