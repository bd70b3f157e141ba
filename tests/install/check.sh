#!/usr/bin/env bash
# Installs the build in $1 into a temporary prefix, then checks what a user of the installed copy
# meets: mini_train runs from PREFIX/bin; tests/install/consumer configures, builds and runs against
# it with find_package(minitrain); that consumer, which uses no GPU, links no CUDA library (ldd) even
# when minitrain was built with CUDA, and no Gloo or MPI unless it asks for minitrain::gloo /
# minitrain::mpi; an error from a check inlined from an installed header names it
# as "tensor/tensor.h", not by the prefix; and COMPONENTS cuda gives minitrain::cuda with the CUDA
# backend where the build has one, and fails where it has not. The consumer uses the README's CMake
# lines alone (no CMAKE_CXX_STANDARD: the targets require C++20), and, run as an mpirun rank without
# minitrain::mpi, is told to link it. Registered with CTest.
# $2 (optional): linker flags a sanitizer build of the library needs in its consumers.
set -euo pipefail
build_dir=$1
link_flags=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
[[ -x $work/prefix/bin/mini_train ]] || fail "cmake --install put no mini_train in PREFIX/bin"
(cd "$work" && "$work/prefix/bin/mini_train" --epochs 1 -q --save "$work/m.safetensors" >/dev/null) ||
  fail "the installed mini_train does not run"

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Configures, builds and runs the consumer in $work/$1 with the cmake options that follow.
consumer() {
  local dir=$work/$1
  shift
  cmake -S "$here/consumer" -B "$dir" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" \
    -DCMAKE_EXE_LINKER_FLAGS="$link_flags" "$@" >"$dir.log" 2>&1 || return 1
  cmake --build "$dir" >>"$dir.log" 2>&1 || { cat "$dir.log"; fail "the consumer ($*) does not build"; }
  "$dir/consumer" >"$dir.txt" || { cat "$dir.txt"; fail "the consumer ($*) failed"; }
  cat "$dir.txt"
}

consumer cpu || { cat "$work/cpu.log"; fail "find_package(minitrain) failed"; }
# A CPU-only program pays for no GPU stack: no libcudart, libcublas or libnccl among its libraries,
# even from a CUDA build of minitrain (Note [Two libraries in a CUDA build] in CMakeLists.txt).
if ldd "$work/cpu/consumer" | grep -E 'libcudart|libcublas|libnccl' >&2; then
  fail "a CPU-only consumer links CUDA libraries"
fi
grep -q "^consumer: CUDA backend absent$" "$work/cpu.txt" || fail "minitrain::minitrain brought the CUDA backend"
grep -q "^consumer: error: .*(tensor/tensor.h:[0-9]*)$" "$work/cpu.txt" ||
  fail "an error from an installed header does not name it as tensor/tensor.h"
! grep -qF "$work/prefix" "$work/cpu.txt" || fail "an error names the install prefix"

# Nor Gloo or MPI: those backends are the components minitrain::gloo and ::mpi (cmake/Components.cmake),
# and init_process_group("gloo") without the component says which to link.
if ldd "$work/cpu/consumer" | grep -E 'libgloo|libmpi' >&2; then
  fail "a consumer of minitrain::minitrain alone links Gloo or MPI"
fi
grep -q "^consumer: backends local nccl$" "$work/cpu.txt" || fail "minitrain::minitrain registered more than local and nccl"
grep -q "^consumer: gloo: .*link the minitrain::gloo component" "$work/cpu.txt" ||
  { cat "$work/cpu.txt"; fail "init_process_group(\"gloo\") without minitrain::gloo does not name the component"; }
# Under mpirun without minitrain::mpi (OpenMPI's variables, set here), the error names that
# component, not Gloo or a missing port.
OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=2 \
  "$work/cpu/consumer" >"$work/mpirun.txt" || fail "the consumer as an mpirun rank failed"
grep -qF "consumer: mpirun: init_process_group: this program was started by mpirun, but the MPI backend is not linked: link minitrain::mpi (find_package(minitrain COMPONENTS mpi))" \
  "$work/mpirun.txt" || { cat "$work/mpirun.txt"; fail "under mpirun without minitrain::mpi, no line naming it"; }
# With the components (where the build has them): their backends registered, Gloo working.
components=()
[[ -n $(find "$work/prefix" -name minitrain_glooTargets.cmake) ]] && components+=(gloo)
[[ -n $(find "$work/prefix" -name minitrain_mpiTargets.cmake) ]] && components+=(mpi)
if ((${#components[@]})); then
  list=$(IFS=';'; echo "${components[*]}")
  consumer backends "-DCONSUMER_BACKENDS=$list" || { cat "$work/backends.log"; fail "COMPONENTS $list failed"; }
  for c in "${components[@]}"; do
    grep -q "^consumer: backends.* $c\b" "$work/backends.txt" || fail "minitrain::$c registered no $c backend"
  done
  if [[ " ${components[*]} " == *" gloo "* ]]; then
    grep -q "^consumer: gloo group of 1$" "$work/backends.txt" || fail "minitrain::gloo made no Gloo group"
    ldd "$work/backends/consumer" | grep libgloo >/dev/null || fail "minitrain::gloo does not link libgloo"
  fi
fi

# COMPONENTS cuda: minitrain::cuda from a CUDA build (it has libminitrain_cpu.a beside it); refused
# by find_package from a CPU build.
if [[ -e $work/prefix/lib/libminitrain_cpu.a || -n $(find "$work/prefix" -name libminitrain_cpu.a) ]]; then
  consumer gpu -DCONSUMER_CUDA=ON || { cat "$work/gpu.log"; fail "find_package(minitrain COMPONENTS cuda) failed"; }
  grep -q "^consumer: CUDA backend linked$" "$work/gpu.txt" || fail "minitrain::cuda has no CUDA backend"
else
  ! consumer gpu -DCONSUMER_CUDA=ON || fail "a CPU build of minitrain offered COMPONENTS cuda"
  grep -q "built without its CUDA backend" "$work/gpu.log" || { cat "$work/gpu.log"; fail "no word on the missing component"; }
fi
