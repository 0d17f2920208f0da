// Bindings of attributes, predicates and radius search: arrays in, the library's calls with the
// GIL released, NumPy arrays out (adopting the library's buffers).
#include "filters.hpp"

#include <pybind11/stl.h>

#include <limits>
#include <span>

namespace streamknn::python {

namespace {

using U32Array = py::array_t<std::uint32_t, py::array::c_style | py::array::forcecast>;
using I64Array = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;

/// A field of `where`: (per_query, values) with values of `width` per row (1 row when shared).
template <class Array>
Array field(const py::dict& where, const char* key, std::size_t width, std::size_t num_queries, bool& per_query,
            const char* call) {
  const Array a = Array::ensure(where[key]);
  if (!a) fail_argument(call, ": where['", key, "'] is not an integer array");
  const bool scalar_ok = width == 1;
  if ((a.ndim() == 0 && scalar_ok) || (a.ndim() == 1 && std::size_t(a.shape(0)) == width && !scalar_ok)) return a;
  if (a.ndim() == 1 && scalar_ok && std::size_t(a.shape(0)) == num_queries) {
    per_query = true;
    return a;
  }
  if (a.ndim() == 2 && !scalar_ok && std::size_t(a.shape(0)) == num_queries && std::size_t(a.shape(1)) == width) {
    per_query = true;
    return a;
  }
  fail_argument(call, ": where['", key, "'] has shape (", a.ndim() > 0 ? a.shape(0) : 0,
                a.ndim() > 1 ? message(", ", a.shape(1)) : std::string(), ") where ",
                scalar_ok ? message("a scalar or (", num_queries, ",)")
                          : message("(", width, ",) or (", num_queries, ", ", width, ")"),
                " is expected");
}

}  // namespace

AttrRows as_attributes(py::handle object, std::size_t words, const char* call) {
  AttrRows r;
  if (words == 0) fail_argument(call, ": the store's points carry no attributes (attribute_words=0)");
  r.keep = U32Array::ensure(object);
  if (!r.keep) fail_argument(call, ": attributes must be an array of unsigned 32-bit integers");
  if (r.keep.ndim() == 1 && words == 1) {
    r.rows = std::size_t(r.keep.shape(0));
    r.cols = 1;
  } else if (r.keep.ndim() == 2 && std::size_t(r.keep.shape(1)) == words) {
    r.rows = std::size_t(r.keep.shape(0));
    r.cols = words;
  } else {
    fail_argument(call, ": attributes must have shape (n, ", words, ") (attribute_words=", words, ")");
  }
  r.data = r.keep.data();
  return r;
}

std::vector<Predicate> as_predicates(py::handle object, std::size_t num_queries, std::size_t words, const char* call) {
  std::vector<Predicate> out;
  if (object.is_none()) return out;
  if (!py::isinstance<py::dict>(object)) {
    fail_argument(call, ": where must be None or a dict of arrays (required, forbidden, range_word, range_min, "
                        "range_max)");
  }
  const py::dict where = py::reinterpret_borrow<py::dict>(object);
  for (const auto& item : where) {
    const std::string key = py::str(item.first);
    if (key != "required" && key != "forbidden" && key != "range_word" && key != "range_min" && key != "range_max") {
      fail_argument(call, ": where has the unknown key '", key, "' (required, forbidden, range_word, range_min, range_max)");
    }
  }
  const std::size_t w = words == 0 ? 1 : words;  // a store without words: refused by the library, naming `where`
  bool per_query = false;
  const auto get_words = [&](const char* key) {
    return where.contains(key) ? std::optional<U32Array>(field<U32Array>(where, key, w, num_queries, per_query, call))
                               : std::nullopt;
  };
  const auto get_one = [&](const char* key) {
    return where.contains(key) ? std::optional<I64Array>(field<I64Array>(where, key, 1, num_queries, per_query, call))
                               : std::nullopt;
  };
  const auto required = get_words("required"), forbidden = get_words("forbidden");
  const auto range_word = get_one("range_word"), range_min = get_one("range_min"), range_max = get_one("range_max");
  const std::size_t n = per_query ? num_queries : 1;
  out.resize(n);
  const auto at = [&](const auto& a, std::size_t q, std::size_t i, std::size_t width) {
    const bool rows = a->ndim() == (width == 1 ? 1 : 2);
    return a->data()[(rows ? q * width : 0) + i];
  };
  for (std::size_t q = 0; q < n; ++q) {
    Predicate& p = out[q];
    for (std::size_t i = 0; i < w && i < kMaxAttributeWords; ++i) {
      if (required) p.required[i] = at(required, q, i, w);
      if (forbidden) p.forbidden[i] = at(forbidden, q, i, w);
    }
    if (range_word) {
      const std::int64_t word = at(range_word, q, 0, 1);
      if (word < -1 || word >= std::int64_t(kMaxAttributeWords)) {
        fail_argument(call, ": where['range_word'] = ", word, " is not -1 (no range) or an attribute word");
      }
      p.range_word = static_cast<std::int32_t>(word);
    }
    const auto bound = [&](const std::optional<I64Array>& a, const char* key, std::uint32_t fallback) {
      if (!a) return fallback;
      const std::int64_t v = at(a, q, 0, 1);
      if (v < 0 || v > std::int64_t(std::numeric_limits<std::uint32_t>::max())) {
        fail_argument(call, ": where['", key, "'] = ", v, " is outside [0, 2**32 - 1]");
      }
      return static_cast<std::uint32_t>(v);
    };
    p.range_min = bound(range_min, "range_min", 0);
    p.range_max = bound(range_max, "range_max", std::numeric_limits<std::uint32_t>::max());
    if (p.range_word < 0 && (range_min || range_max)) {
      fail_argument(call, ": where gives range_min / range_max without a range_word");
    }
  }
  return out;
}

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
        const auto total = static_cast<py::ssize_t>(r.ids.size()), nq = static_cast<py::ssize_t>(r.num_queries);
        std::vector<std::uint64_t> offsets(r.offsets.begin(), r.offsets.end());
        py::array_t<bool> capped_array(nq);
        for (py::ssize_t i = 0; i < nq; ++i) capped_array.mutable_data()[i] = r.cap_hit[std::size_t(i)] != 0;
        return py::make_tuple(adopt(std::move(offsets), {nq + 1}), adopt(std::move(r.ids), {total}),
                              adopt(std::move(r.distances), {total}), capped_array, r.epoch);
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
        const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(q.rows), static_cast<py::ssize_t>(k)};
        return py::make_tuple(adopt(std::move(n.distances), shape), adopt(std::move(n.ids), shape), n.epoch);
      },
      py::arg("queries"), py::arg("k"), py::arg("radius"), py::arg("visible") = py::none(), py::arg("where") = py::none(),
      "The k nearest neighbours no farther than radius: search()'s (distances, ids, epoch), rows padded "
      "(id = invalid_id, distance = inf) where fewer than k points lie within.");
}

}  // namespace streamknn::python
