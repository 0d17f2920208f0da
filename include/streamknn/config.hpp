// streamknn/config.hpp — what a reference set is built with.
//
// A StoreConfig fixes the dimension, metric and target shape for the lifetime of the store;
// capacity_hint and queue_capacity only size initial allocations and the update queue.
// Validation happens in the ReferenceSet constructor, which throws InvalidArgument naming
// the field and its value; an enum field holding a value none of its enumerators has (a cast
// from an integer) is refused too, with the valid choices listed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "streamknn/metric.hpp"

namespace streamknn {

/// What each stored point carries besides its vector.
struct TargetSpec {
  enum class Kind : unsigned char { None, Classes, Outputs };
  Kind kind = Kind::None;
  std::uint32_t count = 0;  ///< number of classes (labels 0..count-1) or of float outputs

  /// Points carry nothing (pure neighbour search, e.g. nearest drivers).
  static constexpr TargetSpec none() noexcept { return {}; }
  /// Points carry one class label in [0, n_classes).
  static constexpr TargetSpec classes(std::uint32_t n_classes) noexcept { return {Kind::Classes, n_classes}; }
  /// Points carry n_outputs floats (regression, multi-output, or one Q-value per action).
  static constexpr TargetSpec outputs(std::uint32_t n_outputs) noexcept { return {Kind::Outputs, n_outputs}; }

  /// Floats each point carries: n_outputs for Outputs, else 0.
  constexpr std::uint32_t value_count() const noexcept { return kind == Kind::Outputs ? count : 0; }

