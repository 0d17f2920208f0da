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

#include "reliability/linearizability_model.hpp"

using namespace test;
using namespace reliability;
using namespace linearizability;

namespace {

// ---- the workload -------------------------------------------------------------------------------

/// The store under test and everything the workload records for the checks.
struct Run {
  explicit Run(const StoreConfig& config) : store(config) {}
  ReferenceSet store;
  Failures failures;
  std::array<Progress, kProducers> progress;
  std::array<std::vector<Op>, kProducers> logs;  // each producer's ops, in push order
  std::atomic<std::size_t> refused_at_push{0}, full_queue{0};
  std::atomic<int> producers_running{kProducers};
  std::atomic<bool> queries_stop{false};
  std::atomic<std::uint64_t> floor{0};  // epoch of the last publish that has returned
  std::vector<PublishRecord> publishes;
  std::array<std::vector<QueryRecord>, 2> queries;  // per query thread
};

/// Producer p: pushes its model's ops (and now and then an update that must be refused) until
/// the deadline, counting each op as started before its push and done after it.
void run_producer(Run& run, int p, Deadline deadline) {
  auto g = rng(0x1000 + p);
  ProducerModel model(p);
  std::vector<Op>& log = run.logs[p];
  std::vector<float> bad;
  try {
    while (log.size() < kMaxOpsPerProducer && Clock::now() < deadline) {
      if (g() % 200 == 0) {  // refused at the boundary: nothing queued, nothing counted
        const Update u = bad_update(g, p, bad);
        try {
          run.store.push(u);
          run.failures.add("producer ", p, ": a malformed ", to_string(u.kind), " of id ", u.id, " was accepted");
        } catch (const InvalidArgument&) {
          ++run.refused_at_push;
        }
        continue;
      }
      const Op op = model.next(g);
      const auto v = to_floats(op.at);
      const Update u = to_update(op, v);
      run.progress[p].started.fetch_add(1);
      if (g() % 2 == 0) {
        run.store.push(u);
      } else if (!run.store.try_push(u)) {
        ++run.full_queue;
        run.store.push(u);  // waits for the publisher
      }
      run.progress[p].done.fetch_add(1);
      log.push_back(op);
    }
  } catch (const std::exception& e) {
    run.failures.add("producer ", p, " threw: ", e.what());
  }
  --run.producers_running;
}

/// Publishes at random intervals, recording each producer's prefix bounds around every publish,
/// until the producers have finished and the queue is drained; then stops the queries.
void run_publisher(Run& run) {
  auto g = rng(0x2000);
  bool quiet = false;  // producers finished and the queue drained
  while (!quiet) {
    const auto r = g() % 10;
    if (r >= 2) std::this_thread::sleep_for(std::chrono::microseconds(r < 8 ? 50 + g() % 500 : 1000 + g() % 2000));
    const bool producers_done = run.producers_running.load() == 0;
    PublishRecord rec;
    for (int p = 0; p < kProducers; ++p) rec.lo[p] = run.progress[p].done.load();
    try {
      rec.report = run.store.publish();
    } catch (const std::exception& e) {
      run.failures.add("publish threw: ", e.what());
      continue;
    }
    for (int p = 0; p < kProducers; ++p) rec.hi[p] = run.progress[p].started.load();
    if (run.store.epoch() != rec.report.epoch || run.store.size() != rec.report.size) {
      run.failures.add("after publish: epoch() ", run.store.epoch(), " size() ", run.store.size(),
                       " but the report says epoch ", rec.report.epoch, " size ", rec.report.size);
    }
    run.floor.store(rec.report.epoch);
    quiet = producers_done && rec.report.drained == 0 && run.store.pending() == 0;
    run.publishes.push_back(std::move(rec));
  }
  run.queries_stop = true;
}

/// A random query: one row per producer, restricted to its id space, and for a search one more
/// row whose range holds no id.
QueryRecord random_query(std::mt19937_64& g, bool use_classifier) {
  static constexpr std::array<std::uint32_t, 4> ks = {1, 2, 7, 24};
  QueryRecord rec;
  rec.classifier = use_classifier;
  rec.k = use_classifier ? kClassifierK : ks[g() % ks.size()];
  for (int p = 0; p < kProducers; ++p) rec.rows.push_back({random_point(g, -2, 33), std::int8_t(p)});
  if (!use_classifier) rec.rows.push_back({random_point(g, -2, 33), -1});
  return rec;
}

/// The query points and visibility ranges of a query's rows.
void query_inputs(const QueryRecord& rec, std::vector<float>& q, std::vector<IdRange>& ranges) {
  q.clear();
  ranges.clear();
  for (const auto& row : rec.rows) {
    const auto v = to_floats(row.at);
    q.insert(q.end(), v.begin(), v.end());
    ranges.push_back(row.producer >= 0 ? space_range(row.producer)
                                       : IdRange{unknown_id_in_space(0, 0), unknown_id_in_space(0, 1u << 20)});
  }
}

/// Moves a search answer into its record.
void take_neighbors(QueryRecord& rec, Neighbors n) {
  rec.epoch = n.epoch;
  rec.ids = std::move(n.ids);
  rec.distances = std::move(n.distances);
}

/// Query thread t until the publisher stops it: thread 0 runs synchronous searches, thread 1
/// keeps a classifier request and a search in flight together. Epochs never go back.
struct QueryThread {
  Run& run;
  int t;
  std::mt19937_64 g = rng(0x3000 + t);
  KnnClassifier classifier{run.store, kClassifierK};
  std::vector<QueryRecord>& out = run.queries[t];
  std::vector<float> q1{}, q2{};
  std::vector<IdRange> r1{}, r2{};

