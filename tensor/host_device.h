// MT_HOST_DEVICE: marks a small inline function as callable from both host C++ and CUDA kernels.
// Under nvcc it is __host__ __device__; under a plain C++ compiler it is nothing. So the index math,
// launch geometry and Philox block function are written once, compiled into the kernels, and unit
// tested on the CPU by tests that never need a GPU.
#pragma once

#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif
