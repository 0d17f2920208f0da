// The sequential model behind the linearizability test (test_linearizability.cpp): each
// producer's op generator and log entries, the records of publishes and queries, the prefix
// counts the report checks sum, and the comparison of one answered row against a model state.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "reliability/reliability_support.hpp"

namespace linearizability {

using namespace test;
using namespace reliability;

constexpr int kProducers = kIdSpaces;
constexpr std::int32_t kClasses = 4;
constexpr std::size_t kTargetLive = 160;     // each producer keeps about this many points
constexpr std::size_t kMaxOpsPerProducer = 4'000'000;
constexpr std::size_t kMaxQueryRecords = 150'000;  // per query thread
constexpr std::size_t kClassifierK = 5;

struct Op {
  PointId id;
  GridPoint at;          // insert / move
  std::int8_t label;     // insert / set-target
  UpdateKind kind;
  bool valid;
  RejectReason reason;   // when !valid
};

struct alignas(64) Progress {
  std::atomic<std::uint64_t> started{0};  // ops whose push had begun
  std::atomic<std::uint64_t> done{0};     // ops whose push had returned
};

struct PublishRecord {
  std::array<std::uint64_t, kProducers> lo{}, hi{};
  PublishReport report;
};

struct QueryRow {
  GridPoint at;
  std::int8_t producer;  // -1: the row's range holds no id at all
};

struct QueryRecord {
  bool classifier = false;
  std::uint32_t k = 0;
  std::uint64_t floor = 0;  // epoch of the last publish that had returned before submission
  std::uint64_t epoch = 0;
  std::vector<QueryRow> rows;
  std::vector<PointId> ids;         // search: rows x k
  std::vector<float> distances;     // search: rows x k
  std::vector<std::int32_t> labels; // classifier: one per row
  std::vector<float> probabilities; // classifier: rows x kClasses
};

inline GridPoint random_point(std::mt19937_64& g, int lo = 0, int hi = 31) {
  std::uniform_int_distribution<int> d(lo, hi);
  return {std::int8_t(d(g)), std::int8_t(d(g)), std::int8_t(d(g))};
}

/// One producer's op generator: a sequential model of its own id space.
class ProducerModel {
 public:
  explicit ProducerModel(int p) : p_(p) {}

  Op next(std::mt19937_64& g) {
    const bool grow = live_.size() < kTargetLive;
    // weights: insert fresh, re-insert erased, duplicate insert, move, move unknown, erase,
    // erase unknown, set-target, set-target unknown
    const std::array<int, 9> w = {grow ? 260 : 90, erased_.empty() ? 0 : 40, live_.empty() ? 0 : 20,
                                  live_.empty() ? 0 : 300, 15, live_.empty() ? 0 : (grow ? 90 : 260), 15,
                                  live_.empty() ? 0 : 120, 15};
    int total = 0;
    for (int x : w) total += x;
    int r = static_cast<int>(g() % std::uint64_t(total)), choice = 0;
    while (r >= w[choice]) r -= w[choice++];
    Op op{};
    op.valid = true;
    op.at = random_point(g);
    op.label = std::int8_t(g() % kClasses);
    switch (choice) {
      case 0: op.kind = UpdateKind::Insert; op.id = id_in_space(p_, fresh_++); break;
      case 1: {
        const std::size_t i = g() % erased_.size();
        op.kind = UpdateKind::Insert;
        op.id = erased_[i];
        erased_[i] = erased_.back();
        erased_.pop_back();
        break;
      }
      case 2: op.kind = UpdateKind::Insert; op.id = live_[g() % live_.size()]; op.valid = false; op.reason = RejectReason::DuplicateId; break;
      case 3: op.kind = UpdateKind::Move; op.id = live_[g() % live_.size()]; break;
      case 5: {
        const std::size_t i = g() % live_.size();
        op.kind = UpdateKind::Erase;
        op.id = live_[i];
        break;
      }
      case 7: op.kind = UpdateKind::SetTarget; op.id = live_[g() % live_.size()]; break;
      default: {  // 4, 6, 8: an id this producer does not hold (never inserted, or erased)
        op.kind = choice == 4 ? UpdateKind::Move : choice == 6 ? UpdateKind::Erase : UpdateKind::SetTarget;
        op.id = (!erased_.empty() && g() % 2) ? erased_[g() % erased_.size()] : unknown_id_in_space(p_, unknown_++);
        op.valid = false;
        op.reason = RejectReason::UnknownId;
        break;
      }
    }
    apply(op);
    return op;
  }

