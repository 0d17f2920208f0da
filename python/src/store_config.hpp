// The StoreConfig fields that both stores' bindings take from Python (store_config.cpp, shared
// with the sharded store's module): ReferenceSet(...) and from_points (reference_set.cpp), and
// DistributedReferenceSet (distributed.cpp), which adds none of its own; and the names of the
// CUDA backend's options, which ReferenceSet(...) and ReferenceSet.load (checkpoint.cpp) take.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "streamknn/config.hpp"

namespace streamknn::python {

/// dim, metric, the target (n_classes or n_outputs, not both: InvalidArgument naming `caller`),
/// backend, capacity_hint, queue_capacity, cpu_threads, publish_threads and attribute_words; the
/// other fields keep StoreConfig's defaults.
StoreConfig store_config(const char* caller, std::size_t dim, const std::string& metric,
                         std::optional<std::uint32_t> n_classes, std::optional<std::uint32_t> n_outputs,
                         const std::string& backend, std::size_t capacity_hint, std::size_t queue_capacity,
                         std::size_t cpu_threads, std::size_t publish_threads, std::size_t attribute_words);

/// The options' names ('auto', 'always', 'off'; 'float16', 'int8'); another is an
/// InvalidArgument naming `caller`, the option, the value and the choices.
SpatialIndex parse_spatial_index(const char* caller, const std::string& name);
ReducedScreen parse_reduced_screen(const char* caller, const std::string& name);
ReducedFormat parse_reduced_format(const char* caller, const std::string& name);

}  // namespace streamknn::python
