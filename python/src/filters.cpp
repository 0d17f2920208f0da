// Bindings of attributes, predicates and radius search on ReferenceSet: arrays in (parsed by
// filter_arrays.cpp), the library's calls with the GIL released, NumPy arrays out (adopting the
// library's buffers).
#include "filters.hpp"

#include <pybind11/stl.h>

#include <span>

namespace streamknn::python {

void bind_filters(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<Store>>(m.attr("ReferenceSet"));
  cls.def_property_readonly("attribute_words", [](const Store& s) { return s.set().config().attribute_words; },
                            "32-bit attribute words per point (0: none).");
  cls.def(
      "set_attributes",
      [](Store& s, py::handle ids, py::handle attributes) {
        const char* call = "ReferenceSet.set_attributes";
        const IdArray id = as_ids(ids, 1, 1, call, "ids");
        const AttrRows a = as_attributes(attributes, s.set().config().attribute_words, call);
        if (a.rows != id.rows) fail_argument(call, ": ", id.rows, " ids but ", a.rows, " attribute rows");
        py::gil_scoped_release nogil;
        std::vector<Update> rows;
        rows.reserve(id.rows);
        for (std::size_t i = 0; i < id.rows; ++i) {
          rows.push_back(Update::set_attributes(id.data[i], {a.data + i * a.cols, a.cols}));
        }
        std::span<const Update> rest(rows);
        while (!rest.empty()) {  // on a full queue: publish and carry on, as the other batch pushes
          const std::size_t queued = s.set().try_push(rest);
          rest = rest.subspan(queued);
          if (!rest.empty()) s.carry(s.set().publish());
        }
        return id.rows;
      },
      py::arg("ids"), py::arg("attributes"),
      "Queues new attribute words: ids (n,), attributes (n, attribute_words) uint32. Every row is checked "
      "before any is queued; visible at the next publish(). Returns the number of rows queued.");
  cls.def(
      "radius_search",
      [](const Store& s, py::handle queries, double radius, std::optional<std::size_t> max_results, py::handle visible,
         py::handle where) {
        const char* call = "ReferenceSet.radius_search";
        const StoreConfig& config = s.set().config();
        const FloatRows q = as_float_rows(queries, config.dim, false, call, "queries");
        const std::vector<IdRange> ranges = as_ranges(visible, q.rows, call);
        const std::vector<Predicate> predicates = as_predicates(where, q.rows, config.attribute_words, call);
        RadiusNeighbors r;
        {
          py::gil_scoped_release nogil;
          r = s.set().radius_search({q.data, q.rows * q.cols}, radius, max_results ? *max_results : kNoLimit, ranges,
                                    predicates);
        }
        return radius_tuple(std::move(r));
      },
      py::arg("queries"), py::arg("radius"), py::arg("max_results") = py::none(), py::arg("visible") = py::none(),
      py::arg("where") = py::none(),
      R"doc(Every point within radius of each query (haversine: metres), nearest first, exactly.

Returns (offsets, ids, distances, capped, epoch): query q's points are ids[offsets[q]:offsets[q+1]]
(uint64) at distances[...] (float32), in ascending (distance, id) order. max_results (>= 1) keeps each
query's nearest max_results points; capped[q] is True where more lay within. visible and where as
for search(). "Within" is decided on the exact distance of the stored float32 values (docs/filters.md).)doc");
  cls.def(
      "search_within",
      [](const Store& s, py::handle queries, std::size_t k, double radius, py::handle visible, py::handle where) {
        const char* call = "ReferenceSet.search_within";
        const StoreConfig& config = s.set().config();
        const FloatRows q = as_float_rows(queries, config.dim, false, call, "queries");
        const std::vector<IdRange> ranges = as_ranges(visible, q.rows, call);
        const std::vector<Predicate> predicates = as_predicates(where, q.rows, config.attribute_words, call);
        Neighbors n;
        {
          py::gil_scoped_release nogil;
          n = s.set().search_within({q.data, q.rows * q.cols}, k, radius, ranges, predicates);
        }
        return neighbors_tuple(std::move(n), q.rows, k);
      },
      py::arg("queries"), py::arg("k"), py::arg("radius"), py::arg("visible") = py::none(), py::arg("where") = py::none(),
      "The k nearest neighbours no farther than radius: search()'s (distances, ids, epoch), rows padded "
      "(id = invalid_id, distance = inf) where fewer than k points lie within.");
}

}  // namespace streamknn::python
