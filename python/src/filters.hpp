// Bindings of attributes, predicates and radius search (streamknn/predicate.hpp, radius.hpp):
// the array forms they take and return in Python (filter_arrays.cpp, shared with the sharded
// store's module), and the ReferenceSet methods that use them (filters.cpp).
#pragma once

#include <vector>

#include "common.hpp"

namespace streamknn::python {

/// Attribute words as uint32, shape (rows, words) (a 1-D array is (rows, 1) when words == 1).
struct AttrRows {
  py::array_t<std::uint32_t, py::array::c_style | py::array::forcecast> keep;
  const std::uint32_t* data = nullptr;
  std::size_t rows = 0, cols = 0;
};
AttrRows as_attributes(py::handle object, std::size_t words, const char* call);

/// The predicates of a query batch: None, or a dict of arrays with the keys 'required' and
/// 'forbidden' (uint32, (W,) for every query or (n_queries, W)), 'range_word' (int, or (n_queries,)
/// ints; -1 for none) and 'range_min' / 'range_max' (uint32 scalars or (n_queries,)). One
/// Predicate for every query when nothing is per query, else one per query.
std::vector<Predicate> as_predicates(py::handle where, std::size_t num_queries, std::size_t words, const char* call);

/// search()'s answer: (distances (n, k) float32, ids (n, k) uint64, epoch).
py::tuple neighbors_tuple(Neighbors&& n, std::size_t num_queries, std::size_t k);
/// radius_search()'s answer: (offsets (n + 1,) uint64, ids uint64, distances float32, capped (n,)
/// bool, epoch).
py::tuple radius_tuple(RadiusNeighbors&& r);

/// Adds set_attributes, radius_search, search_within and attribute_words to the ReferenceSet class.
void bind_filters(py::module_& m);

}  // namespace streamknn::python
