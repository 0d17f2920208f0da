// streamknn/publish_report.hpp — what one publish() did.
//
// Id errors cannot be known at push time (the id may be inserted by an op still in the queue),
// so they are found when the op is applied, counted here and named; the op is then skipped and
// every other op of the same publish is still applied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "streamknn/update.hpp"

namespace streamknn {

enum class RejectReason : unsigned char {
  UnknownId,    ///< move / erase / set-target / set-attributes of an id that is not in the store
  DuplicateId,  ///< insert of an id that is already in the store
};

const char* to_string(RejectReason reason) noexcept;

struct Rejection {
  PointId id = kInvalidId;
  UpdateKind kind = UpdateKind::Insert;
  RejectReason reason = RejectReason::UnknownId;
};

struct PublishReport {
  /// The epoch visible once publish() returned: the previous one plus 1 when applied > 0, else
  /// unchanged (an empty publish, or one whose every op was rejected, makes no new snapshot).
  std::uint64_t epoch = 0;
  std::size_t drained = 0;         ///< operations taken from the queue
  std::size_t applied = 0;         ///< operations applied (drained - rejected)
  std::size_t inserted = 0, moved = 0, erased = 0, retargeted = 0;
  std::size_t attributed = 0;      ///< set_attributes applied
  std::vector<Rejection> rejected; ///< every operation that was not applied, in queue order
  std::size_t size = 0;            ///< points in the store after this publish
};

}  // namespace streamknn
