// <Eigen/Core>, with one GCC warning silenced: GCC 12 reports a false -Wmaybe-uninitialized inside
// its own AVX-512 intrinsics once Eigen's GEMM inlines them, and the pragma must be active where
// <immintrin.h> is first included. Include this instead of <Eigen/Core> (clang has no such warning).
// Build-time only: Eigen is not a dependency of an installed minitrain.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
