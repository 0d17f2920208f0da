// GPU suite (skips without a CUDA device): the CUDA backend against the CPU backend on the
// same operations, over random shapes (D 1..1024, K 1..2048 and K > size, Q 1..4096, stores
// up to 3,000,000 points, erased slots, exact ties), with the device's result buffers poisoned
// before every search (StoreConfig::debug); the scan's warp lists in global memory; visibility
// ranges; aggregation parity; snapshots of in-flight searches across publishes on the device;
// graph replays after publishes; small batches whose input block the graph reads with a kernel
// (more than 16 KB); the rows both backends read for the sharded store's merge; and the answers
// against the exact big-integer reference (support/exact_reference.hpp) on hard data: ties at
// the k-th place, duplicates, offsets of 1e3-1e6, grids, every metric, k to 4096.
// One-chunk stores are in test_gpu_one_chunk.cpp, multi-chunk scan paths and the screens in
// test_gpu_screens.cpp; the twin stores they share in gpu_twin.hpp.
#include "gpu/gpu_twin.hpp"

using namespace test;
using namespace gpu_twin;

TEST_CASE("GPU equals CPU when one caller alternates batch sizes and k (cached graphs)") {
  // Batches of up to 16 replay a CUDA graph per (batch size, k, ..) of one pooled context, larger
  // ones launch directly into the same staging. A graph holds the offsets of its own batch's
  // staging layout, so a caller that alternates sizes and k reuses each graph while the arrays
  // stay where they are, and captures again only after they grew: each answer here must equal
  // the CPU's, with the outputs poisoned before every search, over a sequence that goes back and
  // forth (and grows the arrays once in the middle).
  auto g = rng(5010);
  for (const Metric metric : {Metric::L2, Metric::Haversine}) {
    const std::size_t dim = metric == Metric::Haversine ? 2 : 24;
    Twin t(dim, metric, TargetSpec::none());
    fill(t, metric, 30'000, g, 0.1);
    const std::pair<std::size_t, std::size_t> batches[] = {{1, 16}, {3, 5},  {16, 16}, {2, 64}, {40, 16}, {1, 5},
                                                           {16, 5}, {64, 5}, {5, 16}, {1, 16}, {3, 5},   {40, 16}};
    std::size_t bad = 0;
    for (int round = 0; round < 3; ++round) {
      for (const auto& [nq, k] : batches) {
        // The middle round first asks for a larger k, which grows the context's arrays.
        const std::size_t kk = round == 1 && nq == 16 ? 300 : k;
        const auto queries = points_for(metric, g, nq, dim);
        const std::size_t b = compare(t.gpu.search(queries, kk), t.cpu.search(queries, kk), t.model, metric, queries);
        CAPTURE(round);
        CAPTURE(nq);
        CAPTURE(kk);
        CHECK(b == 0);
        bad += b;
      }
    }
    // More shapes than a context keeps graphs for (64): the cache is dropped when full and
    // refilled, every answer still the CPU's.
    for (std::size_t k = 1; k <= 70; ++k) {
      const auto queries = points_for(metric, g, 1 + k % 3, dim);
      const std::size_t b = compare(t.gpu.search(queries, k), t.cpu.search(queries, k), t.model, metric, queries);
      CAPTURE(k);
      CHECK(b == 0);
      bad += b;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("GPU equals CPU where a small batch's input block exceeds 16 KB (its graph reads it with a kernel)") {
  // A graph brings a chunk's input block (queries, id ranges, thresholds) of up to 16 KB in with
  // a copy node and a larger one with a kernel that reads the mapped staging (launch_copy_in):
  // 1-16 queries of 1,024 dims (4 KB each: the kernel from 4 queries) and of 300 dims (1.2 KB:
  // from 14), with and without id ranges, each batch searched twice (the second replays the
  // first's graph). Every batch has new queries, so a block left uncopied answers the last one's.
  auto g = rng(5020);
  for (const std::size_t dim : {300, 1024}) {
    CAPTURE(dim);
    Twin t(dim, Metric::L2, TargetSpec::none());
    fill(t, Metric::L2, 3'000, g, 0.1);
    const auto [lo, hi] = id_bounds(t.model);
    std::size_t bad = 0;
    for (std::size_t nq = 1; nq <= 16; ++nq) {
      for (const std::size_t k : {1, 20}) {
        const auto queries = points_for(Metric::L2, g, nq, dim);
        std::vector<IdRange> ranges(nq);
        for (std::size_t q = 0; q < nq; ++q) ranges[q] = {lo + 50 * q, hi + 1 - 50 * q};
        for (int replay = 0; replay < 2; ++replay) {
          CAPTURE(nq);
          CAPTURE(k);
          CAPTURE(replay);
          const std::size_t all = compare(t.gpu.search(queries, k), t.cpu.search(queries, k), t.model, Metric::L2, queries);
          const std::size_t ranged =
              compare(t.gpu.search(queries, k, ranges), t.cpu.search(queries, k, ranges), t.model, Metric::L2, queries);
          CHECK(all == 0);
          CHECK(ranged == 0);
          bad += all + ranged;
        }
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("GPU equals CPU over random shapes, with poisoned outputs") {
  auto g = rng(5000);
  const std::size_t dims[] = {1, 2, 3, 4, 5, 7, 8, 16, 31, 64, 100, 128, 300, 784, 1024};
  const std::size_t ks[] = {1, 2, 5, 16, 31, 64, 100, 128, 256, 1000, 2048};
  const std::size_t qs[] = {1, 2, 3, 5, 8, 12, 16, 17, 33, 100, 1000, 4096};
  const Metric metrics[] = {Metric::L2, Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine};
  std::size_t total_bad = 0, cases = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < 60; ++c) {
    const Metric metric = metrics[g() % std::size(metrics)];
    const std::size_t dim = metric == Metric::Haversine ? 2 : dims[g() % std::size(dims)];
    const std::size_t k = ks[g() % std::size(ks)];
    std::size_t nq = qs[g() % std::size(qs)];
    // Keep each case's work (and the CPU reference's) bounded.
    const std::size_t budget = 4'000'000'000ull;
    std::size_t n = std::size_t(1) << (g() % 18);  // 1 .. 131072
    if (c % 10 == 0) n = 0;
    if (c % 10 == 1) n = k / 2;  // k > size
    while (n * dim * nq > budget && nq > 1) nq /= 2;
    CAPTURE(c);
    CAPTURE(to_string(metric));
    CAPTURE(dim);
    CAPTURE(n);
    CAPTURE(k);
    CAPTURE(nq);
    Twin t(dim, metric, TargetSpec::none());
    fill(t, metric, n, g, 0.15, c % 7 == 3);
    const auto queries = points_for(metric, g, nq, dim);
    const Neighbors cpu = t.cpu.search(queries, k);
    const Neighbors gpu = t.gpu.search(queries, k);
    REQUIRE(gpu.num_queries == nq);
    CHECK(gpu.epoch == cpu.epoch);
    const std::size_t bad = compare(gpu, cpu, t.model, metric, queries);
    CHECK(bad == 0);
    total_bad += bad;
    ++cases;
  }
  MESSAGE(cases, " random shapes compared in ",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), " s");
  CHECK(total_bad == 0);
}

TEST_CASE("GPU equals CPU on large stores: 3,000,000 x 2, 1,000,000 x 16 with erased slots, K = 2048") {
  auto g = rng(5100);
  struct Big {
    std::size_t dim, n, k, q;
    Metric metric;
  };
  for (const Big& b : {Big{2, 3'000'000, 16, 64, Metric::L2}, Big{2, 1'000'000, 2048, 8, Metric::Haversine},
                       Big{16, 1'000'000, 100, 33, Metric::L2}, Big{128, 200'000, 2048, 3, Metric::L2}}) {
    CAPTURE(b.dim);
    CAPTURE(b.n);
    CAPTURE(b.k);
    Twin t(b.dim, b.metric, TargetSpec::none());
    fill(t, b.metric, b.n, g, 0.05);
    const auto queries = points_for(b.metric, g, b.q, b.dim);
    CHECK(compare(t.gpu.search(queries, b.k), t.cpu.search(queries, b.k), t.model, b.metric, queries) == 0);
  }
}

TEST_CASE("GPU equals CPU with visibility ranges on large low-dimension stores (sample pass from one query)") {
  // Stores large enough for the sample pass, which at dim <= 8 runs from Q = 1: its bound must
  // respect each query's id range (a narrow range may hold fewer than k sample points).
  auto g = rng(5150);
  struct Shape {
    std::size_t dim, n, k;
    Metric metric;
  };
  for (const Shape& s : {Shape{2, 600'000, 16, Metric::L2}, Shape{2, 400'000, 64, Metric::Haversine},
                         Shape{8, 400'000, 32, Metric::L2}}) {
    CAPTURE(s.dim);
    CAPTURE(s.n);
    CAPTURE(s.k);
    Twin t(s.dim, s.metric, TargetSpec::none());
    fill(t, s.metric, s.n, g, 0.05);
    const auto [lo, hi] = id_bounds(t.model);
    for (std::size_t nq : {1, 2, 3, 5}) {
      CAPTURE(nq);
      const auto queries = points_for(s.metric, g, nq, s.dim);
      std::vector<IdRange> ranges(nq);
      const PointId span = hi - lo + 1;
      for (std::size_t q = 0; q < nq; ++q) {
        // Wide, half, narrow (a few hundred ids: fewer than k sample points) and empty ranges.
        const PointId width = q % 4 == 0 ? span : q % 4 == 1 ? span / 2 : q % 4 == 2 ? 300 : 0;
        const PointId begin = lo + g() % (span - std::min(width, span) + 1);
        ranges[q] = {begin, begin + width};
      }
      const Neighbors cpu = t.cpu.search(queries, s.k, ranges);
      const Neighbors gpu = t.gpu.search(queries, s.k, ranges);
      REQUIRE(gpu.num_queries == nq);
      CHECK(compare(gpu, cpu, t.model, s.metric, queries) == 0);
      std::size_t outside = 0;
      for (std::size_t q = 0; q < nq; ++q) {
        for (PointId id : gpu.ids_of(q)) outside += id != kInvalidId && (id < ranges[q].begin || id >= ranges[q].end);
      }
      CHECK(outside == 0);
      const Neighbors all_cpu = t.cpu.search(queries, s.k), all_gpu = t.gpu.search(queries, s.k);
      CHECK(compare(all_gpu, all_cpu, t.model, s.metric, queries) == 0);
    }
  }
}

TEST_CASE("GPU equals CPU where the scan's warp lists live in global memory (batches of 8-33 queries)") {
  // Each shape runs a sample pass and its query group's lists (group x k per warp) would cost the
  // scan warps or a smaller group in shared memory, so the plan keeps them in global memory:
  // large stores from Q = 4 (every 32nd tile sampled), smaller stores from Q = 12, or 8 at
  // k >= 128 (every 8th tile). Each metric's kernel, erased slots and visibility ranges. From 8
  // queries the sample pass stages them in shared memory, 8 per warp (up to 1,536 dims; 1,540
  // takes the kernel that reads them from global memory).
  auto g = rng(5170);
  struct Shape {
    std::size_t dim, n, k, q;
    Metric metric;
  };
  for (const Shape& s : {Shape{128, 300'000, 128, 16, Metric::L2}, Shape{300, 300'000, 64, 12, Metric::InnerProduct},
                         Shape{40, 300'000, 200, 9, Metric::Cosine}, Shape{784, 70'000, 128, 33, Metric::L2},
                         Shape{2, 100'000, 100, 16, Metric::Haversine}, Shape{64, 120'000, 64, 12, Metric::L2},
                         Shape{1536, 20'000, 32, 12, Metric::L2}, Shape{1540, 20'000, 32, 12, Metric::InnerProduct}}) {
    CAPTURE(s.dim);
    CAPTURE(s.n);
    CAPTURE(s.k);
    CAPTURE(s.q);
    Twin t(s.dim, s.metric, TargetSpec::none());
    fill(t, s.metric, s.n, g, 0.05);
    const auto queries = points_for(s.metric, g, s.q, s.dim);
    CHECK(compare(t.gpu.search(queries, s.k), t.cpu.search(queries, s.k), t.model, s.metric, queries) == 0);
    const auto [lo, hi] = id_bounds(t.model);
    std::vector<IdRange> ranges(s.q);
    for (std::size_t q = 0; q < s.q; ++q) {
      const PointId width = q % 3 == 0 ? (hi - lo + 1) / 2 : q % 3 == 1 ? 500 : 0;
      const PointId begin = lo + g() % (hi - lo + 1 - width);
      ranges[q] = {begin, begin + width};
    }
    CHECK(compare(t.gpu.search(queries, s.k, ranges), t.cpu.search(queries, s.k, ranges), t.model, s.metric, queries) == 0);
  }
}

TEST_CASE("GPU aggregation equals the CPU's: votes, probabilities, mean, weighted mean, median") {
  auto g = rng(5200);
  for (std::size_t k : {1, 4, 15, 64, 300}) {
    CAPTURE(k);
    // Classification with duplicate points (zero distances, ties) and visibility ranges.
    Twin t(6, Metric::L2, TargetSpec::classes(7));
    const auto data = uniform(g, 800 * 6);
    std::uniform_int_distribution<std::int32_t> label(0, 6);
    for (PointId id = 0; id < 2000; ++id) {
      const std::span<const float> v(data.data() + (id % 800) * 6, 6);
      t.push(Update::insert(id, v, label(g)));
    }
    t.publish();
    auto queries = uniform(g, 200 * 6);
    std::copy(data.begin(), data.begin() + 20 * 6, queries.begin());
    std::vector<IdRange> ranges(200);
    for (std::size_t q = 0; q < 200; ++q) ranges[q] = {q * 5, q * 5 + 1500};
    for (Weights w : {Weights::Uniform, Weights::Distance}) {
      for (bool visible : {false, true}) {
        const std::span<const IdRange> vis = visible ? std::span<const IdRange>(ranges) : std::span<const IdRange>();
        const auto a = KnnClassifier(t.gpu, k, w).predict_proba(queries, vis);
        const auto b = KnnClassifier(t.cpu, k, w).predict_proba(queries, vis);
        const auto na = t.gpu.search(queries, k, vis), nb = t.cpu.search(queries, k, vis);
        std::size_t compared = 0;
        for (std::size_t q = 0; q < 200; ++q) {
          if (!std::equal(na.ids_of(q).begin(), na.ids_of(q).end(), nb.ids_of(q).begin())) continue;  // tie: other neighbours
          ++compared;
          CHECK(a.labels[q] == b.labels[q]);
          for (std::size_t c = 0; c < 7; ++c) CHECK(a.probabilities_of(q)[c] == doctest::Approx(b.probabilities_of(q)[c]).epsilon(1e-5));
        }
        CHECK(compared > 150);
      }
    }
    // Regression, 3 outputs.
    Twin r(4, Metric::L2, TargetSpec::outputs(3));
    const auto xs = uniform(g, 1500 * 4);
    for (PointId id = 0; id < 1500; ++id) {
      const auto y = uniform(g, 3, -5, 5);
      r.push(Update::insert(id, std::span<const float>(xs.data() + (id % 1000) * 4, 4), y));
    }
    r.publish();
    const auto rq = uniform(g, 100 * 4);
    for (auto agg : {RegressionAggregate::Mean, RegressionAggregate::WeightedMean, RegressionAggregate::Median}) {
      const auto a = KnnRegressor(r.gpu, k, agg).predict(rq), b = KnnRegressor(r.cpu, k, agg).predict(rq);
      const auto na = r.gpu.search(rq, k), nb = r.cpu.search(rq, k);
      for (std::size_t q = 0; q < 100; ++q) {
        if (!std::equal(na.ids_of(q).begin(), na.ids_of(q).end(), nb.ids_of(q).begin())) continue;
        for (std::size_t o = 0; o < 3; ++o) CHECK(a.values_of(q)[o] == doctest::Approx(b.values_of(q)[o]).epsilon(1e-5));
      }
      // Three queries at k <= 64 take the direct search (a one-chunk store): the aggregation
      // reads the slots it writes.
      const std::vector<float> few(rq.begin(), rq.begin() + 3 * 4);
      const auto fa = KnnRegressor(r.gpu, k, agg).predict(few), fb = KnnRegressor(r.cpu, k, agg).predict(few);
      const auto fna = r.gpu.search(few, k), fnb = r.cpu.search(few, k);
      for (std::size_t q = 0; q < 3; ++q) {
        if (!std::equal(fna.ids_of(q).begin(), fna.ids_of(q).end(), fnb.ids_of(q).begin())) continue;
        for (std::size_t o = 0; o < 3; ++o) CHECK(fa.values_of(q)[o] == doctest::Approx(fb.values_of(q)[o]).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("in-flight searches on the device keep their snapshot while publishes run") {
  auto g = rng(5300);
  StoreConfig c = config_for(4);
  c.backend = BackendKind::Cuda;
  ReferenceSet store(c);
  constexpr PointId kPoints = 20000;
  std::vector<std::vector<float>> where(kPoints);
  for (PointId id = 0; id < kPoints; ++id) {
    where[id] = uniform(g, 4);
    store.insert(id, where[id]);
  }
  store.publish();
  // Each round: ask (asynchronously) for the nearest point to 64 points' current positions,
  // then move those points far away and publish, before collecting the answers.
  std::size_t checked = 0;
  for (int round = 0; round < 200; ++round) {
    std::vector<PointId> probe(64);
    std::vector<float> queries;
    for (auto& p : probe) {
      p = g() % kPoints;
      queries.insert(queries.end(), where[p].begin(), where[p].end());
    }
    const std::uint64_t epoch_at_submit = store.epoch();
    auto ticket = store.submit(queries, 1);
    auto small = store.submit(std::span<const float>(queries).first(4), 1);  // graph path
    for (PointId p : probe) {
      where[p] = uniform(g, 4, 10 + round, 11 + round);  // far from every old position
      store.move(p, where[p]);
    }
    store.publish();
    const Neighbors got = ticket.get();
    const Neighbors got_small = small.get();
    CHECK(got.epoch == epoch_at_submit);
    CHECK(got_small.epoch == epoch_at_submit);
    for (std::size_t i = 0; i < probe.size(); ++i) {
      // At the submitted epoch the probed point sat exactly at the query: distance 0.
      CHECK(got.distances[i] == 0.0f);
      ++checked;
    }
    CHECK(got_small.distances[0] == 0.0f);
    // After the publish, the same query no longer finds distance 0 at that point.
    const Neighbors now = store.search(std::span<const float>(queries).first(4), 1);
    CHECK(now.epoch == store.epoch());
    CHECK((now.ids[0] != probe[0] || now.distances[0] > 0.0f));
  }
  MESSAGE(checked, " answers checked against the snapshot they were submitted on");
}

TEST_CASE("graph replays see every publish (slot count, growth, swaps)") {
  StoreConfig c = config_for(2);
  c.backend = BackendKind::Cuda;
  c.capacity_hint = 32;
  ReferenceSet store(c);
  const float q[2] = {0, 0};
  for (PointId id = 0; id < 3000; ++id) {
    const float v[2] = {float(3000 - id), 0};  // each new point is the nearest so far
    store.insert(id, v);
    store.publish();
    const Neighbors nn = store.search(q, 1);
    REQUIRE(nn.ids[0] == id);
    REQUIRE(nn.distances[0] == float(3000 - id));
  }
}

TEST_CASE("GPU equals CPU equals the exact reference on hard data (ties, duplicates, offsets, grids, every metric)") {
  // The float32 tie reproducer: ids 0, 1 on both backends.
  {
    Twin t(4, Metric::L2, TargetSpec::none());
    const std::vector<float> a{6.0f, 2.9f, 4.5f, 1.5f}, b{6.3f, 2.7f, 4.9f, 1.8f};
    t.push(Update::insert(0, a));
    t.push(Update::insert(1, b));
    t.publish();
    t.model.vectors[0] = a;
    t.model.vectors[1] = b;
    const std::vector<float> query{6.0f, 3.0f, 4.8f, 1.8f};
    const Neighbors gpu = t.gpu.search(query, 2);
    CHECK(gpu.ids[0] == 0);
    CHECK(gpu.ids[1] == 1);
    CHECK(compare(gpu, t.cpu.search(query, 2), t.model, Metric::L2, query) == 0);
  }
  auto g = rng(5400);
  for (Metric metric : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine}) {
    for (std::size_t dim : {2, 3, 8, 40, 130}) {
      if (metric == Metric::Haversine && dim != 2) continue;
      for (float offset : {0.0f, 1e3f, 1e6f}) {
        if (metric != Metric::L2 && offset != 0.0f) continue;
        CAPTURE(to_string(metric));
        CAPTURE(dim);
        CAPTURE(offset);
        Twin t(dim, metric, TargetSpec::none());
        // Integer grid points, each stored 1-3 times; a third erased.
        std::uniform_int_distribution<int> coord(-3, 3), copies(1, 3);
        PointId id = 10;
        for (int i = 0; i < 700; ++i) {
          std::vector<float> v(dim);
          for (auto& x : v) x = offset + float(coord(g));
          if (metric == Metric::Haversine) v = {float(coord(g)) * 0.5f, float(coord(g)) * 0.5f};
          if (metric == Metric::Cosine) v[0] = 1.0f + float(i % 3);
          for (int c = copies(g); c > 0; --c, id += 1 + g() % 2) {
            t.push(Update::insert(id, v));
            t.model.vectors[id] = v;
          }
        }
        t.publish();
        for (auto it = t.model.vectors.begin(); it != t.model.vectors.end();) {
          if (it->first % 3 == 0) {
            t.push(Update::erase(it->first));
            it = t.model.vectors.erase(it);
          } else {
            ++it;
          }
        }
        t.publish();
        std::vector<float> queries(9 * dim);
        for (auto& x : queries) x = offset + 0.5f * float(coord(g));
        if (metric == Metric::Haversine) {
          for (std::size_t q = 0; q < 9; ++q) queries[2 * q] = float(coord(g)) * 0.5f;
        }
        if (metric == Metric::Cosine) {
          for (std::size_t q = 0; q < 9; ++q) queries[q * dim] = 1.5f;
        }
        for (std::size_t k : {1, 2, 7, 64, 300, 4096}) {
          CAPTURE(k);
          const Neighbors gpu = t.gpu.search(queries, k), cpu = t.cpu.search(queries, k);
          CHECK(compare(gpu, cpu, t.model, metric, queries) == 0);
          CHECK(check_exact(gpu, t.model, metric, queries, 9) == 0);
        }
      }
    }
  }
}

TEST_CASE("the exact re-rank's fallback: hundreds of duplicates tied at the k-th place, every strategy's batch size") {
  for (std::size_t dim : {2, 16, 300}) {
    CAPTURE(dim);
    Twin t(dim, Metric::L2, TargetSpec::none());
    const std::vector<float> far(dim, 1.0f), near(dim, 0.25f);
    for (PointId id = 5000; id > 3000; --id) {
      t.push(Update::insert(id, far));
      t.model.vectors[id] = far;
    }
    t.push(Update::insert(7, near));
    t.model.vectors[7] = near;
    t.publish();
    for (std::size_t nq : {1, 8, 40, 300}) {
      const std::vector<float> queries(nq * dim, 0.0f);
      for (std::size_t k : {1, 2, 16, 128, 2048}) {
        CAPTURE(nq);
        CAPTURE(k);
        const Neighbors gpu = t.gpu.search(queries, k), cpu = t.cpu.search(queries, k);
        CHECK(compare(gpu, cpu, t.model, Metric::L2, queries) == 0);
        CHECK(check_exact(gpu, t.model, Metric::L2, queries, 2) == 0);
      }
    }
  }
}

TEST_CASE("both backends read the same stored rows for the sharded store's exact merge (points_of)") {
  auto g = rng(5500);
  for (Metric metric : {Metric::L2, Metric::Cosine, Metric::Haversine}) {
    for (std::size_t dim : {1, 2, 5, 37}) {
      if (metric == Metric::Haversine && dim != 2) continue;
      CAPTURE(to_string(metric));
      CAPTURE(dim);
      Twin t(dim, metric, TargetSpec::classes(3));
      for (PointId id = 0; id < 300; ++id) t.push(Update::insert(id, points_for(metric, g, 1, dim), int(id % 3)));
      t.publish();
      for (PointId id = 0; id < 300; id += 7) t.push(Update::erase(id));
      for (PointId id = 1; id < 300; id += 5) t.push(Update::move(id, points_for(metric, g, 1, dim)));
      t.publish();
      std::vector<PointId> ids;
      for (PointId id = 0; id < 320; id += 3) ids.push_back(id);  // erased and never-inserted ids too
      std::vector<std::int32_t> cpu_labels, gpu_labels;
      std::vector<float> cpu_values, gpu_values, cpu_rows, gpu_rows;
      REQUIRE(streamknn::detail::EngineAccess::of(t.cpu).points_of(ids, cpu_labels, cpu_values, &cpu_rows));
      REQUIRE(streamknn::detail::EngineAccess::of(t.gpu).points_of(ids, gpu_labels, gpu_values, &gpu_rows));
      CHECK(cpu_labels == gpu_labels);
      CHECK(cpu_rows == gpu_rows);
    }
  }
}
