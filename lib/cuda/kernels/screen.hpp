// The dot-product screen's proven margins (kernels/screen.cpp computes them; the scan, the dense screen and
// the query-resident scan apply them).
// Plain declarations for host code: no device code, no CUDA headers beyond the runtime API's types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/device_types.hpp"

namespace streamknn::detail::gpu {

/// The dot-product screen (ScanShape::screen, L2 ranks): a (point x, query q) pair whose exact
/// rank R is at most the threshold T always passes the test
///   fl(|x|^2 - 2 x.q) <= A T - B |q|^2 + C |x|^2 + slack
/// where |x|^2, x.q and |q|^2 are float sums in any order (see screen_bounds for the proof), so
/// the screen only decides which pairs get their exact rank computed; every answer is an exact
/// rank. Computed on the host from the padded dimension.
struct ScreenBounds {
  double bound_scale = 0;   // A, slightly raised so the double evaluation of A T - B |q|^2 stays above
  double query_scale = 0;   // B, slightly lowered
  double slack = 0;         // absolute: covers underflow (subnormal roundings)
  float norm_scale = 0;     // C, rounded up
  float huge = 0;           // a norm at or above it (possible overflow) sends the pair to the exact rank
};
ScreenBounds screen_bounds(std::uint32_t padded_dim);
/// The same for dot products from the tensor cores' TF32 products (the dense screen's tensor
/// product): a margin about 2^-10 of |x||q| wider.
ScreenBounds tensor_screen_bounds(std::uint32_t padded_dim);

}  // namespace streamknn::detail::gpu
