// streams/vecs_source.hpp — the .fvecs / .ivecs / .bvecs formats of the SIFT and GIST sets.
//
// Each vector is a little-endian int32 dimension d followed by d components: float32 (.fvecs),
// int32 (.ivecs) or uint8 (.bvecs). Every vector of a file must have the first one's
// dimension. Errors name the file, the vector (0-based, the format's "line"), the component
// (its "column") and the byte offset: a truncated record, a bad or changing dimension, a
// NaN or infinite float. Nothing is skipped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "streams/source.hpp"

namespace streamknn::streams {

enum class VecsKind : unsigned char { Fvecs, Ivecs, Bvecs };

struct Vecs {
  VecsKind kind = VecsKind::Fvecs;
  std::size_t count = 0;
  std::size_t dim = 0;
  std::vector<float> floats;        ///< count x dim, for .fvecs and .bvecs
  std::vector<std::int32_t> ints;   ///< count x dim, for .ivecs (kept exact)
};

/// The kind from the file name's extension; throws DataError for any other extension.
VecsKind vecs_kind(const std::string& path);

/// Reads at most max_count vectors (0 = all). Throws DataError on any malformed record.
Vecs read_vecs(const std::string& path, std::size_t max_count = 0);

/// A labelled stream: features from a .fvecs/.bvecs/.ivecs file, one target per vector from a
/// labels file of dimension 1 (.ivecs or integral .fvecs for classes, .fvecs for regression).
std::unique_ptr<Source> open_vecs(const std::string& features_path, const std::string& labels_path, Task task,
                                  std::size_t limit = 0);

/// The vectors of a .fvecs/.bvecs/.ivecs file as points without targets (SourceInfo::has_targets
/// false; clustering), at most `limit` of them (0 = all).
std::unique_ptr<Source> open_vecs_points(const std::string& path, std::size_t limit = 0);

}  // namespace streamknn::streams
