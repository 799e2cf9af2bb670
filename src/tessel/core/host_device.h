// TESSEL_HOST_DEVICE: a function that the CPU code calls and CUDA threads run alike (the shared
// math of kernels/ and core's Philox generator, one definition for both backends).
#pragma once

#ifdef __CUDACC__
#define TESSEL_HOST_DEVICE __host__ __device__
#else
#define TESSEL_HOST_DEVICE
#endif
