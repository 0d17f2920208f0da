// streamknn/device.hpp — searches and predictions whose queries and results stay in CUDA device
// memory (opt-in).
//
// search_device() reads num_queries rows of dim floats (row r at data + r * row_stride) from
// the device, writes num_queries x k distances and ids to the device, and orders both on the
// caller's CUDA stream: the library's query stream waits (an event) for the work already queued
// on `cuda_stream` before reading the queries, and `cuda_stream` waits for the results before
// anything queued on it after the call. Nothing crosses to the host except a 16-byte status.
// Results are those of ReferenceSet::search on the same snapshot (same order, same padding);
// predict_device gives KnnClassifier / KnnRegressor's predictions likewise.
//
// The queries are validated on the device (NaN/Inf, coordinates beyond the bound of
// streamknn/metric.hpp, cosine zero vectors, latitudes outside [-90, 90] or longitudes outside
// [-180, 180], ranges with begin > end); get() throws InvalidArgument naming the first bad row,
// with the message ReferenceSet::search would give. The query, range and result buffers must
// stay valid until get() returns (or the ticket is dropped, which waits). get() returns the
// snapshot's epoch. Only the CUDA backend implements it: elsewhere it throws BackendUnavailable.
#pragma once

#include <cstddef>
#include <cstdint>

#include "streamknn/classifier.hpp"
#include "streamknn/reference_set.hpp"
#include "streamknn/regressor.hpp"
#include "streamknn/search.hpp"
#include "streamknn/ticket.hpp"

namespace streamknn {

struct DeviceQueries {
  const float* data = nullptr;     ///< device memory, float32
  std::size_t num_queries = 0;
  std::size_t row_stride = 0;      ///< floats between rows; 0 means dim (contiguous rows)
  int device = 0;                  ///< CUDA ordinal holding data; must be the store's device
  const IdRange* visible = nullptr;  ///< device memory, one range per query, or nullptr
};

struct DeviceNeighbors {
  float* distances = nullptr;      ///< device memory, num_queries x k, row-major
  PointId* ids = nullptr;          ///< device memory, num_queries x k, row-major
};

struct DeviceClassPredictions {
  std::int32_t* labels = nullptr;      ///< device memory, num_queries
  float* probabilities = nullptr;      ///< device memory, num_queries x classes, or nullptr (labels only)
};

/// Exact k nearest neighbours of device-resident queries into device-resident results,
/// ordered on `cuda_stream` (a cudaStream_t; 0 = the legacy default stream).
Ticket<std::uint64_t> search_device(const ReferenceSet& set, const DeviceQueries& queries, std::size_t k,
                                    const DeviceNeighbors& out, std::uintptr_t cuda_stream);

/// KnnClassifier::predict / predict_proba (probabilities != nullptr) on the device, as above.
Ticket<std::uint64_t> predict_device(const KnnClassifier& model, const DeviceQueries& queries,
                                     const DeviceClassPredictions& out, std::uintptr_t cuda_stream);

/// KnnRegressor::predict on the device, as above: values is num_queries x outputs device memory.
Ticket<std::uint64_t> predict_device(const KnnRegressor& model, const DeviceQueries& queries, float* values,
                                     std::uintptr_t cuda_stream);

}  // namespace streamknn
