// TESSEL_HOST_DEVICE: a function that the CPU kernels call and CUDA threads run alike (the shared
// math of kernels/, one definition for both backends).
#pragma once

#ifdef __CUDACC__
#define TESSEL_HOST_DEVICE __host__ __device__
#else
#define TESSEL_HOST_DEVICE
#endif
