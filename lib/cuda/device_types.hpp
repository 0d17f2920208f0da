// Plain structs shared by the host code and the kernels (no device code, no CUDA headers):
// the device layout of a reference buffer and the parameters of one search launch.
//
// Vector layout: slots are grouped in tiles of 32; inside a tile the vector is split into
// float4 chunks, chunk-major: element (slot s, chunk c) lives at float4 index
//   ((s / 32) * chunks + c) * 32 + s % 32.
// A warp reading chunk c of one tile therefore issues one coalesced 512-byte load and each
// lane receives its own point: every lane scores its own points, whatever the dimension.
// Vectors of at most two elements (chunk_floats = 2) keep one float2 per slot instead, at
// float2 index s: a scan of such a store reads half the bytes.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace streamknn::detail::gpu {

inline constexpr std::uint32_t kTile = 32;
inline constexpr std::uint64_t kNoId = ~std::uint64_t(0);
/// A query's threshold when nothing bounds it yet: +inf as ordered bits (kernels/common.cuh).
inline constexpr std::uint32_t kNoBound = 0xff800000u;
/// A rank's ordered bits on the host (common.cuh's ordered_bits): the kernels compare thresholds
/// as these unsigned words.
inline std::uint32_t threshold_bits(float rank) {
  const std::uint32_t b = std::bit_cast<std::uint32_t>(rank);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/// One reference buffer on the device. A copy lives in device memory so that captured
/// graphs read the current slot count and pointers without being re-captured.
struct StoreView {
  const void* vectors = nullptr;    ///< float4 tiles (see above)
  const std::uint64_t* ids = nullptr;
  const std::uint8_t* valid = nullptr;
  const std::int32_t* labels = nullptr;
  const float* values = nullptr;    ///< capacity x outputs
  std::uint32_t slot_count = 0;     ///< slots to scan
  std::uint32_t capacity = 0;       ///< multiple of kTile
  std::uint32_t chunks = 0;         ///< float4 chunks per vector
  std::uint32_t outputs = 0;
  std::uint32_t chunk_floats = 4;   ///< 4, or 2: one float2 per slot (vectors of at most two elements)
  double max_norm = 0;              ///< >= every stored vector's L2 norm (inner product: the exact re-rank's certificate)
  /// The reduced-precision copy (kernels/reduced.hpp), or nullptr: float16 or int8 vectors in the
  /// tile layout above with 16-byte chunks of 8 or 16 elements (reduced_pairs per vector, padded
  /// with zeros), and per slot the bounds reduced.hpp describes (2 floats for float16, 4 for int8).
  const void* reduced = nullptr;
  const float* reduced_meta = nullptr;
  std::uint32_t reduced_pairs = 0;
  /// The points' attribute words (StoreConfig::attribute_words per slot, capacity x words), or
  /// nullptr for a store without attributes (attribute_words 0).
  const std::uint32_t* attributes = nullptr;
  std::uint32_t attribute_words = 0;
};

/// Floats per stored chunk for vectors of stored_dim elements (see StoreView::chunk_floats).
inline constexpr std::uint32_t chunk_floats_for(std::size_t stored_dim) { return stored_dim <= 2 ? 2 : 4; }
/// float4 chunks a stored vector spans.
inline constexpr std::uint32_t chunks_for(std::size_t stored_dim) {
  return static_cast<std::uint32_t>((stored_dim + 3) / 4);
}

/// Levels of a spatial index's tree at most (32-way, leaves of 32 points: 2^32 slots need 7).
inline constexpr std::uint32_t kSpatialMaxLevels = 7;

/// A spatial index of a store of one float4 chunk (kernels/spatial.cu): its valid points in a
/// spatial order and a 32-way tree of boxes over them, plus the overflow: valid points a refit
/// left out of the tree (moved far from their leaf, or inserted since the build). An entry whose
/// slot was erased since the build holds a NaN point. A copy lives in device memory, written by
/// the build, so captured graphs read the current index.
struct SpatialView {
  const float* points = nullptr;         ///< StoreView::chunk_floats floats per point, sorted; leaves x 32 entries
  const std::uint32_t* slots = nullptr;  ///< each sorted point's slot
  const float* boxes = nullptr;          ///< 2 x chunk_floats floats per node (lo, hi), level 0 (leaves) first
  std::uint32_t count = 0;               ///< tree entries (the valid slots when it was built)
  const float* overflow_points = nullptr;       ///< valid points outside the tree (chunk_floats floats each)
  const std::uint32_t* overflow_slots = nullptr;
  std::uint32_t overflow_count = 0;
  std::uint32_t levels = 0;              ///< 0: no points; the root is the one node of level levels - 1
  std::uint32_t level_start[kSpatialMaxLevels] = {};  ///< first box of each level
  std::uint32_t level_size[kSpatialMaxLevels] = {};   ///< nodes of each level
};

/// A candidate neighbour: ranking value, slot and id (16 bytes).
struct Candidate {
  float rank;
  std::uint32_t slot;
  std::uint64_t id;
};

struct IdRangeDevice {
  std::uint64_t begin, end;
};

/// How a plan's kernels apply a filtered batch's id ranges and predicates: not at all (an
/// unfiltered batch), per query (each (query, point) pair tested: filter_admits), or as a mask
/// (one predicate for every query and no id ranges, under the query-resident scan: a point that
/// fails it is dropped once, as its tile is staged, and screens no pair).
enum class Filtering : unsigned char { None, PerQuery, Mask };

/// Attribute words a point may carry at most (streamknn::kMaxAttributeWords).
inline constexpr std::uint32_t kDeviceAttributeWords = 4;

/// A query's test on the points' attribute words (streamknn::Predicate, word for word): every
/// filtered search carries one per query beside its id range; one that sets no bits and no
/// range word admits every point.
struct PredicateDevice {
  std::uint32_t required[kDeviceAttributeWords];
  std::uint32_t forbidden[kDeviceAttributeWords];
  std::int32_t range_word;  ///< -1: no range
  std::uint32_t range_min, range_max;
  std::uint32_t unused;     ///< keeps the size a multiple of 16 bytes
};

}  // namespace streamknn::detail::gpu
