// The arrays of a ReferenceSet's writes, converted and shape-checked with the GIL held: the update
// batches of insert / move / erase / set_target (checked row by row, then pushed under an on_full
// policy) and the point arrays that ReferenceSet.from_points loads in one step (batches.cpp).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common.hpp"
#include "filters.hpp"

namespace streamknn::python {

/// One batch of updates of one kind, converted and shape-checked (with the GIL held).
struct Batch {
  UpdateKind kind = UpdateKind::Insert;
  IdArray ids;
  std::optional<FloatRows> vectors;
  std::optional<LabelArray> labels;
  std::optional<FloatRows> values;
  std::optional<AttrRows> attributes;

  Update row(std::size_t i) const {
    const Update u = base_row(i);
    return attributes ? u.with_attributes({attributes->data + i * attributes->cols, attributes->cols}) : u;
  }
  Update base_row(std::size_t i) const {
    const PointId id = ids.data[i];
    const std::span<const float> vector =
        vectors ? std::span<const float>(vectors->data + i * vectors->cols, vectors->cols) : std::span<const float>();
    switch (kind) {
      case UpdateKind::Insert:
        if (labels) return Update::insert(id, vector, static_cast<std::int32_t>(labels->data[i]));
        if (values) return Update::insert(id, vector, {values->data + i * values->cols, values->cols});
        return Update::insert(id, vector);
      case UpdateKind::Move: return Update::move(id, vector);
      case UpdateKind::Erase: return Update::erase(id);
      case UpdateKind::SetTarget:
        if (labels) return Update::set_target(id, static_cast<std::int32_t>(labels->data[i]));
        return Update::set_target(id, {values->data + i * values->cols, values->cols});
      case UpdateKind::SetAttributes: return Update::set_attributes(id, {});
    }
    return Update::erase(id);
  }
};

/// The batch of `kind` from ids, vectors and targets (py::none() where the kind takes none),
/// shapes checked against the store's dim and target; `call` names the method in errors.
Batch make_batch(const Store& store, UpdateKind kind, py::handle ids, py::handle vectors, py::handle targets,
                 const char* call);

/// Checks, then pushes every row (GIL released), in spans of kPushSpan rows (one claim of queue
/// space per run of cells, ReferenceSet::push(span)). Returns the number of rows queued.
std::size_t push_batch(Store& store, const Batch& b, const std::string& on_full_name, const char* call);

/// from_points' attribute_words where none is given: attributes' columns (1 for a 1-D array), 0 without.
std::size_t words_of(py::handle attributes, const char* call);

/// The arrays of ReferenceSet.from_points, converted and shape-checked (with the GIL held).
struct Points {
  IdArray ids;
  FloatRows vectors;
  std::vector<std::int32_t> labels;
  std::optional<FloatRows> values;
  std::optional<std::vector<float>> owned;  ///< the vectors converted here (then vectors views them)
  std::optional<py::array> doubles;  ///< C-ordered float64 vectors, read in place (rounded once as they are stored)
};

/// from_points' ids, vectors and targets for a store of `config`, every label range-checked.
Points as_points(const StoreConfig& config, py::handle ids, py::handle vectors, py::handle targets, const char* call);

}  // namespace streamknn::python
