// Linearizability of updates against the visibility contract (DESIGN.md, "Visibility").
//
// 8 producers push a random mix of inserts, moves, erases and set-targets (about 8% of them
// id errors, plus updates that must be refused at push time) for STREAMKNN_STRESS_SECONDS
// (default 10 s); one thread publishes at random intervals and two threads query. Each producer
// owns an id space, so its ops are independent of the others' and a query restricted to that
// space (IdRange) depends only on how long a prefix of the producer's op sequence its snapshot
// holds. Around every publish the publisher records, per producer, the ops that had finished
// pushing when publish began (a lower bound on the prefix) and those that had started when it
// returned (an upper bound). Afterwards every answer is replayed against a sequential model:
//  * for each publish and producer, the prefix lengths within the bounds that explain the
//    publish report's rejections, every answer computed on that epoch and the report's counts
//    summed over producers must leave at least one candidate (all answers at one epoch agree on
//    one prefix), and the prefixes must be non-decreasing from publish to publish;
//  * every answer carries an epoch at least that of the last publish that had returned before
//    it was submitted;
//  * at the end every op was drained once, rejections came in each producer's order, and the
//    store holds exactly the producers' final models (every point checked).
// Points lie on an integer grid so every distance is exact and answers are compared id for id.
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <unordered_set>

#include "reliability/reliability_support.hpp"

using namespace test;
using namespace reliability;

