#include "streamknn/reference_set.hpp"

#include "core/engine.hpp"
#include "core/ticket_map.hpp"

namespace streamknn {

ReferenceSet::ReferenceSet(const StoreConfig& config) : engine_(std::make_unique<detail::Engine>(config)) {}
ReferenceSet::~ReferenceSet() = default;
ReferenceSet::ReferenceSet(ReferenceSet&&) noexcept = default;
ReferenceSet& ReferenceSet::operator=(ReferenceSet&&) noexcept = default;

bool ReferenceSet::try_push(const Update& update) { return engine_->try_push(update); }
void ReferenceSet::push(const Update& update) { engine_->push(update); }
std::size_t ReferenceSet::try_push(std::span<const Update> updates) { return engine_->try_push(updates); }
void ReferenceSet::push(std::span<const Update> updates) { engine_->push(updates); }
PublishReport ReferenceSet::publish() { return engine_->publish(); }

Neighbors ReferenceSet::search(std::span<const float> queries, std::size_t k, std::span<const IdRange> visible,
                               std::span<const Predicate> where) const {
  return submit(queries, k, visible, where).get();
}

Ticket<Neighbors> ReferenceSet::submit(std::span<const float> queries, std::size_t k, std::span<const IdRange> visible,
                                       std::span<const Predicate> where) const {
  return detail::map_ticket(engine_->query(queries, k, detail::QueryFilters{visible, where}, {}, "ReferenceSet::search"),
                            &detail::QueryResult::neighbors);
}

Neighbors ReferenceSet::search(std::span<const double> queries, std::size_t k, std::span<const IdRange> visible,
                               std::span<const Predicate> where) const {
  return submit(queries, k, visible, where).get();
}

Ticket<Neighbors> ReferenceSet::submit(std::span<const double> queries, std::size_t k, std::span<const IdRange> visible,
                                       std::span<const Predicate> where) const {
  return detail::map_ticket(engine_->query(queries, k, detail::QueryFilters{visible, where}, {}, "ReferenceSet::search"),
                            &detail::QueryResult::neighbors);
}

namespace {

detail::QueryFilters within(std::span<const IdRange> visible, std::span<const Predicate> where, double radius,
                            bool all, std::size_t cap) {
  detail::QueryFilters f{visible, where};
  f.radius_on = true;
  f.radius_all = all;
  f.radius = radius;
  f.cap = cap;
  return f;
}

}  // namespace

Neighbors ReferenceSet::search_within(std::span<const float> queries, std::size_t k, double radius,
                                      std::span<const IdRange> visible, std::span<const Predicate> where) const {
  return detail::map_ticket(engine_->query(queries, k, within(visible, where, radius, false, kNoLimit), {},
                                           "ReferenceSet::search_within"),
                            &detail::QueryResult::neighbors)
      .get();
}

Neighbors ReferenceSet::search_within(std::span<const double> queries, std::size_t k, double radius,
                                      std::span<const IdRange> visible, std::span<const Predicate> where) const {
  return detail::map_ticket(engine_->query(queries, k, within(visible, where, radius, false, kNoLimit), {},
                                           "ReferenceSet::search_within"),
                            &detail::QueryResult::neighbors)
      .get();
}

Ticket<RadiusNeighbors> ReferenceSet::submit_radius(std::span<const float> queries, double radius,
                                                    std::size_t max_results, std::span<const IdRange> visible,
                                                    std::span<const Predicate> where) const {
  return detail::map_ticket(engine_->query(queries, 0, within(visible, where, radius, true, max_results), {},
                                           "ReferenceSet::radius_search"),
                            &detail::QueryResult::radius);
}

RadiusNeighbors ReferenceSet::radius_search(std::span<const float> queries, double radius, std::size_t max_results,
                                            std::span<const IdRange> visible, std::span<const Predicate> where) const {
  return submit_radius(queries, radius, max_results, visible, where).get();
}

RadiusNeighbors ReferenceSet::radius_search(std::span<const double> queries, double radius, std::size_t max_results,
                                            std::span<const IdRange> visible, std::span<const Predicate> where) const {
  return detail::map_ticket(engine_->query(queries, 0, within(visible, where, radius, true, max_results), {},
                                           "ReferenceSet::radius_search"),
                            &detail::QueryResult::radius)
      .get();
}

std::size_t ReferenceSet::size() const noexcept { return engine_->size(); }
std::uint64_t ReferenceSet::epoch() const noexcept { return engine_->epoch(); }
std::size_t ReferenceSet::pending() const noexcept { return engine_->pending(); }
const StoreConfig& ReferenceSet::config() const noexcept { return engine_->config(); }
BackendKind ReferenceSet::backend() const noexcept { return engine_->backend().kind(); }
std::string ReferenceSet::backend_name() const { return engine_->backend().name(); }

bool cuda_available() noexcept { return detail::cuda_device_usable(0); }

}  // namespace streamknn