  void operator()() {
    std::uint64_t last_epoch = 0;
    try {
      while (!run.queries_stop.load() && out.size() + 2 <= kMaxQueryRecords) {
        if (t == 0) {
          search();
        } else {
          classify_then_search();
        }
        if (out.back().epoch < last_epoch) {
          run.failures.add("query thread ", t, ": epoch went back from ", last_epoch, " to ", out.back().epoch);
        }
        last_epoch = out.back().epoch;
      }
    } catch (const std::exception& e) {
      run.failures.add("query thread ", t, " threw: ", e.what());
    }
  }

  /// Thread 0: one synchronous search.
  void search() {
    QueryRecord rec = random_query(g, false);
    query_inputs(rec, q1, r1);
    rec.floor = run.floor.load();
    take_neighbors(rec, run.store.search(q1, rec.k, r1));
    out.push_back(std::move(rec));
  }

  /// Thread 1: two asynchronous requests in flight, the classifier, then a search, which must not
  /// see an older epoch than the classifier.
  void classify_then_search() {
    QueryRecord a = random_query(g, true), b = random_query(g, false);
    query_inputs(a, q1, r1);
    query_inputs(b, q2, r2);
    a.floor = run.floor.load();
    auto ta = classifier.submit(q1, true, r1);
    b.floor = run.floor.load();
    auto tb = run.store.submit(q2, b.k, r2);
    ClassPredictions pa = ta.get();
    a.epoch = pa.epoch;
    a.labels = std::move(pa.labels);
    a.probabilities = std::move(pa.probabilities);
    take_neighbors(b, tb.get());
    if (b.epoch < a.epoch) {
      run.failures.add("query thread 1: a search submitted after another saw an older epoch (", b.epoch, " < ",
                       a.epoch, ")");
    }
    out.push_back(std::move(a));
    out.push_back(std::move(b));
  }
};

/// 8 producers, the publisher and 2 query threads, until the deadline and a drained queue.
void run_workload(Run& run, double seconds) {
  const Deadline deadline = Clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) threads.emplace_back([&run, p, deadline] { run_producer(run, p, deadline); });
  std::thread publisher([&run] { run_publisher(run); });
  for (int t = 0; t < 2; ++t) threads.emplace_back([&run, t] { QueryThread{run, t}(); });
  publisher.join();
  for (auto& t : threads) t.join();
}

// ---- the checks ---------------------------------------------------------------------------------

/// What the checks derive from a run, and the statistics they report.
struct Analysis {
  explicit Analysis(const Run& run)
      : rejected_upto(run.publishes.size()), candidates(run.publishes.size()), rows_at(run.publishes.size()) {
    for (int p = 0; p < kProducers; ++p) {
      prefix.emplace_back(run.logs[p]);
      total_ops += run.logs[p].size();
      invalid_ops += prefix[p].invalid.back();
    }
  }
  std::vector<PrefixCounts> prefix;  // per producer
  std::size_t total_ops = 0, invalid_ops = 0;
  std::map<std::uint64_t, std::size_t> publish_of_epoch;  // epoch -> the publish that made it
  // Per publish: each producer's rejections up to and including it, its candidate prefix
  // lengths, and the query rows answered on the publish's epoch within its id space.
  std::vector<std::array<std::uint32_t, kProducers>> rejected_upto;
  std::vector<std::array<std::vector<std::uint32_t>, kProducers>> candidates;
  std::vector<std::array<std::vector<RowRef>, kProducers>> rows_at;
  std::size_t records = 0, rows_checked = 0, evaluations = 0, unique = 0, pairs = 0, final_size = 0;
};