namespace {

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

GridPoint random_point(std::mt19937_64& g, int lo = 0, int hi = 31) {
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
Update bad_update(std::mt19937_64& g, int p, std::vector<float>& buffer) {
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
std::string compare_row(const QueryRecord& rec, std::size_t row, const std::unordered_map<PointId, GridEntry>& state,
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

}  // namespace

TEST_CASE("linearizability: 8 producers, a random publisher and 2 query threads agree with a sequential model") {
  const double seconds = stress_seconds(10.0);
  StoreConfig config = config_for(kGridDim, Metric::L2, TargetSpec::classes(kClasses));
  config.queue_capacity = 512;  // small enough that producers meet a full queue
  config.capacity_hint = 16;    // and the store grows under load
  ReferenceSet store(config);
  MESSAGE("backend ", store.backend_name(), ", ", seconds, " s (STREAMKNN_STRESS_SECONDS)");

  Failures failures;
  std::array<Progress, kProducers> progress;
  std::vector<std::vector<Op>> logs(kProducers);
  std::atomic<std::size_t> refused_at_push{0}, full_queue{0};
  std::atomic<int> producers_running{kProducers};
  std::atomic<bool> queries_stop{false};
  std::atomic<std::uint64_t> floor{0};
  std::vector<PublishRecord> publishes;
  std::array<std::vector<QueryRecord>, 2> queries;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);

  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      auto g = rng(0x1000 + p);
      ProducerModel model(p);
      std::vector<Op>& log = logs[p];
      std::vector<float> bad;
      try {
        while (log.size() < kMaxOpsPerProducer && std::chrono::steady_clock::now() < deadline) {
          if (g() % 200 == 0) {  // refused at the boundary: nothing queued, nothing counted
            const Update u = bad_update(g, p, bad);
            try {
              store.push(u);
              failures.add("producer ", p, ": a malformed ", to_string(u.kind), " of id ", u.id, " was accepted");
            } catch (const InvalidArgument&) {
              ++refused_at_push;
            }
            continue;
          }
          const Op op = model.next(g);
          const auto v = to_floats(op.at);
          Update u;
          switch (op.kind) {
            case UpdateKind::Insert: u = Update::insert(op.id, v, op.label); break;
            case UpdateKind::Move: u = Update::move(op.id, v); break;
            case UpdateKind::Erase: u = Update::erase(op.id); break;
            case UpdateKind::SetTarget: u = Update::set_target(op.id, op.label); break;
          }
          progress[p].started.fetch_add(1);
          if (g() % 2 == 0) {
            store.push(u);
          } else if (!store.try_push(u)) {
            ++full_queue;
            store.push(u);  // waits for the publisher
          }
          progress[p].done.fetch_add(1);
          log.push_back(op);
        }
      } catch (const std::exception& e) {
        failures.add("producer ", p, " threw: ", e.what());
      }
      --producers_running;
    });
  }

  std::thread publisher([&] {
    auto g = rng(0x2000);
    bool quiet = false;  // producers finished and the queue drained
    while (!quiet) {
      const auto r = g() % 10;
      if (r >= 2) std::this_thread::sleep_for(std::chrono::microseconds(r < 8 ? 50 + g() % 500 : 1000 + g() % 2000));
      const bool producers_done = producers_running.load() == 0;
      PublishRecord rec;
      for (int p = 0; p < kProducers; ++p) rec.lo[p] = progress[p].done.load();
      try {
        rec.report = store.publish();
      } catch (const std::exception& e) {
        failures.add("publish threw: ", e.what());
        continue;
      }
      for (int p = 0; p < kProducers; ++p) rec.hi[p] = progress[p].started.load();
      if (store.epoch() != rec.report.epoch || store.size() != rec.report.size) {
        failures.add("after publish: epoch() ", store.epoch(), " size() ", store.size(), " but the report says epoch ",
                     rec.report.epoch, " size ", rec.report.size);
      }
      floor.store(rec.report.epoch);
      quiet = producers_done && rec.report.drained == 0 && store.pending() == 0;
      publishes.push_back(std::move(rec));
    }
    queries_stop = true;
  });

  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      auto g = rng(0x3000 + t);
      KnnClassifier classifier(store, kClassifierK);
      std::vector<QueryRecord>& out = queries[t];
      const std::array<std::uint32_t, 4> ks = {1, 2, 7, 24};
      auto make = [&](bool use_classifier) {
        QueryRecord rec;
        rec.classifier = use_classifier;
        rec.k = use_classifier ? kClassifierK : ks[g() % ks.size()];
        for (int p = 0; p < kProducers; ++p) rec.rows.push_back({random_point(g, -2, 33), std::int8_t(p)});
        if (!use_classifier) rec.rows.push_back({random_point(g, -2, 33), -1});
        return rec;
      };
      auto inputs = [](const QueryRecord& rec, std::vector<float>& q, std::vector<IdRange>& ranges) {
        q.clear();
        ranges.clear();
        for (const auto& row : rec.rows) {
          const auto v = to_floats(row.at);
          q.insert(q.end(), v.begin(), v.end());
          ranges.push_back(row.producer >= 0 ? space_range(row.producer)
                                             : IdRange{unknown_id_in_space(0, 0), unknown_id_in_space(0, 1u << 20)});
        }
      };
      auto take = [](QueryRecord& rec, Neighbors n) {
        rec.epoch = n.epoch;
        rec.ids = std::move(n.ids);
        rec.distances = std::move(n.distances);
      };
      std::vector<float> q1, q2;
      std::vector<IdRange> r1, r2;
      std::uint64_t last_epoch = 0;
      try {
        while (!queries_stop.load() && out.size() + 2 <= kMaxQueryRecords) {
          if (t == 0) {  // synchronous searches
            QueryRecord rec = make(false);
            inputs(rec, q1, r1);
            rec.floor = floor.load();
            take(rec, store.search(q1, rec.k, r1));
            out.push_back(std::move(rec));
          } else {  // two asynchronous requests in flight: the classifier, then a search
            QueryRecord a = make(true), b = make(false);
            inputs(a, q1, r1);
            inputs(b, q2, r2);
            a.floor = floor.load();
            auto ta = classifier.submit(q1, true, r1);
            b.floor = floor.load();
            auto tb = store.submit(q2, b.k, r2);
            ClassPredictions pa = ta.get();
            a.epoch = pa.epoch;
            a.labels = std::move(pa.labels);
            a.probabilities = std::move(pa.probabilities);
            take(b, tb.get());
            if (b.epoch < a.epoch) {
              failures.add("query thread 1: a search submitted after another saw an older epoch (", b.epoch, " < ",
                           a.epoch, ")");
            }
            out.push_back(std::move(a));
            out.push_back(std::move(b));
          }
          if (out.back().epoch < last_epoch) {
            failures.add("query thread ", t, ": epoch went back from ", last_epoch, " to ", out.back().epoch);
          }
          last_epoch = out.back().epoch;
        }
      } catch (const std::exception& e) {
        failures.add("query thread ", t, " threw: ", e.what());
      }
    });
  }

  publisher.join();
  for (auto& t : threads) t.join();
  REQUIRE(failures.report());

  // ---- the checks --------------------------------------------------------------------------------
  const auto check_start = std::chrono::steady_clock::now();
  std::size_t total_ops = 0, invalid_ops = 0;
  std::vector<PrefixCounts> prefix;
  for (int p = 0; p < kProducers; ++p) {
    prefix.emplace_back(logs[p]);
    total_ops += logs[p].size();
    invalid_ops += prefix[p].invalid.back();
  }
  const std::size_t n_pub = publishes.size();

  // Epochs advance exactly when a publish applied something; the counts add up.
  std::map<std::uint64_t, std::size_t> publish_of_epoch;  // epoch -> the publish that made it
  {
    std::uint64_t epoch = 0;
    for (std::size_t i = 0; i < n_pub; ++i) {
      const PublishReport& r = publishes[i].report;
      const std::size_t applied = r.inserted + r.moved + r.erased + r.retargeted;
      if (r.applied != applied || r.drained != r.applied + r.rejected.size()) {
        failures.add("publish ", i, ": drained ", r.drained, ", applied ", r.applied, ", counts sum to ", applied, ", ",
                     r.rejected.size(), " rejected");
      }
      if (applied > 0) ++epoch;
      if (r.epoch != epoch) failures.add("publish ", i, ": epoch ", r.epoch, " but ", epoch, " expected");
      if (applied > 0) publish_of_epoch[r.epoch] = i;
    }
  }

  // Rejections: per producer, in its own order, exactly its invalid ops. R[i][p] = rejections of
  // p up to and including publish i.
  std::vector<std::array<std::uint32_t, kProducers>> rejected_upto(n_pub);
  {
    std::array<std::uint32_t, kProducers> seen{};
    std::vector<std::vector<std::size_t>> invalid_positions(kProducers);
    for (int p = 0; p < kProducers; ++p) {
      for (std::size_t i = 0; i < logs[p].size(); ++i) {
        if (!logs[p][i].valid) invalid_positions[p].push_back(i);
      }
    }
    for (std::size_t i = 0; i < n_pub; ++i) {
      for (const Rejection& rej : publishes[i].report.rejected) {
        const int p = space_of(rej.id);
        if (seen[p] >= invalid_positions[p].size()) {
          failures.add("publish ", i, " rejected ", to_string(rej.kind), " of id ", rej.id, " (", to_string(rej.reason),
                       "), but producer ", p, " pushed only ", invalid_positions[p].size(), " invalid ops");
          continue;
        }
        const Op& op = logs[p][invalid_positions[p][seen[p]]];
        if (op.id != rej.id || op.kind != rej.kind || op.reason != rej.reason) {
          failures.add("publish ", i, ": producer ", p, "'s rejection #", seen[p], " is ", to_string(rej.kind), " id ",
                       rej.id, " (", to_string(rej.reason), ") but its invalid op #", seen[p], " (op ",
                       invalid_positions[p][seen[p]], ") is ", to_string(op.kind), " id ", op.id, " (",
                       to_string(op.reason), ")");
        }
        ++seen[p];
      }
      rejected_upto[i] = seen;
    }
    for (int p = 0; p < kProducers; ++p) {
      if (seen[p] != invalid_positions[p].size()) {
        failures.add("producer ", p, " pushed ", invalid_positions[p].size(), " invalid ops but ", seen[p], " were reported");
      }
    }
  }
  REQUIRE(failures.report());

  // Candidate prefix lengths per publish and producer: within the bounds, and with exactly the
  // reported number of rejections inside the prefix.
  std::vector<std::array<std::vector<std::uint32_t>, kProducers>> cand(n_pub);
  for (std::size_t i = 0; i < n_pub; ++i) {
    for (int p = 0; p < kProducers; ++p) {
      const auto& rec = publishes[i];
      const std::uint64_t hi = std::min<std::uint64_t>(rec.hi[p], logs[p].size());
      for (std::uint64_t L = rec.lo[p]; L <= hi; ++L) {
        if (prefix[p].invalid[L] == rejected_upto[i][p]) cand[i][p].push_back(static_cast<std::uint32_t>(L));
      }
      if (cand[i][p].empty()) {
        failures.add("publish ", i, ", producer ", p, ": no prefix length in [", rec.lo[p], ", ", hi, "] holds the ",
                     rejected_upto[i][p], " reported rejections");
      }
    }
  }
  REQUIRE(failures.report());

  // Query answers: group rows by (publish that made the epoch, producer).
  std::size_t rows_checked = 0, records = 0, floor_violations = 0;
  std::vector<std::array<std::vector<std::pair<const QueryRecord*, std::uint32_t>>, kProducers>> rows_at(n_pub);
  std::vector<ExactNeighbor> scratch;
  const std::unordered_map<PointId, GridEntry> empty_state;
  for (const auto& list : queries) {
    for (const QueryRecord& rec : list) {
      ++records;
      if (rec.epoch < rec.floor) {
        if (floor_violations++ < 5) {
          failures.add("a query submitted after a publish of epoch ", rec.floor, " returned was answered on epoch ", rec.epoch);
        }
      }
      for (std::uint32_t row = 0; row < rec.rows.size(); ++row) {
        ++rows_checked;
        if (rec.rows[row].producer < 0 || rec.epoch == 0) {  // nothing visible
          if (auto m = compare_row(rec, row, empty_state, scratch); !m.empty()) {
            failures.add("query on epoch ", rec.epoch, ", row ", row, " (nothing visible): ", m);
          }
          continue;
        }
        const auto it = publish_of_epoch.find(rec.epoch);
        if (it == publish_of_epoch.end()) {
          failures.add("a query was answered on epoch ", rec.epoch, ", which no publish made");
          continue;
        }
        rows_at[it->second][rec.rows[row].producer].push_back({&rec, row});
      }
    }
  }
  REQUIRE(failures.report());

  // Replay each producer's ops once; at every candidate prefix length, keep it only if it
  // explains every answer computed on that publish's epoch.
  std::size_t evaluations = 0;
  for (int p = 0; p < kProducers; ++p) {
    std::vector<std::pair<std::uint32_t, std::size_t>> events;  // (prefix length, publish)
    for (std::size_t i = 0; i < n_pub; ++i) {
      if (rows_at[i][p].empty()) continue;
      for (std::uint32_t L : cand[i][p]) events.push_back({L, i});
    }
    std::sort(events.begin(), events.end());
    std::vector<std::vector<std::uint32_t>> keep(n_pub);
    std::vector<std::string> first_mismatch(n_pub);
    std::unordered_map<PointId, GridEntry> state;
    std::size_t applied = 0, e = 0;
    for (std::uint32_t L = 0; e < events.size(); ++L) {
      for (; applied < L; ++applied) {
        const Op& op = logs[p][applied];
        if (!op.valid) continue;
        switch (op.kind) {
          case UpdateKind::Insert: state[op.id] = {op.at, op.label}; break;
          case UpdateKind::Move: state.at(op.id).at = op.at; break;
          case UpdateKind::Erase: state.erase(op.id); break;
          case UpdateKind::SetTarget: state.at(op.id).label = op.label; break;
        }
      }
      for (; e < events.size() && events[e].first == L; ++e) {
        const std::size_t i = events[e].second;
        bool ok = true;
        for (const auto& [rec, row] : rows_at[i][p]) {
          ++evaluations;
          if (auto m = compare_row(*rec, row, state, scratch); !m.empty()) {
            if (first_mismatch[i].empty()) {
              first_mismatch[i] = concat_message("at prefix ", L, ", a ", rec->classifier ? "classifier" : "search",
                                                 " row (k=", rec->k, ") on epoch ", rec->epoch, ": ", m);
            }
            ok = false;
            break;
          }
        }
        if (ok) keep[i].push_back(L);
      }
    }
    for (std::size_t i = 0; i < n_pub; ++i) {
      if (rows_at[i][p].empty()) continue;
      if (keep[i].empty()) {
        failures.add("producer ", p, ", epoch ", publishes[i].report.epoch, ": no prefix length in [", publishes[i].lo[p],
                     ", ", publishes[i].hi[p], "] explains all ", rows_at[i][p].size(), " answers; first mismatch ",
                     first_mismatch[i]);
      }
      cand[i][p] = std::move(keep[i]);
    }
  }
  REQUIRE(failures.report());

  // Publish reports: the counts, summed over producers, must be met by one choice of prefix
  // per producer; prune the candidates to those that take part in such a choice.
  std::size_t unique = 0, pairs = 0;
  {
    Tuple cumulative{};
    for (std::size_t i = 0; i < n_pub; ++i) {
      const PublishReport& r = publishes[i].report;
      cumulative[0] += r.drained;
      cumulative[1] += r.inserted;
      cumulative[2] += r.moved;
      cumulative[3] += r.erased;
      cumulative[4] += r.retargeted;
      if (r.size != cumulative[1] - cumulative[3]) {
        failures.add("publish ", i, ": size ", r.size, " but ", cumulative[1], " inserts and ", cumulative[3], " erases so far");
      }
      auto contribution = [&](int p, std::uint32_t L) {
        return Tuple{L, prefix[p].inserted[L], prefix[p].moved[L], prefix[p].erased[L], prefix[p].retargeted[L]};
      };
      auto add = [](Tuple a, const Tuple& b) {
        for (std::size_t j = 0; j < a.size(); ++j) a[j] += b[j];
        return a;
      };
      // forward[p]: sums reachable with producers < p; backward[p]: with producers >= p.
      std::vector<std::unordered_set<Tuple, TupleHash>> forward(kProducers + 1), backward(kProducers + 1);
      forward[0].insert(Tuple{});
      backward[kProducers].insert(Tuple{});
      bool too_many = false;
      for (int p = 0; p < kProducers && !too_many; ++p) {
        for (const Tuple& t : forward[p]) {
          for (std::uint32_t L : cand[i][p]) forward[p + 1].insert(add(t, contribution(p, L)));
        }
        too_many = forward[p + 1].size() > 2'000'000;
      }
      if (too_many) {
        failures.add("publish ", i, ": too many prefix combinations to check the report (the bounds are too loose)");
        continue;
      }
      if (!forward[kProducers].count(cumulative)) {
        failures.add("publish ", i, " (epoch ", r.epoch, "): no choice of prefixes within the bounds gives the report's "
                     "cumulative counts (drained ", cumulative[0], ", inserted ", cumulative[1], ", moved ", cumulative[2],
                     ", erased ", cumulative[3], ", retargeted ", cumulative[4], ")");
        continue;
      }
      for (int p = kProducers - 1; p >= 0; --p) {
        for (const Tuple& t : backward[p + 1]) {
          for (std::uint32_t L : cand[i][p]) backward[p].insert(add(t, contribution(p, L)));
        }
      }
      for (int p = 0; p < kProducers; ++p) {
        std::vector<std::uint32_t> kept;
        for (std::uint32_t L : cand[i][p]) {
          bool feasible = false;
          for (const Tuple& before : forward[p]) {
            const Tuple mid = add(before, contribution(p, L));
            Tuple rest{};
            bool fits = true;
            for (std::size_t j = 0; j < rest.size(); ++j) {
              fits &= mid[j] <= cumulative[j];
              rest[j] = cumulative[j] - mid[j];
            }
            if (fits && backward[p + 1].count(rest)) {
              feasible = true;
              break;
            }
          }
          if (feasible) kept.push_back(L);
        }
        cand[i][p] = std::move(kept);
        ++pairs;
        unique += cand[i][p].size() == 1;
      }
    }
  }
  REQUIRE(failures.report());

  // Prefixes never shrink from one publish to the next, and the last holds every op.
  for (int p = 0; p < kProducers; ++p) {
    std::uint32_t prev = 0;
    for (std::size_t i = 0; i < n_pub; ++i) {
      const auto it = std::lower_bound(cand[i][p].begin(), cand[i][p].end(), prev);
      if (it == cand[i][p].end()) {
        failures.add("producer ", p, ", publish ", i, ": its prefix would have to shrink below ", prev);
        break;
      }
      prev = *it;
    }
    if (n_pub == 0 || cand[n_pub - 1][p] != std::vector<std::uint32_t>{std::uint32_t(logs[p].size())}) {
      failures.add("producer ", p, ": the last publish does not hold exactly its ", logs[p].size(), " ops");
    }
  }
  REQUIRE(failures.report());

  // Final content: every point of every producer's final model, where the model puts it, with
  // its label; nothing else.
  std::vector<float> q;
  std::vector<IdRange> ranges;
  std::vector<PointId> ids;
  std::vector<std::int32_t> labels;
  std::size_t final_size = 0;
  for (int p = 0; p < kProducers; ++p) {
    std::unordered_map<PointId, GridEntry> state;
    for (const Op& op : logs[p]) {
      if (!op.valid) continue;
      switch (op.kind) {
        case UpdateKind::Insert: state[op.id] = {op.at, op.label}; break;
        case UpdateKind::Move: state.at(op.id).at = op.at; break;
        case UpdateKind::Erase: state.erase(op.id); break;
        case UpdateKind::SetTarget: state.at(op.id).label = op.label; break;
      }
    }
    final_size += state.size();
    for (const auto& [id, e] : state) {
      const auto v = to_floats(e.at);
      q.insert(q.end(), v.begin(), v.end());
      ranges.push_back({id, id + 1});
      ids.push_back(id);
      labels.push_back(e.label);
    }
  }
  CHECK(store.size() == final_size);
  CHECK(store.pending() == 0);
  const Neighbors last = store.search(q, 1, ranges);
  const ClassPredictions last_labels = KnnClassifier(store, 1).predict(q, ranges);
  std::size_t misplaced = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (last.ids[i] != ids[i] || last.distances[i] != 0.0f || last_labels.labels[i] != labels[i]) {
      if (misplaced++ < 5) {
        failures.add("final state: id ", ids[i], " found as ", last.ids[i], " at distance ", last.distances[i],
                     " with label ", last_labels.labels[i], " (model: label ", labels[i], ")");
      }
    }
  }
  CHECK(misplaced == 0);
  REQUIRE(failures.report());

  std::size_t drained = 0;
  for (const auto& rec : publishes) drained += rec.report.drained;
  CHECK(drained == total_ops);
  const double check_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - check_start).count();
  MESSAGE("ops pushed: ", total_ops, " (", invalid_ops, " id errors reported, ", refused_at_push.load(),
          " malformed refused at push, ", full_queue.load(), " try_push on a full queue); publishes: ", n_pub,
          ", epochs: ", publish_of_epoch.size(), "; queries checked: ", records, " requests, ", rows_checked,
          " rows (", evaluations, " row evaluations); prefix pinned to one length in ", unique, " of ", pairs,
          " (publish, producer) pairs; final size ", final_size, "; checking took ", check_s, " s");
}
