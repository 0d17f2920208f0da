// streamknn/version.hpp — library version and build features.
#pragma once

#include "streamknn/build_config.hpp"

namespace streamknn {

inline constexpr int kVersionMajor = STREAMKNN_VERSION_MAJOR;
inline constexpr int kVersionMinor = STREAMKNN_VERSION_MINOR;
inline constexpr int kVersionPatch = STREAMKNN_VERSION_PATCH;
/// True when the library was built with its CUDA backend.
inline constexpr bool kBuiltWithCuda = STREAMKNN_BUILT_WITH_CUDA;

/// "0.1.0"
const char* version_string() noexcept;

}  // namespace streamknn