/// Epochs advance exactly when a publish applied something; the counts add up.
void check_epochs_and_counts(Run& run, Analysis& analysis) {
  std::uint64_t epoch = 0;
  for (std::size_t i = 0; i < run.publishes.size(); ++i) {
    const PublishReport& r = run.publishes[i].report;
    const std::size_t applied = r.inserted + r.moved + r.erased + r.retargeted;
    if (r.applied != applied || r.drained != r.applied + r.rejected.size()) {
      run.failures.add("publish ", i, ": drained ", r.drained, ", applied ", r.applied, ", counts sum to ", applied,
                       ", ", r.rejected.size(), " rejected");
    }
    if (applied > 0) ++epoch;
    if (r.epoch != epoch) run.failures.add("publish ", i, ": epoch ", r.epoch, " but ", epoch, " expected");
    if (applied > 0) analysis.publish_of_epoch[r.epoch] = i;
  }
}

/// Rejections: per producer, in its own order, exactly its invalid ops; notes after every publish
/// how many of each producer's have been reported so far.
void check_rejections_in_producer_order(Run& run, Analysis& analysis) {
  std::array<std::vector<std::size_t>, kProducers> invalid_positions;
  for (int p = 0; p < kProducers; ++p) {
    for (std::size_t i = 0; i < run.logs[p].size(); ++i) {
      if (!run.logs[p][i].valid) invalid_positions[p].push_back(i);
    }
  }
  std::array<std::uint32_t, kProducers> seen{};
  for (std::size_t i = 0; i < run.publishes.size(); ++i) {
    for (const Rejection& rej : run.publishes[i].report.rejected) {
      const int p = space_of(rej.id);
      if (seen[p] >= invalid_positions[p].size()) {
        run.failures.add("publish ", i, " rejected ", to_string(rej.kind), " of id ", rej.id, " (",
                         to_string(rej.reason), "), but producer ", p, " pushed only ", invalid_positions[p].size(),
                         " invalid ops");
        continue;
      }
      const Op& op = run.logs[p][invalid_positions[p][seen[p]]];
      if (op.id != rej.id || op.kind != rej.kind || op.reason != rej.reason) {
        run.failures.add("publish ", i, ": producer ", p, "'s rejection #", seen[p], " is ", to_string(rej.kind),
                         " id ", rej.id, " (", to_string(rej.reason), ") but its invalid op #", seen[p], " (op ",
                         invalid_positions[p][seen[p]], ") is ", to_string(op.kind), " id ", op.id, " (",
                         to_string(op.reason), ")");
      }
      ++seen[p];
    }
    analysis.rejected_upto[i] = seen;
  }
  for (int p = 0; p < kProducers; ++p) {
    if (seen[p] != invalid_positions[p].size()) {
      run.failures.add("producer ", p, " pushed ", invalid_positions[p].size(), " invalid ops but ", seen[p],
                       " were reported");
    }
  }
}

/// Candidate prefix lengths per publish and producer: within the bounds, and with exactly the
/// reported number of rejections inside the prefix.
void find_candidate_prefixes(Run& run, Analysis& analysis) {
  for (std::size_t i = 0; i < run.publishes.size(); ++i) {
    for (int p = 0; p < kProducers; ++p) {
      const auto& rec = run.publishes[i];
      const std::uint64_t hi = std::min<std::uint64_t>(rec.hi[p], run.logs[p].size());
      const std::uint32_t rejected = analysis.rejected_upto[i][p];
      auto& cand = analysis.candidates[i][p];
      for (std::uint64_t L = rec.lo[p]; L <= hi; ++L) {
        if (analysis.prefix[p].invalid[L] == rejected) cand.push_back(static_cast<std::uint32_t>(L));
      }
      if (cand.empty()) {
        run.failures.add("publish ", i, ", producer ", p, ": no prefix length in [", rec.lo[p], ", ", hi,
                         "] holds the ", rejected, " reported rejections");
      }
    }
  }
}

