// libFuzzer harness: arbitrary operation sequences against a ReferenceSet and a simple model.
//
// The input picks a store (dim 1-4, metric, target kind, queue capacity 1-32) and then a
// stream of operations: inserts, moves, erases and set-targets (with ids from a small pool
// and at the 64-bit limits, coordinates that may be NaN/Inf, wrong dimensions, labels out of
// range), push or try_push, publish, searches (any k, with or without id ranges) and
// classifier / regressor predictions. The model says for each call whether it must throw
// InvalidArgument, whether try_push must find the queue full, what every publish must report
// and, for L2 and inner product (whose ranks are exact on the quarter-integer coordinates used
// here), exactly which neighbours a search must return; for cosine and haversine it checks the
// answers' shape (sorted, padded, live ids in range). Any difference aborts with a message.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "streamknn/streamknn.hpp"

using namespace streamknn;

namespace {

[[noreturn]] void fail(const char* what, long long a = 0, long long b = 0) {
  std::fprintf(stderr, "fuzz_ops: %s (%lld, %lld)\n", what, a, b);
  std::abort();
}
#define EXPECT(cond, ...) \
  do {                    \
    if (!(cond)) fail("expectation failed: " #cond, ##__VA_ARGS__); \
  } while (0)

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }

 private:
  const std::uint8_t* data_;
  std::size_t size_, pos_ = 0;
};

constexpr PointId kIds[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, PointId(1) << 63, kInvalidId - 2, kInvalidId - 1,
                            kInvalidId};

float coordinate(std::uint8_t b) {
  switch (b) {
    case 0x80: return std::numeric_limits<float>::quiet_NaN();
    case 0x81: return std::numeric_limits<float>::infinity();
    case 0x82: return -std::numeric_limits<float>::infinity();
    default: return float(static_cast<std::int8_t>(b)) / 4.0f;  // exact quarter-integers in [-32, 32)
  }
}

struct Point {
  std::vector<float> vector;
  std::int32_t label = -1;
  std::vector<float> values;
};

struct Pending {
  UpdateKind kind;
  PointId id;
  Point payload;
};

class Harness {
 public:
  Harness(Input& in) : in_(in) {
    const std::uint8_t a = in_.byte(), b = in_.byte();
    metric_ = static_cast<Metric>(a % 4);
    dim_ = metric_ == Metric::Haversine ? 2 : 1 + (a >> 2) % 4;
    target_ = (a >> 4) % 3 == 0 ? TargetSpec::none() : (a >> 4) % 3 == 1 ? TargetSpec::classes(3) : TargetSpec::outputs(2);
    capacity_ = 1 + b % 32;
    StoreConfig c;
    c.dim = dim_;
    c.metric = metric_;
    c.target = target_;
    c.queue_capacity = capacity_;
    c.capacity_hint = 1 + (b >> 5);
    c.backend = BackendKind::Cpu;
    store_.emplace(c);
  }

  void run() {
    for (int steps = 0; !in_.empty() && steps < 256; ++steps) {
      const std::uint8_t op = in_.byte();
      switch (op % 8) {
        case 0: case 1: case 2: update(op); break;
        case 3: publish(); break;
        case 4: case 5: search(op); break;
        case 6: predict(op); break;
        default: update(op); break;
      }
    }
    publish();
    publish();
  }

 private:
  std::vector<float> vector_arg(std::uint8_t selector) {
    std::size_t n = dim_;
    if (selector % 16 == 0) n = dim_ + 1;         // wrong dimension
    if (selector % 16 == 1) n = dim_ - 1;         // wrong dimension (0 for dim 1)
    std::vector<float> v(n);
    for (float& x : v) x = coordinate(in_.byte());
    if (metric_ == Metric::Haversine && n == 2 && std::isfinite(v[0])) v[0] *= 4.0f;  // latitudes past 90 too
    return v;
  }

