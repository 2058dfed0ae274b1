// TALLY_HOST_DEVICE marks a function that runs on the GPU and on the host: __host__
// __device__ under nvcc, nothing under the host compiler. The per-element math of the CUDA
// kernels is written this way so that tests check it on the CPU, in CI, without a GPU.
#pragma once

#ifdef __CUDACC__
#define TALLY_HOST_DEVICE __host__ __device__
#else
#define TALLY_HOST_DEVICE
#endif