/// Every answer carries an epoch at least its floor; rows that see nothing must match the empty
/// model, the others are grouped by (publish that made the epoch, producer).
void group_answers_by_publish(Run& run, Analysis& analysis) {
  std::size_t floor_violations = 0;
  std::vector<ExactNeighbor> scratch;
  const ModelState empty_state;
  for (const auto& list : run.queries) {
    for (const QueryRecord& rec : list) {
      ++analysis.records;
      if (rec.epoch < rec.floor && floor_violations++ < 5) {
        run.failures.add("a query submitted after a publish of epoch ", rec.floor, " returned was answered on epoch ",
                         rec.epoch);
      }
      for (std::uint32_t row = 0; row < rec.rows.size(); ++row) {
        ++analysis.rows_checked;
        if (rec.rows[row].producer < 0 || rec.epoch == 0) {  // nothing visible
          if (auto m = compare_row(rec, row, empty_state, scratch); !m.empty()) {
            run.failures.add("query on epoch ", rec.epoch, ", row ", row, " (nothing visible): ", m);
          }
          continue;
        }
        const auto it = analysis.publish_of_epoch.find(rec.epoch);
        if (it == analysis.publish_of_epoch.end()) {
          run.failures.add("a query was answered on epoch ", rec.epoch, ", which no publish made");
          continue;
        }
        analysis.rows_at[it->second][rec.rows[row].producer].push_back({&rec, row});
      }
    }
  }
}

/// The first of `rows` that `state`, a producer's model at prefix L, does not explain; empty if
/// it explains them all.
std::string first_unexplained(const std::vector<RowRef>& rows, std::uint32_t L, const ModelState& state,
                              std::vector<ExactNeighbor>& scratch, std::size_t& evaluations) {
  for (const auto& [rec, row] : rows) {
    ++evaluations;
    if (auto m = compare_row(*rec, row, state, scratch); !m.empty()) {
      return concat_message("at prefix ", L, ", a ", rec->classifier ? "classifier" : "search", " row (k=", rec->k,
                            ") on epoch ", rec->epoch, ": ", m);
    }
  }
  return {};
}

/// Replays producer p's ops once; at every candidate prefix length, keeps it only if it
/// explains every answer computed on that publish's epoch.
void keep_prefixes_explaining_answers(Run& run, Analysis& analysis, int p) {
  const std::size_t n_pub = run.publishes.size();
  std::vector<std::pair<std::uint32_t, std::size_t>> events;  // (prefix length, publish)
  for (std::size_t i = 0; i < n_pub; ++i) {
    if (analysis.rows_at[i][p].empty()) continue;
    for (std::uint32_t L : analysis.candidates[i][p]) events.push_back({L, i});
  }
  std::sort(events.begin(), events.end());
  std::vector<std::vector<std::uint32_t>> keep(n_pub);
  std::vector<std::string> first_mismatch(n_pub);
  ModelState state;
  std::vector<ExactNeighbor> scratch;
  std::size_t applied = 0, e = 0;
  for (std::uint32_t L = 0; e < events.size(); ++L) {
    for (; applied < L; ++applied) apply_op(state, run.logs[p][applied]);
    for (; e < events.size() && events[e].first == L; ++e) {
      const std::size_t i = events[e].second;
      std::string m = first_unexplained(analysis.rows_at[i][p], L, state, scratch, analysis.evaluations);
      if (m.empty()) {
        keep[i].push_back(L);
      } else if (first_mismatch[i].empty()) {
        first_mismatch[i] = std::move(m);
      }
    }
  }
  for (std::size_t i = 0; i < n_pub; ++i) {
    if (analysis.rows_at[i][p].empty()) continue;
    const PublishRecord& rec = run.publishes[i];
    if (keep[i].empty()) {
      run.failures.add("producer ", p, ", epoch ", rec.report.epoch, ": no prefix length in [", rec.lo[p], ", ",
                       rec.hi[p], "] explains all ", analysis.rows_at[i][p].size(), " answers; first mismatch ",
                       first_mismatch[i]);
    }
    analysis.candidates[i][p] = std::move(keep[i]);
  }
}

using TupleSet = std::unordered_set<Tuple, TupleHash>;

/// One producer's part of the cumulative counts when a publish holds its first L ops.
Tuple contribution(const PrefixCounts& counts, std::uint32_t L) {
  return Tuple{L, counts.inserted[L], counts.moved[L], counts.erased[L], counts.retargeted[L]};
}

