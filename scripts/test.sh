#!/usr/bin/env bash
# The README's second command: install what is missing, build, run every test.
#   scripts/test.sh              Release build in build/, then ctest
#   scripts/test.sh --sanitize   also an ASan+UBSan build in build-asan/, then ctest there
set -euo pipefail
cd "$(dirname "$0")/.."
# A test that fails is run once more, and its first failure stays in the log: the multi-process
# tests (stores, process groups, launchers) meet real sockets and timeouts on a 2-core machine.
# A test that fails twice fails the run.
retry=(--repeat until-pass:2)
# Tests run side by side, one per core: the multi-rank ones declare their ranks (PROCESSORS in
# tests/CMakeLists.txt), so ctest never starts more ranks than there are cores.
jobs=(--parallel "$(nproc)")
scripts/install-deps.sh
# CUDA and its emulator wherever nvcc is (scripts/run.sh may have left it off). Without a GPU the
# kernels run on the emulator only, and nvcc's build just shows that they compile: for one
# architecture then, sm_80 with its PTX (which a later GPU would JIT), not MT_CUDA_ARCHITECTURES'
# two, since nvcc compiles the device code once per architecture (cuda_softmax.cu: 6.1 s of CPU
# for 80;90, 4.5 s for 80).
cuda=(-DMT_CUDA=AUTO)
nvidia-smi -L >/dev/null 2>&1 || cuda+=(-DMT_CUDA_ARCHITECTURES=80)
scripts/build.sh build "${cuda[@]}"
(cd build && ctest --output-on-failure --timeout 300 "${jobs[@]}" "${retry[@]}")
if [[ "${1:-}" == "--sanitize" ]]; then
  # Benchmarks are skipped: they only measure, and sanitizers make the numbers meaningless.
  # No CUDA: ASan and nvcc do not mix, and the CPU paths are what the sanitizers check.
  # -O1 -g1, not RelWithDebInfo's -O2 -g: Clang's AddressSanitizer manual ("Usage") asks for -O1 or
  # higher, -O1 giving the more exact stack traces, and -g1 keeps the line tables those traces need
  # (GCC manual, -glevel) without the variables' debug information. Figures: README.md, "CI".
  # OpenBLAS runs the GEMMs (MT_BLAS=ON, no probe): Eigen's GEMM is templates, compiled at -O1 here
  # it would slow every GEMM-heavy test several times over. Eigen's path still meets the sanitizers
  # in the tensor, autograd, nn and optim suites' second run on it (MT_GEMM=eigen, Note [Which
  # GEMM], cmake/Dependencies.cmake; about 20 s here).
  scripts/build.sh build-asan -DMT_SANITIZE=ON -DMT_CUDA=OFF -DMT_BUILD_BENCH=OFF -DMT_BLAS=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
  (cd build-asan && ctest --output-on-failure --timeout 600 "${jobs[@]}" "${retry[@]}")
fi
