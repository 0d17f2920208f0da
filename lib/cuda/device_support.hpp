// Which devices the CUDA backend accepts: compute capability 8.0 or later, with a kernel image in
// this build that the device can run (device_support.cpp).
#pragma once

#include <string>

namespace streamknn::detail {

/// Why `device` cannot run this build's kernels, as a sentence naming the device, its compute
/// capability and what is missing; "" where it can.
std::string device_unsupported_reason(int device);

}  // namespace streamknn::detail