/// Element-wise sum.
Tuple add(Tuple a, const Tuple& b) {
  for (std::size_t j = 0; j < a.size(); ++j) a[j] += b[j];
  return a;
}

/// Every sum in `sums` plus the contribution of each candidate length.
TupleSet extend(const TupleSet& sums, const std::vector<std::uint32_t>& lengths, const PrefixCounts& counts) {
  TupleSet out;
  for (const Tuple& t : sums) {
    for (std::uint32_t L : lengths) out.insert(add(t, contribution(counts, L)));
  }
  return out;
}

/// True if some sum in `before`, plus `own`, plus some sum in `after` makes `total`.
bool completes_total(const TupleSet& before, const Tuple& own, const TupleSet& after, const Tuple& total) {
  for (const Tuple& b : before) {
    const Tuple mid = add(b, own);
    Tuple rest{};
    bool fits = true;
    for (std::size_t j = 0; j < rest.size(); ++j) {
      fits &= mid[j] <= total[j];
      rest[j] = total[j] - mid[j];
    }
    if (fits && after.count(rest)) return true;
  }
  return false;
}

/// Publish i's counts, cumulative over publishes and summed over producers, must be met by one
/// choice of prefix per producer; keeps the candidates that take part in such a choice.
void prune_to_report_counts(Run& run, Analysis& analysis, std::size_t i, const Tuple& cumulative) {
  auto& cand = analysis.candidates[i];
  // forward[p]: sums reachable with producers < p; backward[p]: with producers >= p.
  std::vector<TupleSet> forward(kProducers + 1), backward(kProducers + 1);
  forward[0].insert(Tuple{});
  backward[kProducers].insert(Tuple{});
  bool too_many = false;
  for (int p = 0; p < kProducers && !too_many; ++p) {
    forward[p + 1] = extend(forward[p], cand[p], analysis.prefix[p]);
    too_many = forward[p + 1].size() > 2'000'000;
  }
  if (too_many) {
    run.failures.add("publish ", i, ": too many prefix combinations to check the report (the bounds are too loose)");
    return;
  }
  if (!forward[kProducers].count(cumulative)) {
    run.failures.add("publish ", i, " (epoch ", run.publishes[i].report.epoch, "): no choice of prefixes within the "
                     "bounds gives the report's cumulative counts (drained ", cumulative[0], ", inserted ",
                     cumulative[1], ", moved ", cumulative[2], ", erased ", cumulative[3], ", retargeted ",
                     cumulative[4], ")");
    return;
  }
  for (int p = kProducers - 1; p >= 0; --p) backward[p] = extend(backward[p + 1], cand[p], analysis.prefix[p]);
  for (int p = 0; p < kProducers; ++p) {
    std::vector<std::uint32_t> kept;
    for (std::uint32_t L : cand[p]) {
      const Tuple own = contribution(analysis.prefix[p], L);
      if (completes_total(forward[p], own, backward[p + 1], cumulative)) kept.push_back(L);
    }
    cand[p] = std::move(kept);
    ++analysis.pairs;
    analysis.unique += cand[p].size() == 1;
  }
}

/// Publish reports: each size follows the counts so far, and the counts are feasible (see
/// prune_to_report_counts).
void keep_prefixes_meeting_report_counts(Run& run, Analysis& analysis) {
  Tuple cumulative{};  // drained, inserted, moved, erased, retargeted
  for (std::size_t i = 0; i < run.publishes.size(); ++i) {
    const PublishReport& r = run.publishes[i].report;
    cumulative[0] += r.drained;
    cumulative[1] += r.inserted;
    cumulative[2] += r.moved;
    cumulative[3] += r.erased;
    cumulative[4] += r.retargeted;
    if (r.size != cumulative[1] - cumulative[3]) {
      run.failures.add("publish ", i, ": size ", r.size, " but ", cumulative[1], " inserts and ", cumulative[3],
                       " erases so far");
    }
    prune_to_report_counts(run, analysis, i, cumulative);
  }
}

