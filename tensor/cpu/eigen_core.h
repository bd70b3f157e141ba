// <Eigen/Core>, with two GCC warnings silenced: GCC 12 reports a false -Wmaybe-uninitialized inside
// its own AVX-512 intrinsics once Eigen's GEMM inlines them (at -O1, as in the sanitizer build of
// scripts/test.sh, the same `__Y = __Y` placeholder reads as -Wuninitialized), and the pragmas must
// be active where <immintrin.h> is first included. Include this instead of <Eigen/Core> (clang has
// no such warnings).
// Build-time only: Eigen is not a dependency of an installed minitrain.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