  friend constexpr bool operator==(TargetSpec, TargetSpec) = default;
};

/// Which implementation runs searches. Auto picks CUDA where a device is usable, else CPU.
enum class BackendKind : unsigned char { Auto, Cpu, Cuda };

/// "auto", "cpu", "cuda".
std::string_view to_string(BackendKind kind) noexcept;

/// Parses the names printed by to_string (case-sensitive); throws InvalidArgument listing them.
BackendKind parse_backend(std::string_view name);

/// Whether the CUDA backend searches low-dimensional stores (L2 and cosine of one or two
/// dimensions, cosine of three, haversine; k <= 128, no visibility ranges) through a spatial index
/// kept on the device, a tree of boxes that lets a query skip every box farther than its k-th
/// neighbour. The index is brought up to date after publishes as searches need it. The answers
/// are the same with or without it; only the time differs (docs/cuda.md).
///   Auto:   where it pays: stores of about 16,000 points or more, once enough queries have come
///           since the last publish to repay updating the index;
///   Always: before every search that can use it;
///   Off:    never.
enum class SpatialIndex : unsigned char { Auto, Always, Off };

/// Whether the CUDA backend keeps a reduced-precision copy of the store (see ReducedFormat) and
/// screens small batches with it first: a search then reads half the bytes or less, and the
/// candidates the copy cannot separate from the k-th are re-ranked exactly from the float32
/// vectors, so the answers are the same as without it (docs/cuda.md, "The reduced-precision
/// screen"). The copy costs device memory in each of the store's two buffers (float16: 2 bytes per
/// stored dimension, rounded up to 8, plus 8 per point, about half again the vectors' memory;
/// int8: 1 byte, rounded up to 16, plus 16); it is written at every publish beside the float32
/// vectors and reserved with them (OutOfMemory leaves the store as it was).
///   Auto:   kept for stores of 64 or more stored dimensions; used where the planner finds it
///           pays (batches of up to 8 queries over stores larger than the device's cache);
///   Always: kept for stores of more than 4 stored dimensions and used for every search that can
///           use it (unfiltered; for tests and measurements);
///   Off:    not kept (saves the memory).
/// The CPU backend ignores it; checkpoints do not record it (LoadOptions::reduced_screen).
enum class ReducedScreen : unsigned char { Auto, Always, Off };

/// The form of the reduced-precision copy (StoreConfig::reduced_screen) of each stored vector:
///   Float16: each coordinate rounded to float16 (2 bytes per stored dimension, rounded up to 8,
///            and 8 bytes of bounds); its error is 2^-12 of each coordinate.
///   Int8:    an offset and a scale per point and a signed byte per coordinate (1 byte per
///            stored dimension, rounded up to 16, and 16 bytes of offset, scale and bounds): half
///            the float16 copy's bytes, so one-query searches over wide stores take as little
///            as 0.6x float16's time (docs/cuda.md, E8). Its step is 1/254 of the range of each point's
///            coordinates, so the screen keeps about twice the candidates (k up to 128; larger k
///            take the float32 screen), and where that range is much wider than the distances
///            between neighbours the certificate fails and the query takes the exact fallback,
///            which passes over the whole store (docs/cuda.md, E5).
/// The answers are the same with either. The CPU backend ignores it; checkpoints do not record
/// it (LoadOptions::reduced_format).
enum class ReducedFormat : unsigned char { Float16, Int8 };

/// Most threads StoreConfig::cpu_threads or publish_threads may ask for.
inline constexpr std::size_t kMaxCpuThreads = 1024;

/// Most attribute words a point may carry (StoreConfig::attribute_words).
inline constexpr std::size_t kMaxAttributeWords = 4;

struct StoreConfig {
  std::size_t dim = 0;                        ///< vector dimension (2 for Haversine: lat, lon)
  Metric metric = Metric::L2;
  TargetSpec target = TargetSpec::none();
  std::size_t capacity_hint = 1024;           ///< points to allocate for up front (grows as needed)
  std::size_t queue_capacity = 1 << 16;       ///< operations that may wait for publish()
  BackendKind backend = BackendKind::Auto;
  int cuda_device = 0;                        ///< device ordinal for the CUDA backend
  /// Threads a CPU-backend search may use, the calling thread included (at most kMaxCpuThreads);
  /// 0 = one per hardware thread. Each CPU store starts its own pool of cpu_threads - 1 workers,
  /// so a process holding many stores caps them here. The answers do not depend on it.
  std::size_t cpu_threads = 0;
  /// Threads publish() may use, the calling thread included (at most kMaxCpuThreads), to resolve
  /// a large batch (thousands of updates) of moves and target changes only; 0 = one per hardware
  /// thread, up to 8. The pool starts at the first such batch. The published state does not
  /// depend on it. Other than 1, it also lets ReferenceSet::from_points take a second thread for
  /// a large load (its id index, or where the ids need none, half its copy).
  std::size_t publish_threads = 0;
  /// CUDA backend, stores of one or two dimensions, haversine, cosine at three: see SpatialIndex.
  /// The CPU backend ignores it.
  SpatialIndex spatial_index = SpatialIndex::Auto;
  /// CUDA backend: the reduced-precision copy and its screen; see ReducedScreen.
  ReducedScreen reduced_screen = ReducedScreen::Auto;
  /// CUDA backend: the reduced-precision copy's form; see ReducedFormat.
  ReducedFormat reduced_format = ReducedFormat::Float16;
  /// Vectors are stored, and ranked, as float32: a coordinate near 5,000,000 (metres in UTM or
  /// web mercator) keeps about half a metre, one near 1,000 about 0.00006. Where the data sit far
  /// from zero, give the origin (L2 stores only, `dim` finite values, or empty for none): it is
  /// subtracted in float64 from every vector and query (float or double input, Update::insert /
  /// move and search() both take double spans) before the result is rounded once to float32, so
  /// the store keeps the precision of the offsets. Distances do not change (L2 is invariant under
  /// the shift); the library never returns vectors, so nothing is shifted back. The bound on
  /// coordinates (max_coordinate) applies to the shifted values. Saved with the store.
  std::vector<double> origin;
  /// 32-bit attribute words each point carries (0 to kMaxAttributeWords): flags such as "available"
  /// or a vehicle class, or a number such as the time a point was last seen. Given at insert
  /// (zeros where an insert gives none), changed by Update::set_attributes, tested by the queries'
  /// predicates (streamknn/predicate.hpp) inside the search. Saved with the store.
  std::size_t attribute_words = 0;
  /// Debug mode (slow; for tests and bug hunts): the CUDA backend fills its result buffers
  /// with garbage before every search, so a result the kernels fail to write cannot pass
  /// unnoticed, and synchronises after every kernel so an error names the kernel that failed.
  bool debug = false;
};

}  // namespace streamknn
