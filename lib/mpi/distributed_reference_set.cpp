// DistributedReferenceSet: the public calls, forwarded to the engine (distributed_engine.hpp).
#include "streamknn/distributed_reference_set.hpp"

#include "core/check.hpp"
#include "mpi/distributed_engine.hpp"

namespace streamknn {

namespace {

using detail::AggregateSpec;
using detail::QueryResult;

std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class R, class Pick>
Ticket<R> map_ticket(Ticket<QueryResult> ticket, Pick pick) {
  auto shared = std::make_shared<Ticket<QueryResult>>(std::move(ticket));
  return Ticket<R>([shared] { return shared->ready(); }, [shared, pick]() -> R { return pick(shared->get()); });
}

}  // namespace

int shard_of(PointId id, int ranks) noexcept {
  return ranks <= 1 ? 0 : static_cast<int>(splitmix64(id) % static_cast<std::uint64_t>(ranks));
}

DistributedReferenceSet::DistributedReferenceSet(MPI_Comm comm, const StoreConfig& config)
    : engine_(std::make_unique<detail::DistributedEngine>(comm, config)) {}
DistributedReferenceSet::DistributedReferenceSet(std::unique_ptr<detail::DistributedEngine> engine)
    : engine_(std::move(engine)) {}
DistributedReferenceSet::~DistributedReferenceSet() = default;
DistributedReferenceSet::DistributedReferenceSet(DistributedReferenceSet&&) noexcept = default;
DistributedReferenceSet& DistributedReferenceSet::operator=(DistributedReferenceSet&&) noexcept = default;

bool DistributedReferenceSet::try_push(const Update& update) {
  return engine_->push({&update, 1}, false, "DistributedReferenceSet::try_push") == 1;
}
void DistributedReferenceSet::push(const Update& update) {
  engine_->push({&update, 1}, true, "DistributedReferenceSet::push");
}
std::size_t DistributedReferenceSet::try_push(std::span<const Update> updates) {
  return engine_->push(updates, false, "DistributedReferenceSet::try_push");
}
void DistributedReferenceSet::push(std::span<const Update> updates) {
  engine_->push(updates, true, "DistributedReferenceSet::push");
}

PublishReport DistributedReferenceSet::publish() { return engine_->publish(); }

Ticket<Neighbors> DistributedReferenceSet::submit(std::span<const float> queries, std::size_t k,
                                                  std::span<const IdRange> visible, std::span<const Predicate> where) {
  auto ticket = engine_->query(queries, k, detail::QueryFilters{visible, where}, AggregateSpec{},
                               "DistributedReferenceSet::search");
  return map_ticket<Neighbors>(std::move(ticket), [](QueryResult r) { return std::move(r.neighbors); });
}
Neighbors DistributedReferenceSet::search(std::span<const float> queries, std::size_t k,
                                          std::span<const IdRange> visible, std::span<const Predicate> where) {
  return submit(queries, k, visible, where).get();
}

Neighbors DistributedReferenceSet::search_within(std::span<const float> queries, std::size_t k, double radius,
                                                 std::span<const IdRange> visible, std::span<const Predicate> where) {
  detail::QueryFilters filters{visible, where};
  filters.radius_on = true;
  filters.radius = radius;
  auto ticket = engine_->query(queries, k, filters, AggregateSpec{}, "DistributedReferenceSet::search_within");
  return ticket.get().neighbors;
}

Ticket<RadiusNeighbors> DistributedReferenceSet::submit_radius(std::span<const float> queries, double radius,
                                                               std::size_t max_results, std::span<const IdRange> visible,
                                                               std::span<const Predicate> where) {
  detail::QueryFilters filters{visible, where};
  filters.radius_on = true;
  filters.radius_all = true;
  filters.radius = radius;
  filters.cap = max_results;
  auto ticket = engine_->query(queries, 0, filters, AggregateSpec{}, "DistributedReferenceSet::radius_search");
  return map_ticket<RadiusNeighbors>(std::move(ticket), [](QueryResult r) { return std::move(r.radius); });
}
RadiusNeighbors DistributedReferenceSet::radius_search(std::span<const float> queries, double radius,
                                                       std::size_t max_results, std::span<const IdRange> visible,
                                                       std::span<const Predicate> where) {
  return submit_radius(queries, radius, max_results, visible, where).get();
}

Ticket<ClassPredictions> DistributedReferenceSet::submit_classify(std::span<const float> queries, std::size_t k,
                                                                  Weights weights, bool probabilities,
                                                                  std::span<const IdRange> visible) {
  const char* where = "DistributedReferenceSet::classify";
  const StoreConfig& config = engine_->shard().config();
  AggregateSpec spec;
  spec.output = probabilities ? AggregateSpec::Output::Probabilities : AggregateSpec::Output::Labels;
  spec.weights = weights;
  auto check = [&] {
    switch (weights) {
      case Weights::Uniform: case Weights::Distance: break;
      default: detail::fail_enum(where, "weights", weights, "Weights", "Uniform, Distance");
    }
    if (config.target.kind != TargetSpec::Kind::Classes) {
      detail::fail_argument(where, ": the store's points carry no class labels (StoreConfig.target must be classes(n))");
    }
    if (weights == Weights::Distance && config.metric == Metric::InnerProduct) {
      detail::fail_argument(where, ": distance weights need a non-negative metric, and inner-product distances can be negative");
    }
  };
  auto ticket = engine_->query(queries, k, detail::QueryFilters{visible}, spec, where, check);
  return map_ticket<ClassPredictions>(std::move(ticket), [](QueryResult r) { return std::move(r.classes); });
}
ClassPredictions DistributedReferenceSet::classify(std::span<const float> queries, std::size_t k, Weights weights,
                                                   bool probabilities, std::span<const IdRange> visible) {
  return submit_classify(queries, k, weights, probabilities, visible).get();
}

Ticket<RegressionPredictions> DistributedReferenceSet::submit_regress(std::span<const float> queries, std::size_t k,
                                                                      RegressionAggregate aggregate,
                                                                      std::span<const IdRange> visible) {
  const char* where = "DistributedReferenceSet::regress";
  const StoreConfig& config = engine_->shard().config();
  AggregateSpec spec;
  spec.output = AggregateSpec::Output::Values;
  spec.regression = aggregate;
  spec.weights = aggregate == RegressionAggregate::WeightedMean ? Weights::Distance : Weights::Uniform;
  auto check = [&] {
    switch (aggregate) {
      case RegressionAggregate::Mean: case RegressionAggregate::WeightedMean: case RegressionAggregate::Median: break;
      default: detail::fail_enum(where, "aggregate", aggregate, "RegressionAggregate", "Mean, WeightedMean, Median");
    }
    if (config.target.kind != TargetSpec::Kind::Outputs) {
      detail::fail_argument(where, ": the store's points carry no float outputs (StoreConfig.target must be outputs(n))");
    }
    if (aggregate == RegressionAggregate::WeightedMean && config.metric == Metric::InnerProduct) {
      detail::fail_argument(where, ": weighted_mean needs a non-negative metric, and inner-product distances can be negative");
    }
  };
  auto ticket = engine_->query(queries, k, detail::QueryFilters{visible}, spec, where, check);
  return map_ticket<RegressionPredictions>(std::move(ticket), [](QueryResult r) { return std::move(r.regression); });
}
RegressionPredictions DistributedReferenceSet::regress(std::span<const float> queries, std::size_t k,
                                                       RegressionAggregate aggregate, std::span<const IdRange> visible) {
  return submit_regress(queries, k, aggregate, visible).get();
}

void DistributedReferenceSet::save(const std::string& path) { engine_->save(path); }

DistributedReferenceSet DistributedReferenceSet::load(MPI_Comm comm, const std::string& path,
                                                      const LoadOptions& options) {
  return DistributedReferenceSet(std::make_unique<detail::DistributedEngine>(comm, path, options));
}

int DistributedReferenceSet::rank() const noexcept { return engine_->rank(); }
int DistributedReferenceSet::ranks() const noexcept { return engine_->ranks(); }
std::uint64_t DistributedReferenceSet::epoch() const noexcept { return engine_->epoch(); }
std::size_t DistributedReferenceSet::size() const noexcept { return engine_->size(); }
std::size_t DistributedReferenceSet::pending() const noexcept { return engine_->pending(); }
const StoreConfig& DistributedReferenceSet::config() const noexcept { return engine_->shard().config(); }
const ReferenceSet& DistributedReferenceSet::shard() const noexcept { return engine_->shard(); }

}  // namespace streamknn
