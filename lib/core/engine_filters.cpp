// The engine's side of attributes, predicates and radius bounds (issue "filtered and radius
// queries"): checks at the boundary, the attribute copy a checkpoint saves, and the conversion of
// a radius into the bound on the exact key both backends test (core/radius_rule.hpp).
#include <cmath>
#include <limits>

#include "core/check.hpp"
#include "core/engine.hpp"
#include "streamknn/error.hpp"

namespace streamknn::detail {

namespace {

/// Mean Earth radius of the haversine metric (metres), as exact_rank.hpp reports distances.
constexpr double kEarthRadius = 6371008.8;

}  // namespace

void radius_limit(Metric metric, double radius, double& hi, double& lo) {
  lo = 0;
  if (std::isinf(radius) && radius > 0) {  // every point: a bound above every key (keys stay below 2^280)
    hi = metric == Metric::Haversine ? 4.0 * (1.0 + 0x1p-20) : 0x1p300;
    return;
  }
  switch (metric) {
    case Metric::L2: {
      // r * r exactly: a double times itself is hi + lo (TwoProduct). Radii below 2^-100 would
      // put lo below the grid; no two distinct float32 vectors are that close but near zero, and
      // such radii count as 0.
      if (radius < 0x1p-100) {
        hi = 0;
        return;
      }
      hi = radius * radius;
      lo = std::fma(radius, radius, -hi);
      return;
    }
    case Metric::Cosine: hi = radius < 0x1p-200 ? 0.0 : 2.0 * radius; return;   // |q - p|^2 = 2 (1 - cos)
    case Metric::InnerProduct: hi = std::fabs(radius) < 0x1p-200 ? 0.0 : radius; return;  // -<q, p> <= r (any sign)
    case Metric::Haversine: {
      // The squared chord of an arc of r metres, (2 sin(r / 2R))^2, computed once here in double:
      // both backends test against these same bits. Past half the circumference, every point.
      const double half_angle = radius / (2.0 * kEarthRadius);
      if (half_angle >= std::acos(-1.0) / 2) {
        hi = 4.0 * (1.0 + 0x1p-20);
        return;
      }
      const double chord = 2.0 * std::sin(half_angle);
      hi = chord * chord;
      if (hi < 0x1p-200) hi = 0;
      return;
    }
  }
  hi = 0;
}

bool Engine::attributes_valid(const Update& u) const noexcept {
  const std::size_t n = u.attributes.size(), words = config_.attribute_words;
  switch (u.kind) {
    case UpdateKind::Insert: return n == 0 || n == words;
    case UpdateKind::SetAttributes: return words > 0 && n == words;
    default: return n == 0;
  }
}

void Engine::validate_attributes(const Update& u, const std::string& where) const {
  if (attributes_valid(u)) return;
  const std::size_t n = u.attributes.size(), words = config_.attribute_words;
  if (words == 0) {
    fail_argument(where, ": attributes has ", n, " words but the store's points carry none (StoreConfig::attribute_words = 0)");
  }
  if (u.kind == UpdateKind::Insert || u.kind == UpdateKind::SetAttributes) {
    fail_argument(where, ": attributes has ", n, " words but the store's points carry ", words,
                  " (StoreConfig::attribute_words)", u.kind == UpdateKind::Insert ? "; give all of them or none" : "");
  }
  fail_argument(where, ": only insert and set_attributes carry attributes, not ", to_string(u.kind));
}

void Engine::note_attributes(const ResolvedBatch& batch) {
  const std::size_t words = config_.attribute_words;
  if (words == 0) return;
  if (attributes_.size() < std::size_t(batch.slot_count) * words) attributes_.resize(std::size_t(batch.slot_count) * words, 0u);
  for (std::size_t i = 0; i < batch.attribute_slots.size(); ++i) {
    const std::size_t at = std::size_t(batch.attribute_slots[i]) * words;
    if (at + words > attributes_.size()) attributes_.resize(at + words, 0u);
    std::copy_n(batch.attributes.data() + i * words, words, attributes_.data() + at);
  }
}

void Engine::take_filters(const QueryFilters& f, std::size_t num_queries, QueryRequest& request,
                          const char* caller) const {
  const std::size_t words = config_.attribute_words;
  if (!f.where.empty()) {
    if (words == 0) {
      fail_argument(caller, ": where holds ", f.where.size(), " predicates but the store's points carry no attributes "
                    "(StoreConfig::attribute_words = 0)");
    }
    if (f.where.size() != 1 && f.where.size() != num_queries) {
      fail_argument(caller, ": where has ", f.where.size(), " predicates for ", num_queries,
                    " queries (give one for all, one per query, or none)");
    }
    for (std::size_t i = 0; i < f.where.size(); ++i) {
      const Predicate& p = f.where[i];
      for (std::size_t w = words; w < kMaxAttributeWords; ++w) {
        if (p.required[w] != 0 || p.forbidden[w] != 0) {
          fail_argument(caller, ": where[", i, "] tests attribute word ", w, " but the store's points carry ", words,
                        " (StoreConfig::attribute_words)");
        }
      }
      if (p.range_word < -1 || (p.range_word >= 0 && std::size_t(p.range_word) >= words)) {
        fail_argument(caller, ": where[", i, "].range_word = ", p.range_word, " is not -1 (no range) or a word below ",
                      words, " (StoreConfig::attribute_words)");
      }
      if (p.range_word >= 0 && p.range_min > p.range_max) {
        fail_argument(caller, ": where[", i, "] has range_min = ", p.range_min, " > range_max = ", p.range_max);
      }
    }
  }
  if (f.radius_on) {
    if (std::isnan(f.radius)) fail_argument(caller, ": radius is NaN");
    if (!(f.radius >= 0) && config_.metric != Metric::InnerProduct) {  // -<q, p> may be negative: any bound is
      fail_argument(caller, ": radius = ", f.radius, " is negative");
    }
    if (std::isinf(f.radius) && f.radius < 0) fail_argument(caller, ": radius is -infinity");
    if (f.radius_all && f.cap < 1) fail_argument(caller, ": max_results = 0 (give at least 1, or kNoLimit for no cap)");
  }
  try {
    request.where.assign(f.where.begin(), f.where.end());
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(concat(caller, ": out of memory for ", f.where.size(), " predicates"));
  }
  if (f.radius_on) {
    request.radius.active = true;
    request.radius.all = f.radius_all;
    request.radius.cap = f.cap;
    request.radius.radius = f.radius;
    radius_limit(config_.metric, f.radius, request.radius.limit_hi, request.radius.limit_lo);
  }
}

}  // namespace streamknn::detail
