#!/usr/bin/env bash
# Installs the Debian packages minitrain needs to build, test and benchmark, and nothing that is
# already there. Prints each step; does nothing (but say so) when everything is installed.
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --bench    also PyTorch (python3-torch, libtorch-dev) for bench/
# Conda users: see environment.yml instead.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config   # toolchain
  libeigen3-dev libopenblas-dev      # CPU math: Eigen, and OpenBLAS for GEMM (see docs/design.md)
  doctest-dev                        # tests
  libcli11-dev nlohmann-json3-dev    # command line, JSON (safetensors headers)
  zlib1g-dev                         # gzip'd IDX files
  libgloo-dev                        # CPU collectives
  libopenmpi-dev openmpi-bin         # CPU collectives through MPI (ProcessGroupMPI), mpirun for its tests
  dataset-fashion-mnist              # real data for the readers' tests and mini_train
  fortunes                           # the default text corpus (data/text.h): /usr/share/games/fortunes
  python3 python3-numpy              # tests that read our files from Python (json + numpy only)
  clang libclang-rt-14-dev           # libFuzzer, for the short fuzz run in the tests (fuzz/run.sh)
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3-torch libtorch-dev time)  # time: GNU time, peak memory in bench/rss.sh
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

if ! command -v apt-get >/dev/null; then
  echo "install-deps: missing packages (${missing[*]}) and no apt-get here; see environment.yml" >&2
  exit 1
fi
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
