// The engine behind a ReferenceSet, for the library's own code (the models, the device API): the
// public header keeps it private and names this struct its friend, so it is not part of the API.
#pragma once

#include "core/engine.hpp"
#include "streamknn/reference_set.hpp"

namespace streamknn::detail {

struct EngineAccess {
  static const Engine& of(const ReferenceSet& set) noexcept { return *set.engine_; }
  static Engine& of(ReferenceSet& set) noexcept { return *set.engine_; }
};

}  // namespace streamknn::detail
