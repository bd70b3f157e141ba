#!/usr/bin/env bash
# bench/rss.sh: peak resident memory (/usr/bin/time -v, "Maximum resident set size") of three jobs
# in minitrain beside PyTorch running the same loop, one thread each, ROUNDS interleaved rounds,
# medians printed as a table (bench/README.md, "Peak resident memory"):
#   seed job    mini_train's default job          bench/seed_torch.py
#   Fashion     mini_train --dataset fashion-mnist bench/fashion_torch.py (EPOCHS epochs)
#   GPT preset  mini_train --model gpt             bench/gpt_torch.py (GPT_STEPS steps)
#   bench/rss.sh [ROUNDS] [EPOCHS] [GPT_STEPS]   (default 3 1 100; needs GNU time: scripts/install-deps.sh)
# Fashion needs Debian's dataset-fashion-mnist, the GPT Debian's fortunes (skipped without them);
# PyTorch's columns need python3-torch.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=${1:-3}
epochs=${2:-1}
gpt_steps=${3:-100}
build=${MT_BENCH_BUILD_DIR:-$repo/build-bench}
python=${MT_BENCH_PYTHON:-/usr/bin/python3}
fashion=/usr/share/datasets/fashion-mnist
fortunes=/usr/share/games/fortunes
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
[[ -x /usr/bin/time ]] || { echo "rss.sh: /usr/bin/time missing (apt install time; scripts/install-deps.sh)" >&2; exit 1; }
if [[ -z ${MT_BENCH_BUILD_DIR:-} ]]; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DMT_BUILD_TESTS=OFF >/dev/null
  cmake --build "$build" --target mini_train >/dev/null
fi
# The jobs run in a scratch folder, so a relative MT_BENCH_BUILD_DIR is taken from here first.
[[ -d $build ]] || { echo "rss.sh: no build folder $build (MT_BENCH_BUILD_DIR)" >&2; exit 1; }
build=$(cd "$build" && pwd)
[[ -x $build/mini_train ]] || { echo "rss.sh: $build/mini_train is not built" >&2; exit 1; }
have_torch=false
"$python" -c "import torch" 2>/dev/null && have_torch=true
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# Runs the command that follows; appends its peak RSS in MiB to the file $1 (time -v says KiB).
peak() {
  local into=$1
  shift
  /usr/bin/time -v "$@" >/dev/null 2>"$work/time.txt" || { cat "$work/time.txt" >&2; exit 1; }
  awk '/Maximum resident set size/ { printf "%.1f\n", $NF / 1024 }' "$work/time.txt" >>"$into"
}
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

jobs=(seed)
[[ -d $fashion ]] && jobs+=(fashion) || echo "rss.sh: no $fashion: Fashion-MNIST skipped (apt install dataset-fashion-mnist)"
[[ -d $fortunes ]] && jobs+=(gpt) || echo "rss.sh: no $fortunes: the GPT skipped (apt install fortunes)"
for round in $(seq "$rounds"); do
  for job in "${jobs[@]}"; do
    case $job in
    seed)
      peak seed.ours "$build/mini_train" -q --save m.safetensors
      $have_torch && peak seed.torch "$python" "$repo/bench/seed_torch.py" m.pt ;;
    fashion)
      peak fashion.ours "$build/mini_train" --dataset fashion-mnist --epochs "$epochs" --eval -q --save m.safetensors
      $have_torch && peak fashion.torch "$python" "$repo/bench/fashion_torch.py" "$fashion" "$epochs" ;;
    gpt)
      peak gpt.ours "$build/mini_train" --model gpt --max-steps "$gpt_steps" -q --save m.safetensors
      $have_torch && peak gpt.torch "$python" "$repo/bench/gpt_torch.py" --steps "$gpt_steps" ;;
    esac
  done
  echo "round $round of $rounds done" >&2
done

echo "| peak RSS, MiB (median of $rounds) | minitrain | PyTorch | minitrain / PyTorch |"
echo "|---|---:|---:|---:|"
for job in "${jobs[@]}"; do
  case $job in
  seed) name="seed job (Linear(10, 1), 1000 x 10, 5 epochs)" ;;
  fashion) name="Fashion-MNIST MLP 784-512-256-10, $epochs epoch(s) + eval (data: 209.3 MiB of float32)" ;;
  gpt) name="GPT preset, $gpt_steps steps" ;;
  esac
  ours=$(median "$job.ours")
  if $have_torch; then
    theirs=$(median "$job.torch")
    echo "| $name | $ours | $theirs | $(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2f", a / b }') |"
  else
    echo "| $name | $ours | (no python3-torch) | |"
  fi
done
