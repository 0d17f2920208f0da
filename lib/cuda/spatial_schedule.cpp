// The spatial index's schedule (spatial_schedule.hpp).
#include "cuda/spatial_schedule.hpp"

#include <algorithm>

#include "cuda/tuning.hpp"

namespace streamknn::detail::gpu {

using namespace tuning;

SpatialSchedule::Counts& SpatialSchedule::count(int b, const DeviceBuffer& buffer, std::uint32_t queries) {
  Counts& c = counts_[b];
  if (c.epoch != buffer.epoch) {
    c.epoch = buffer.epoch;
    c.last_epoch = c.this_epoch;
    c.this_epoch = 0;
  }
  c.this_epoch += queries;
  c.waiting += queries;
  return c;
}

/// Stores the index covers, no id ranges, k <= kSpatialMaxK. Auto: stores of kSpatialMinSlots or
/// more (batches of kSpatialLargeKMinQueries or more at k > 32), where the index is current (at
/// k <= 32 the walk beat the scans at every batch size measured: H100, 100,000 to 10,000,000 x 2,
/// K = 16, Q = 1-1,024, 0.04-0.95x the scans' time). Where it is stale, a refit once
/// spatial_refit_queries queries (this batch included) have come since the buffer last changed,
/// and where a refit will not do, a build once kSpatialBuildQueries have, or once that many have
/// waited on the scans since the index was last brought up to date while the buffer's last epoch
/// had spatial_refit_queries or more and the last refit stayed within its limits (a store that
/// changes every few hundred queries: one build, then refits; not a store whose points jump,
/// which the refits cannot follow). A build costs about what the scans of a few hundred queries
/// save (1,000,000 x 2: 0.11 ms against 0.34 -> 0.08 ms at Q = 1,024) and a refit a third of
/// that. An index counts as current only while SpatialTree::usable (a refit that sent most moved
/// points to the overflow does not), and after such a refit builds wait for epochs that last (see
/// below). A store that changes every few dozen queries keeps the scans (counting only the
/// queries since the last update made a query thread of 16 per batch, with a publish after every
/// one or two, pay a refit or a build every 8 batches for an index that served one or two: query
/// p99 55 -> 172 us, bench_updates).
bool SpatialSchedule::wants(int b, const DeviceBuffer& buffer, SpatialTree& index, std::uint32_t queries,
                            std::uint32_t k, bool filtered) {
  if (mode_ == streamknn::SpatialIndex::Off || !covered_ || filtered || k > kSpatialMaxK || queries == 0) return false;
  if (mode_ == streamknn::SpatialIndex::Always) return true;
  if (buffer.slot_count < kSpatialMinSlots || (k > kSpatialSmallK && queries < kSpatialLargeKMinQueries)) return false;
  if (index.usable(buffer)) return true;
  const Counts& c = count(b, buffer, queries);
  const std::uint64_t refit_queries = spatial_refit_queries(buffer.slot_count);
  if (index.refittable(buffer)) return c.this_epoch >= refit_queries;
  if (index.refit_overflowed()) {
    // Points jump: each epoch needs a build, paid by one batch. Build for epochs that last (this
    // one or the one before ran twice the build's queries): a query thread of 16 per batch with
    // four producers publishing about 1,000 queries apart, building at the 1,024th query of most
    // epochs, had query p99 1.4-4.0x the update-free one; with this rule 0.9-2.1x
    // (bench_updates).
    return c.this_epoch >= kSpatialBuildQueries && std::max(c.this_epoch, c.last_epoch) >= 2 * kSpatialBuildQueries;
  }
  return c.this_epoch >= kSpatialBuildQueries ||
         (c.waiting >= kSpatialBuildQueries && c.last_epoch >= refit_queries && !index.refit_failed());
}

}  // namespace streamknn::detail::gpu
