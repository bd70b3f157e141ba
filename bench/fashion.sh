#!/usr/bin/env bash
# bench/fashion.sh: the full Fashion-MNIST run of mini_train's preset (MLP 784-512-256-10, or with
# `cnn` the --model cnn network; Adam 1e-3 with cosine decay, batch 64, standardised inputs, 5 epochs,
# one thread) beside PyTorch training the same model with the same recipe (bench/fashion_torch.py).
# Prints training time (without data loading) and test accuracy for both, and the time ratio. Takes
# a few minutes for the MLP; the CNN needs about 210 (minitrain) and 230 (PyTorch) CPU seconds.
#   bench/fashion.sh [EPOCHS] [mlp|cnn]   (needs Debian's dataset-fashion-mnist; python3-torch for PyTorch)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
epochs=${1:-5}
model=${2:-mlp}
[[ $model == mlp || $model == cnn ]] || { echo "fashion.sh: model must be mlp or cnn, got '$model'" >&2; exit 1; }
build=${MT_BENCH_BUILD_DIR:-$repo/build-bench}
python=${MT_BENCH_PYTHON:-/usr/bin/python3}
data=/usr/share/datasets/fashion-mnist
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 MT_NUM_THREADS=1
[[ -d $data ]] || { echo "fashion.sh: $data missing (apt install dataset-fashion-mnist)" >&2; exit 1; }
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$repo" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DMT_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target mini_train >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$build/mini_train" --dataset fashion-mnist --model "$model" --epochs "$epochs" --eval --log-json "$work/log.jsonl" \
  --save "$work/model.safetensors" | tee "$work/out.txt"
ours_s=$(awk -F'"seconds":' '{ split($2, a, ","); total += a[1] } END { printf "%.1f", total }' "$work/log.jsonl")
ours_acc=$(awk '/Test accuracy/ { print $NF }' "$work/out.txt")
echo
if "$python" -c "import torch" 2>/dev/null; then
  "$python" "$repo/bench/fashion_torch.py" "$data" "$epochs" "$model" | tee "$work/torch.txt"
  torch_s=$(awk '/fashion_seconds/ { print $3 }' "$work/torch.txt")
  torch_acc=$(awk '/fashion_accuracy/ { print $3 }' "$work/torch.txt")
else
  torch_s="" torch_acc=""
  echo "PyTorch: not available ($python cannot import torch; apt install python3-torch)"
fi
echo
echo "| Fashion-MNIST, $model, $epochs epochs, one thread | training seconds | test accuracy |"
echo "|---|---:|---:|"
echo "| minitrain (mini_train preset) | $ours_s | $ours_acc |"
if [[ -n "$torch_s" ]]; then
  echo "| PyTorch $("$python" -c 'import torch; print(torch.__version__)'), same recipe | $torch_s | $torch_acc |"
  awk -v a="$ours_s" -v b="$torch_s" 'BEGIN { printf "\ntime(PyTorch) / time(minitrain) = %.2f×\n", b / a }'
fi
