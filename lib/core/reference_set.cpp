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

Neighbors ReferenceSet::search(std::span<const float> queries, std::size_t k, std::span<const IdRange> visible) const {
  return submit(queries, k, visible).get();
}

Ticket<Neighbors> ReferenceSet::submit(std::span<const float> queries, std::size_t k,
                                       std::span<const IdRange> visible) const {
  return detail::map_ticket(engine_->query(queries, k, visible, {}, "ReferenceSet::search"),
                            &detail::QueryResult::neighbors);
}

Neighbors ReferenceSet::search(std::span<const double> queries, std::size_t k, std::span<const IdRange> visible) const {
  return submit(queries, k, visible).get();
}

Ticket<Neighbors> ReferenceSet::submit(std::span<const double> queries, std::size_t k,
                                       std::span<const IdRange> visible) const {
  return detail::map_ticket(engine_->query(queries, k, visible, {}, "ReferenceSet::search"),
                            &detail::QueryResult::neighbors);
}

std::size_t ReferenceSet::size() const noexcept { return engine_->size(); }
std::uint64_t ReferenceSet::epoch() const noexcept { return engine_->epoch(); }
std::size_t ReferenceSet::pending() const noexcept { return engine_->pending(); }
const StoreConfig& ReferenceSet::config() const noexcept { return engine_->config(); }
BackendKind ReferenceSet::backend() const noexcept { return engine_->backend().kind(); }
std::string ReferenceSet::backend_name() const { return engine_->backend().name(); }

bool cuda_available() noexcept { return detail::cuda_device_usable(0); }

}  // namespace streamknn