  /// The error the library must raise for a point, or nullptr.
  bool bad_point(const std::vector<float>& v) const {
    if (v.size() != dim_) return true;
    for (float x : v) {
      if (!std::isfinite(x)) return true;
    }
    if (metric_ == Metric::Cosine && std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; })) return true;
    if (metric_ == Metric::Haversine && std::fabs(v[0]) > 90.0f) return true;
    return false;
  }

  void update(std::uint8_t op) {
    const std::uint8_t sel = in_.byte();
    const auto kind = static_cast<UpdateKind>(sel % 4);
    const PointId id = kIds[(sel >> 2) % 16];
    const std::uint8_t shape = in_.byte();
    Pending p{kind, id, {}};
    bool bad = id == kInvalidId;
    Update u;
    u.kind = kind;
    u.id = id;
    if (kind == UpdateKind::Insert || kind == UpdateKind::Move) {
      p.payload.vector = vector_arg(shape);
      bad |= bad_point(p.payload.vector);
      u.vector = p.payload.vector;
    }
    const bool carries_target = kind == UpdateKind::SetTarget || (kind == UpdateKind::Insert && (shape & 0x20));
    if (carries_target) {
      const std::uint8_t t = in_.byte();
      u.has_target = true;
      if (t % 5 == 0) {  // values on any store
        p.payload.values.resize(t % 3 == 0 ? 3 : 2);
        for (float& x : p.payload.values) x = coordinate(in_.byte());
        u.values = p.payload.values;
        bad |= target_.kind != TargetSpec::Kind::Outputs || p.payload.values.size() != target_.count;
        for (float x : p.payload.values) bad |= !std::isfinite(x);
      } else {
        p.payload.label = static_cast<std::int8_t>(t) % 5;  // -4..4: some out of [0, 3)
        u.label = p.payload.label;
        bad |= target_.kind != TargetSpec::Kind::Classes || p.payload.label < 0 || p.payload.label >= 3;
      }
    }
    if (kind == UpdateKind::Insert) bad |= (target_.kind != TargetSpec::Kind::None) != carries_target;
    if (kind == UpdateKind::Move && (shape & 0x40)) {  // a move that carries a target
      u.has_target = true;
      u.label = 0;
      bad = true;
    }
    if (kind == UpdateKind::Erase && (shape & 0x40)) {  // an erase that carries a vector
      p.payload.vector.assign(dim_, 1.0f);
      u.vector = p.payload.vector;
      bad = true;
    }
    const bool full = pending_.size() == capacity_;
    const bool blocking = (op & 0x10) && !full;  // never block: nobody else would publish
    bool accepted = false;
    try {
      if (blocking) {
        store_->push(u);
        accepted = true;
      } else {
        accepted = store_->try_push(u);
      }
    } catch (const InvalidArgument&) {
      EXPECT(bad, int(kind), int(id % 1000));
      return;
    }
    EXPECT(!bad, int(kind), int(id % 1000));
    EXPECT(accepted == !full, int(pending_.size()), int(capacity_));
    if (accepted) pending_.push_back(p);
  }

  void publish() {
    PublishReport want;
    for (const Pending& p : pending_) {
      const bool exists = points_.count(p.id) != 0;
      const bool ok = p.kind == UpdateKind::Insert ? !exists : exists;
      if (!ok) {
        want.rejected.push_back({p.id, p.kind, p.kind == UpdateKind::Insert ? RejectReason::DuplicateId : RejectReason::UnknownId});
        continue;
      }
      switch (p.kind) {
        case UpdateKind::Insert: points_[p.id] = p.payload; ++want.inserted; break;
        case UpdateKind::Move: points_[p.id].vector = p.payload.vector; ++want.moved; break;
        case UpdateKind::Erase: points_.erase(p.id); ++want.erased; break;
        case UpdateKind::SetTarget:
          points_[p.id].label = p.payload.label;
          points_[p.id].values = p.payload.values;
          ++want.retargeted;
          break;
      }
    }
    want.drained = pending_.size();
    want.applied = want.inserted + want.moved + want.erased + want.retargeted;
    if (want.applied > 0) ++epoch_;
    pending_.clear();
    const PublishReport got = store_->publish();
    EXPECT(got.drained == want.drained, got.drained, want.drained);
    EXPECT(got.applied == want.applied, got.applied, want.applied);
    EXPECT(got.inserted == want.inserted && got.moved == want.moved && got.erased == want.erased &&
           got.retargeted == want.retargeted);
    EXPECT(got.rejected.size() == want.rejected.size(), got.rejected.size(), want.rejected.size());
    for (std::size_t i = 0; i < want.rejected.size(); ++i) {
      EXPECT(got.rejected[i].id == want.rejected[i].id && got.rejected[i].kind == want.rejected[i].kind &&
             got.rejected[i].reason == want.rejected[i].reason, int(i));
    }
    EXPECT(got.epoch == epoch_, got.epoch, epoch_);
    EXPECT(got.size == points_.size() && store_->size() == points_.size(), got.size, points_.size());
    EXPECT(store_->pending() == 0);
  }

  struct Ranked {
    double rank;
    PointId id;
    const Point* point;
  };

  std::vector<Ranked> reference(std::span<const float> q, std::size_t k, IdRange range) const {
    std::vector<Ranked> all;
    for (const auto& [id, p] : points_) {
      if (id < range.begin || id >= range.end) continue;
      double r = 0;
      for (std::size_t i = 0; i < dim_; ++i) {
        r += metric_ == Metric::InnerProduct ? -double(q[i]) * p.vector[i] : (double(q[i]) - p.vector[i]) * (double(q[i]) - p.vector[i]);
      }
      all.push_back({r, id, &p});
    }
    std::sort(all.begin(), all.end(), [](const Ranked& a, const Ranked& b) { return a.rank < b.rank || (a.rank == b.rank && a.id < b.id); });
    if (all.size() > k) all.resize(k);
    return all;
  }

  std::size_t k_arg() {
    const std::uint8_t b = in_.byte();
    if (b == 0xff) return kMaxK + 1;
    if (b == 0xfe) return kMaxK;
    return b % 20;  // includes k = 0
  }

  /// Query vectors and ranges; returns whether the library must refuse them. nq is the
  /// number of queries the library sees (the floats split into rows of dim).
  bool query_args(std::vector<float>& q, std::vector<IdRange>& ranges, std::size_t& nq) {
    const std::uint8_t b = in_.byte();
    q.clear();
    ranges.clear();
    for (std::size_t i = 0; i < b % 4u; ++i) {  // 0..3 vectors, some of the wrong size
      const auto v = vector_arg(b & 0xf0 ? 2 : in_.byte());
      q.insert(q.end(), v.begin(), v.end());
    }
    if (q.size() % dim_ != 0) {
      nq = 0;
      return true;
    }
    nq = q.size() / dim_;
    bool bad = false;
    for (std::size_t i = 0; i < nq; ++i) bad |= bad_point(std::vector<float>(q.begin() + i * dim_, q.begin() + (i + 1) * dim_));
    if (b & 0x08) {
      const std::size_t count = (b & 0x04) ? nq + 1 : nq;  // sometimes one range too many
      for (std::size_t i = 0; i < count; ++i) {
        IdRange r{kIds[in_.byte() % 16], kIds[in_.byte() % 16]};
        ranges.push_back(r);
      }
      if (count != nq) return true;
      for (const IdRange& r : ranges) bad |= r.begin > r.end;
    }
    return bad;
  }

  void search(std::uint8_t) {
    std::vector<float> q;
    std::vector<IdRange> ranges;
    std::size_t nq = 0;
    const std::size_t k = k_arg();
    bool bad = query_args(q, ranges, nq) || k < 1 || k > kMaxK;
    Neighbors n;
    try {
      n = store_->search(q, k, ranges);
    } catch (const InvalidArgument&) {
      EXPECT(bad);
      return;
    }
    EXPECT(!bad);
    EXPECT(n.num_queries == nq && n.k == k && n.ids.size() == nq * k && n.distances.size() == nq * k);
    EXPECT(n.epoch == epoch_, n.epoch, epoch_);
    const bool exact = metric_ == Metric::L2 || metric_ == Metric::InnerProduct;
    for (std::size_t i = 0; i < nq; ++i) {
      const IdRange range = ranges.empty() ? IdRange{} : ranges[i];
      const auto want = reference(std::span(q).subspan(i * dim_, dim_), k, range);
      const auto ids = n.ids_of(i);
      const auto d = n.distances_of(i);
      EXPECT(n.found(i) == want.size(), n.found(i), want.size());
      for (std::size_t j = 0; j < k; ++j) {
        if (j >= want.size()) {
          EXPECT(ids[j] == kInvalidId && std::isinf(d[j]) && d[j] > 0, int(j));
          continue;
        }
        EXPECT(points_.count(ids[j]) && ids[j] >= range.begin && ids[j] < range.end, int(j));
        if (j > 0) EXPECT(d[j - 1] <= d[j], int(j));
        if (exact) {
          EXPECT(ids[j] == want[j].id, (long long)(ids[j] % 1000000), (long long)(want[j].id % 1000000));
          const double r = metric_ == Metric::L2 ? std::sqrt(want[j].rank) : want[j].rank;
          EXPECT(std::fabs(d[j] - r) <= 1e-6 * std::max(1.0, std::fabs(r)), int(j));
        }
      }
    }
  }

  void predict(std::uint8_t op) {
    std::vector<float> q;
    std::vector<IdRange> ranges;
    std::size_t nq = 0;
    const std::size_t k = k_arg();
    const bool bad_query = query_args(q, ranges, nq);
    const bool exact = metric_ == Metric::L2 || metric_ == Metric::InnerProduct;
    if (target_.kind == TargetSpec::Kind::Classes) {
      const Weights w = (op & 0x10) ? Weights::Distance : Weights::Uniform;
      const bool bad_model = k < 1 || k > kMaxK || (w == Weights::Distance && metric_ == Metric::InnerProduct);
      std::optional<KnnClassifier> clf;
      try {
        clf.emplace(*store_, k, w);
      } catch (const InvalidArgument&) {
        EXPECT(bad_model);
        return;
      }
      EXPECT(!bad_model);
      ClassPredictions p;
      try {
        p = clf->predict_proba(q, ranges);
      } catch (const InvalidArgument&) {
        EXPECT(bad_query);
        return;
      }
      EXPECT(!bad_query);
      EXPECT(p.labels.size() == nq && p.probabilities.size() == nq * 3 && p.num_classes == 3);
      for (std::size_t i = 0; i < nq; ++i) {
        const auto want = reference(std::span(q).subspan(i * dim_, dim_), k, ranges.empty() ? IdRange{} : ranges[i]);
        double sum = 0;
        for (float x : p.probabilities_of(i)) {
          EXPECT(x >= 0 && x <= 1.0000001f);
          sum += x;
        }
        if (want.empty()) {
          EXPECT(p.labels[i] == kNoLabel && sum == 0);
          continue;
        }
        EXPECT(p.labels[i] >= 0 && p.labels[i] < 3 && std::fabs(sum - 1) < 1e-5);
        if (exact && w == Weights::Uniform) {
          double votes[3] = {0, 0, 0};
          for (const auto& r : want) votes[r.point->label] += 1;
          const std::int32_t label = int(std::max_element(votes, votes + 3) - votes);  // first maximum: smallest label
          EXPECT(p.labels[i] == label, p.labels[i], label);
        }
      }
    } else if (target_.kind == TargetSpec::Kind::Outputs) {
      const auto a = static_cast<RegressionAggregate>((op >> 4) % 3);
      const bool bad_model = k < 1 || k > kMaxK || (a == RegressionAggregate::WeightedMean && metric_ == Metric::InnerProduct);
      std::optional<KnnRegressor> reg;
      try {
        reg.emplace(*store_, k, a);
      } catch (const InvalidArgument&) {
        EXPECT(bad_model);
        return;
      }
      EXPECT(!bad_model);
      RegressionPredictions p;
      try {
        p = reg->predict(q, ranges);
      } catch (const InvalidArgument&) {
        EXPECT(bad_query);
        return;
      }
      EXPECT(!bad_query);
      EXPECT(p.values.size() == nq * 2);
      for (std::size_t i = 0; i < nq; ++i) {
        const auto want = reference(std::span(q).subspan(i * dim_, dim_), k, ranges.empty() ? IdRange{} : ranges[i]);
        for (std::size_t o = 0; o < 2; ++o) {
          const float got = p.values_of(i)[o];
          if (want.empty()) {
            EXPECT(std::isnan(got));
            continue;
          }
          double lo = 1e30, hi = -1e30;  // every aggregate lies within the neighbours' values
          for (const auto& r : want) {
            lo = std::min<double>(lo, r.point->values[o]);
            hi = std::max<double>(hi, r.point->values[o]);
          }
          if (exact) EXPECT(got >= lo - 1e-4 && got <= hi + 1e-4);
          EXPECT(std::isfinite(got));
        }
      }
    } else {
      try {
        KnnClassifier clf(*store_, 1);
        fail("a classifier was built on a store without labels");
      } catch (const InvalidArgument&) {
      }
    }
  }

  Input& in_;
  Metric metric_;
  std::size_t dim_;
  TargetSpec target_;
  std::size_t capacity_;
  std::optional<ReferenceSet> store_;
  std::map<PointId, Point> points_;
  std::vector<Pending> pending_;
  std::uint64_t epoch_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  Harness h(in);
  h.run();
  return 0;
}