/// Prefixes never shrink from one publish to the next, and the last holds every op.
void check_prefixes_grow_to_completion(Run& run, const Analysis& analysis) {
  const std::size_t n_pub = run.publishes.size();
  for (int p = 0; p < kProducers; ++p) {
    std::uint32_t prev = 0;
    for (std::size_t i = 0; i < n_pub; ++i) {
      const auto& cand = analysis.candidates[i][p];
      const auto it = std::lower_bound(cand.begin(), cand.end(), prev);
      if (it == cand.end()) {
        run.failures.add("producer ", p, ", publish ", i, ": its prefix would have to shrink below ", prev);
        break;
      }
      prev = *it;
    }
    const std::vector<std::uint32_t> all_ops{std::uint32_t(run.logs[p].size())};
    if (n_pub == 0 || analysis.candidates[n_pub - 1][p] != all_ops) {
      run.failures.add("producer ", p, ": the last publish does not hold exactly its ", run.logs[p].size(), " ops");
    }
  }
}

/// Final content: every point of every producer's final model, where the model puts it, with
/// its label; nothing else.
void check_final_content(Run& run, Analysis& analysis) {
  std::vector<float> q;
  std::vector<IdRange> ranges;
  std::vector<PointId> ids;
  std::vector<std::int32_t> labels;
  for (int p = 0; p < kProducers; ++p) {
    ModelState state;
    for (const Op& op : run.logs[p]) apply_op(state, op);
    analysis.final_size += state.size();
    for (const auto& [id, e] : state) {
      const auto v = to_floats(e.at);
      q.insert(q.end(), v.begin(), v.end());
      ranges.push_back({id, id + 1});
      ids.push_back(id);
      labels.push_back(e.label);
    }
  }
  CHECK(run.store.size() == analysis.final_size);
  CHECK(run.store.pending() == 0);
  const Neighbors last = run.store.search(q, 1, ranges);
  const ClassPredictions last_labels = KnnClassifier(run.store, 1).predict(q, ranges);
  std::size_t misplaced = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (last.ids[i] != ids[i] || last.distances[i] != 0.0f || last_labels.labels[i] != labels[i]) {
      if (misplaced++ < 5) {
        run.failures.add("final state: id ", ids[i], " found as ", last.ids[i], " at distance ", last.distances[i],
                         " with label ", last_labels.labels[i], " (model: label ", labels[i], ")");
      }
    }
  }
  CHECK(misplaced == 0);
}

std::size_t total_drained(const Run& run) {
  std::size_t drained = 0;
  for (const auto& rec : run.publishes) drained += rec.report.drained;
  return drained;
}

}  // namespace

TEST_CASE("linearizability: 8 producers, a random publisher and 2 query threads agree with a sequential model") {
  const double seconds = stress_seconds(10.0);
  StoreConfig config = config_for(kGridDim, Metric::L2, TargetSpec::classes(kClasses));
  config.queue_capacity = 512;  // small enough that producers meet a full queue
  config.capacity_hint = 16;    // and the store grows under load
  Run run(config);
  MESSAGE("backend ", run.store.backend_name(), ", ", seconds, " s (STREAMKNN_STRESS_SECONDS)");
  run_workload(run, seconds);
  REQUIRE(run.failures.report());

  const auto check_start = Clock::now();
  Analysis analysis(run);
  check_epochs_and_counts(run, analysis);
  check_rejections_in_producer_order(run, analysis);
  REQUIRE(run.failures.report());
  find_candidate_prefixes(run, analysis);
  REQUIRE(run.failures.report());
  group_answers_by_publish(run, analysis);
  REQUIRE(run.failures.report());
  for (int p = 0; p < kProducers; ++p) keep_prefixes_explaining_answers(run, analysis, p);
  REQUIRE(run.failures.report());
  keep_prefixes_meeting_report_counts(run, analysis);
  REQUIRE(run.failures.report());
  check_prefixes_grow_to_completion(run, analysis);
  REQUIRE(run.failures.report());
  check_final_content(run, analysis);
  REQUIRE(run.failures.report());

  CHECK(total_drained(run) == analysis.total_ops);
  const double check_s = std::chrono::duration<double>(Clock::now() - check_start).count();
  MESSAGE("ops pushed: ", analysis.total_ops, " (", analysis.invalid_ops, " id errors reported, ",
          run.refused_at_push.load(), " malformed refused at push, ", run.full_queue.load(),
          " try_push on a full queue); publishes: ", run.publishes.size(), ", epochs: ",
          analysis.publish_of_epoch.size(), "; queries checked: ", analysis.records, " requests, ",
          analysis.rows_checked, " rows (", analysis.evaluations, " row evaluations); prefix pinned to one length in ",
          analysis.unique, " of ", analysis.pairs, " (publish, producer) pairs; final size ", analysis.final_size,
          "; checking took ", check_s, " s");
}
