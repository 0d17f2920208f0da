// The array forms of attributes and predicates (parsed), and of the filtered / radius answers
// (built): shared by streamknn._streamknn (filters.cpp) and the sharded store's module
// streamknn._streamknn_mpi (distributed.cpp), so both take and return the same arrays. Needs only
// pybind11 and the public headers (nothing of the ReferenceSet holder).
#include <limits>
#include <optional>

#include "filters.hpp"

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

py::tuple neighbors_tuple(Neighbors&& n, std::size_t num_queries, std::size_t k) {
  const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(num_queries), static_cast<py::ssize_t>(k)};
  return py::make_tuple(adopt(std::move(n.distances), shape), adopt(std::move(n.ids), shape), n.epoch);
}

py::tuple radius_tuple(RadiusNeighbors&& r) {
  const auto total = static_cast<py::ssize_t>(r.ids.size()), nq = static_cast<py::ssize_t>(r.num_queries);
  std::vector<std::uint64_t> offsets(r.offsets.begin(), r.offsets.end());
  py::array_t<bool> capped(nq);
  for (py::ssize_t i = 0; i < nq; ++i) capped.mutable_data()[i] = r.cap_hit[std::size_t(i)] != 0;
  return py::make_tuple(adopt(std::move(offsets), {nq + 1}), adopt(std::move(r.ids), {total}),
                        adopt(std::move(r.distances), {total}), capped, r.epoch);
}

}  // namespace streamknn::python
