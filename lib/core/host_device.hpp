// STREAMKNN_HD: the qualifier of functions compiled for both the host and, under nvcc, the device
// (the exact arithmetic of exact_rank.hpp and radius_rule.hpp, which both backends share).
#pragma once

#if defined(__CUDACC__)
#define STREAMKNN_HD __host__ __device__ __forceinline__
#else
#define STREAMKNN_HD inline
#endif
