// An IdIndex checked against std::unordered_map, edit by edit (test_internals.cpp,
// test_dense_ids.cpp).
#pragma once

#include <cstdint>
#include <unordered_map>

#include "core/id_index.hpp"
#include "support/test_support.hpp"

namespace test {

using IdModel = std::unordered_map<PointId, std::uint32_t>;

/// Erases id from both (the index must return the slot the model holds, or nothing where the
/// model has none), or inserts id -> slot into both (new to one exactly where new to the other).
inline void edit_both(streamknn::detail::IdIndex& index, IdModel& model, PointId id, std::uint32_t slot, bool erase) {
  if (erase) {
    const auto got = index.erase(id);
    const auto it = model.find(id);
    REQUIRE(got.has_value() == (it != model.end()));
    if (got) {
      REQUIRE(*got == it->second);
      model.erase(it);
    }
  } else {
    REQUIRE(index.insert(id, slot) == model.emplace(id, slot).second);
  }
}

}  // namespace test