 private:
  void apply(const Op& op) {
    if (!op.valid) return;
    if (op.kind == UpdateKind::Insert) {
      index_[op.id] = live_.size();
      live_.push_back(op.id);
    } else if (op.kind == UpdateKind::Erase) {
      const std::size_t i = index_.at(op.id);
      index_[live_.back()] = i;
      live_[i] = live_.back();
      live_.pop_back();
      index_.erase(op.id);
      erased_.push_back(op.id);
    }
  }
  int p_;
  std::uint64_t fresh_ = 0, unknown_ = 0;
  std::vector<PointId> live_, erased_;
  std::unordered_map<PointId, std::size_t> index_;
};

/// Updates that must be refused at push time; none may reach the queue.
inline Update bad_update(std::mt19937_64& g, int p, std::vector<float>& buffer) {
  static constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  static constexpr float kInf = std::numeric_limits<float>::infinity();
  const PointId id = unknown_id_in_space(p, 1'000'000 + g() % 1000);
  buffer = {1, 2, 3};
  switch (g() % 6) {
    case 0: buffer[1] = kNaN; return Update::insert(id, buffer, 1);
    case 1: buffer[2] = -kInf; return Update::move(id, buffer);
    case 2: buffer.resize(2); return Update::insert(id, buffer, 1);
    case 3: return Update::insert(id, buffer, kClasses);
    case 4: return Update::insert(kInvalidId, buffer, 0);
    default: return Update::set_target(id, -1);
  }
}

/// Prefix sums over one producer's op log, for the report checks.
struct PrefixCounts {
  std::vector<std::uint32_t> invalid, inserted, moved, erased, retargeted;
  explicit PrefixCounts(const std::vector<Op>& ops) {
    for (auto* v : {&invalid, &inserted, &moved, &erased, &retargeted}) v->assign(ops.size() + 1, 0);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      invalid[i + 1] = invalid[i] + !op.valid;
      inserted[i + 1] = inserted[i] + (op.valid && op.kind == UpdateKind::Insert);
      moved[i + 1] = moved[i] + (op.valid && op.kind == UpdateKind::Move);
      erased[i + 1] = erased[i] + (op.valid && op.kind == UpdateKind::Erase);
      retargeted[i + 1] = retargeted[i] + (op.valid && op.kind == UpdateKind::SetTarget);
    }
  }
};

using Tuple = std::array<std::uint64_t, 5>;  // sum of prefix lengths, inserted, moved, erased, retargeted
struct TupleHash {
  std::size_t operator()(const Tuple& t) const noexcept {
    std::size_t h = 0;
    for (auto x : t) h = h * 0x9e3779b97f4a7c15ULL + x;
    return h;
  }
};

/// Compares one query row against the model state; returns an empty string on a match.
inline std::string compare_row(const QueryRecord& rec, std::size_t row, const std::unordered_map<PointId, GridEntry>& state,
                        std::vector<ExactNeighbor>& scratch) {
  const auto want = exact_knn(state, rec.rows[row].at, rec.k, scratch);
  if (!rec.classifier) {
    for (std::size_t j = 0; j < rec.k; ++j) {
      const PointId id = rec.ids[row * rec.k + j];
      const float d = rec.distances[row * rec.k + j];
      if (j >= want.size()) {
        if (id != kInvalidId || !(std::isinf(d) && d > 0)) {
          return concat_message("position ", j, " should be padding (", want.size(), " points visible), got id ", id,
                                " at ", d);
        }
        continue;
      }
      if (id != want[j].id || !same_distance(d, want[j].rank)) {
        return concat_message("position ", j, ": got id ", id, " at ", d, ", the model has id ", want[j].id, " at ",
                              std::sqrt(double(want[j].rank)));
      }
    }
    return {};
  }
  std::array<double, kClasses> votes{};
  for (const auto& n : want) votes[n.label] += 1;
  std::int32_t label = want.empty() ? kNoLabel : 0;
  for (std::int32_t c = 1; c < kClasses && !want.empty(); ++c) {
    if (votes[c] > votes[label]) label = c;
  }
  if (rec.labels[row] != label) return concat_message("label ", rec.labels[row], " but the model votes ", label);
  for (std::int32_t c = 0; c < kClasses; ++c) {
    const double p = want.empty() ? 0.0 : votes[c] / double(want.size());
    if (std::fabs(rec.probabilities[row * kClasses + c] - p) > 1e-6) {
      return concat_message("probability of class ", c, " is ", rec.probabilities[row * kClasses + c], ", the model says ", p);
    }
  }
  return {};
}

using ModelState = std::unordered_map<PointId, GridEntry>;
using Clock = std::chrono::steady_clock;
using Deadline = decltype(Clock::now() + std::chrono::duration<double>(0));
using RowRef = std::pair<const QueryRecord*, std::uint32_t>;  // a query and one of its rows

/// Applies one op to a producer's model state; an invalid op changes nothing.
inline void apply_op(ModelState& state, const Op& op) {
  if (!op.valid) return;
  switch (op.kind) {
    case UpdateKind::Insert: state[op.id] = {op.at, op.label}; break;
    case UpdateKind::Move: state.at(op.id).at = op.at; break;
    case UpdateKind::Erase: state.erase(op.id); break;
    case UpdateKind::SetTarget: state.at(op.id).label = op.label; break;
  }
}

/// The update that pushes `op`; it views `v`, the op's point, which must outlive it.
inline Update to_update(const Op& op, const std::array<float, kGridDim>& v) {
  Update u;
  switch (op.kind) {
    case UpdateKind::Insert: u = Update::insert(op.id, v, op.label); break;
    case UpdateKind::Move: u = Update::move(op.id, v); break;
    case UpdateKind::Erase: u = Update::erase(op.id); break;
    case UpdateKind::SetTarget: u = Update::set_target(op.id, op.label); break;
  }
  return u;
}

}  // namespace linearizability
