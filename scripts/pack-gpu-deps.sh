#!/usr/bin/env bash
# Packs the build-time dependencies minitrain needs into .gpu-deps/ (ignored by git), for a GPU
# machine that has nvcc, CMake and PyTorch but no package registry: the folder travels with the
# working tree and scripts/gpu-check.sh points CMAKE_PREFIX_PATH at it.
#   scripts/pack-gpu-deps.sh [DEST]      (default .gpu-deps; about 12 MiB, 42 MiB with Fashion-MNIST)
#
# What goes in, laid out like /usr so that each package's CMake config finds its headers relative
# to itself:
#   Eigen3 (headers + config), CLI11, nlohmann_json, doctest (headers + configs; header-only all),
#   zlib (zlib.h, zconf.h, libz.a: position-independent, used only where the GPU machine has no
#   zlib headers of its own).
# What does not: OpenBLAS, Gloo and MPI are libraries tied to this machine's system, and all three
# are optional (MT_BLAS=AUTO falls back to Eigen's GEMM, Gloo and MPI to "not built"); the GPU build
# needs none of them. NCCL comes from the GPU machine itself (CUDA toolkit, or PyTorch's
# nvidia-nccl package; gpu-check.sh finds it).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.gpu-deps}

# The first existing path among the arguments, or a loud failure naming the package.
first() {
  local what=$1
  shift
  for p in "$@"; do
    [[ -e $p ]] && { echo "$p"; return; }
  done
  echo "pack-gpu-deps: $what not found (looked in: $*); run scripts/install-deps.sh first" >&2
  exit 1
}

prefixes=(/usr /usr/local ${CONDA_PREFIX:+"$CONDA_PREFIX"})
with_prefixes() { for p in "${prefixes[@]}"; do echo "$p/$1"; done; }

eigen_inc=$(first "Eigen3 headers" $(with_prefixes include/eigen3))
eigen_cfg=$(first "Eigen3 CMake config" $(with_prefixes share/eigen3/cmake) $(with_prefixes lib/cmake/eigen3) $(with_prefixes share/cmake/eigen3))
cli_inc=$(first "CLI11 headers" $(with_prefixes include/CLI))
cli_cfg=$(first "CLI11 CMake config" $(with_prefixes share/cmake/CLI11) $(with_prefixes lib/cmake/CLI11))
json_inc=$(first "nlohmann_json headers" $(with_prefixes include/nlohmann))
json_cfg=$(first "nlohmann_json CMake config" $(with_prefixes share/cmake/nlohmann_json) $(with_prefixes lib/cmake/nlohmann_json))
doctest_inc=$(first "doctest headers" $(with_prefixes include/doctest))
doctest_cfg=$(first "doctest CMake config" $(with_prefixes lib/cmake/doctest) $(with_prefixes share/cmake/doctest))
zlib_h=$(first "zlib.h" $(with_prefixes include/zlib.h))
zconf_h=$(first "zconf.h" $(with_prefixes include/zconf.h) $(with_prefixes include/x86_64-linux-gnu/zconf.h))
libz_a=$(first "libz.a" /usr/lib/x86_64-linux-gnu/libz.a $(with_prefixes lib/libz.a))

rm -rf "$dest"
mkdir -p "$dest/include" "$dest/share/eigen3" "$dest/share/cmake" "$dest/lib/cmake" "$dest/zlib/include" "$dest/zlib/lib"
cp -rL "$eigen_inc" "$dest/include/eigen3"
cp -rL "$eigen_cfg" "$dest/share/eigen3/cmake"
cp -rL "$cli_inc" "$dest/include/CLI"
cp -rL "$cli_cfg" "$dest/share/cmake/CLI11"
cp -rL "$json_inc" "$dest/include/nlohmann"
cp -rL "$json_cfg" "$dest/share/cmake/nlohmann_json"
cp -rL "$doctest_inc" "$dest/include/doctest"
cp -rL "$doctest_cfg" "$dest/lib/cmake/doctest"
# Some configs name their install prefix literally ("/usr"): make them find it relative to themselves.
sed -i 's|^set(_IMPORT_PREFIX "/usr[^"]*")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
  "$dest"/lib/cmake/doctest/*.cmake
cp -L "$zlib_h" "$zconf_h" "$dest/zlib/include/"
cp -L "$libz_a" "$dest/zlib/lib/"
if grep -rIl --include='*.cmake' -e '"/usr/' -e '"/opt/' "$dest" >/dev/null; then
  echo "pack-gpu-deps: a packed CMake config still names an absolute path:" >&2
  grep -rIn --include='*.cmake' -e '"/usr/' -e '"/opt/' "$dest" >&2
  exit 1
fi
# Fashion-MNIST for gpu-check.sh's one-epoch GPU run, when Debian's dataset-fashion-mnist is here
# (about 30 MiB of .gz files); without it that step is skipped on the GPU machine.
fashion=/usr/share/datasets/fashion-mnist
packed="Eigen3, CLI11, nlohmann_json, doctest, zlib fallback"
if [[ -d $fashion ]]; then
  mkdir -p "$dest/fashion-mnist"
  cp -L "$fashion"/*.gz "$dest/fashion-mnist/"
  packed="$packed, Fashion-MNIST"
fi
echo "packed into $dest: $(du -sh "$dest" | cut -f1) ($packed)"
