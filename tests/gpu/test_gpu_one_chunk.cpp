// GPU suite, one-chunk stores (vectors of at most four elements; skips without a CUDA device):
// the CUDA backend against the CPU backend where each lane scores several tiles; small batches
// with ties in slot order; the direct search of small batches; the spatial index of stores of
// one or two dimensions (forced on, and under Auto across publishes, with refits); the
// query-resident scan of large batches (and the selection's 256-thread blocks after it).
#include "gpu/gpu_twin.hpp"

using namespace test;
using namespace gpu_twin;

TEST_CASE("GPU equals CPU on one-chunk stores, where each lane scores several tiles (dim 1-4, batches of 4-300)") {
  // Stores of at most four elements per vector run kernels of their own; where survivors are
  // sparse (large stores, small k x group) each lane scores 2-4 tiles at once and tests their
  // smallest rank (erased slots score NaN), then re-scores a group with survivors tile by tile.
  // Every shape but the last takes that path: partial tile groups, erased slots, duplicates
  // (exact ties), every metric kind, groups of 4, 8, 12 and 16. (A mutant that skips each
  // group's last tile when re-scoring fails six of the seven; the dim-1 shape's ties hide it.)
  check_shapes(5190,
             {StoreShape{2, 1'000'003, 16, 4, Metric::L2, 0.2, false},
              StoreShape{2, 1'000'003, 3, 300, Metric::L2, 0.05, true},
              StoreShape{1, 600'000, 2, 16, Metric::L2, 0.1, true},
              StoreShape{3, 1'000'000, 8, 8, Metric::InnerProduct, 0.1, false},
              StoreShape{4, 700'000, 5, 33, Metric::L2, 0.3, true},
              StoreShape{2, 1'000'000, 4, 12, Metric::Haversine, 0.1, false},
              StoreShape{3, 1'000'000, 1, 17, Metric::Cosine, 0.0, false},
              StoreShape{2, 100'000, 16, 64, Metric::L2, 0.5, true}},
             /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU on small batches over one-chunk stores (1-4 queries, ties in slot order)") {
  // Stores of at most four stored elements, batches of one to four queries (graph replays; k <=
  // 64 takes the direct search, larger k the sample pass and the scan): every metric kind,
  // erased slots, duplicates, k near or above the store size, tiny and empty stores, and stores
  // of one point repeated with ids in slot order, where every rank ties and the answer must be
  // the k smallest ids (a scan warp's first tiles, or a direct block's segment, tie its list).
  check_shapes(5230,
             {StoreShape{2, 100'000, 16, 1, Metric::L2, 0.1, false},
              StoreShape{2, 1'000'003, 16, 1, Metric::L2, 0.2, false},
              StoreShape{2, 3'000'000, 100, 2, Metric::Haversine, 0.1, false},
              StoreShape{1, 200'000, 256, 4, Metric::L2, 0.0, true},
              StoreShape{3, 500'000, 5, 3, Metric::InnerProduct, 0.1, false},
              StoreShape{3, 300'000, 64, 4, Metric::Cosine, 0.3, true},
              StoreShape{4, 50'000, 1, 1, Metric::L2, 0.5, false},
              StoreShape{2, 5'000, 200, 2, Metric::L2, 0.2, false},
              StoreShape{2, 100, 16, 4, Metric::L2, 0.0, false},
              StoreShape{2, 10, 16, 1, Metric::L2, 0.0, false},
              StoreShape{2, 0, 8, 2, Metric::L2, 0.0, false},
              StoreShape{2, 200'000, 16, 1, Metric::L2, 0.0, false, true},
              StoreShape{2, 300'000, 256, 2, Metric::L2, 0.0, false, true}},
             /*as_batch=*/true, /*each_alone=*/true);
}

TEST_CASE("small batches over one-chunk stores: the scan's paths (sanitizer-sized)") {
  // The case above at racecheck's scale: one to four queries at k above the direct search's 64
  // (the scan; one query bounds itself from its first tiles), every metric kind, erased slots,
  // duplicates, k above the store size, an empty store and one repeated point (every rank ties).
  check_shapes(5240,
             {StoreShape{2, 20'000, 100, 1, Metric::L2, 0.1, false},
              StoreShape{2, 20'000, 100, 4, Metric::Haversine, 0.1, false},
              StoreShape{1, 5'000, 256, 2, Metric::L2, 0.0, true},
              StoreShape{3, 8'000, 128, 3, Metric::Cosine, 0.3, true},
              StoreShape{3, 6'000, 80, 1, Metric::InnerProduct, 0.1, false},
              StoreShape{2, 100, 200, 2, Metric::L2, 0.0, false},
              StoreShape{2, 0, 100, 2, Metric::L2, 0.0, false},
              StoreShape{2, 3'000, 200, 2, Metric::L2, 0.0, false, true}},
             /*as_batch=*/true, /*each_alone=*/true);
}

TEST_CASE("GPU equals CPU where small batches over one-chunk stores take the direct search") {
  // One to four queries at k <= 64 over stores of at most four stored elements: one kernel in
  // place of the sample pass and the scan, whose blocks bound their segments by their group
  // minima and the grid-wide bound and hand the selection their k best. Blocks of several
  // segments (3,000,000 points, or four queries sharing the SMs), every metric kind, erased
  // slots (90% of one store), duplicates, k = 1 and k = 64, and stores of one repeated point:
  // every rank ties, so each segment admits all its points, the list is cut to k between
  // segments by the k-th smallest id (a radix select down to the id's last byte), and the answer
  // is the k smallest ids.
  check_shapes(5260,
             {StoreShape{2, 3'000'000, 16, 1, Metric::L2, 0.1, false},
              StoreShape{2, 1'000'000, 16, 4, Metric::L2, 0.2, false},
              StoreShape{2, 1'500'000, 16, 1, Metric::L2, 0.0, false, true},
              StoreShape{2, 100'000, 64, 2, Metric::L2, 0.0, false, true},
              StoreShape{4, 300'000, 64, 3, Metric::InnerProduct, 0.1, false},
              StoreShape{3, 200'000, 33, 2, Metric::Cosine, 0.5, true},
              StoreShape{2, 50'000, 64, 4, Metric::Haversine, 0.9, false},
              StoreShape{1, 2'000'000, 1, 1, Metric::L2, 0.0, true}},
             /*as_batch=*/true, /*each_alone=*/true);
}

TEST_CASE("the direct search: each path (sanitizer-sized)") {
  // Small enough for compute-sanitizer: one block and many, lists cut between segments (four
  // queries share the SMs, so blocks take several segments of one repeated point), all ties at
  // k = 64, erased slots and an empty store.
  check_shapes(5265,
             {StoreShape{2, 20'000, 16, 2, Metric::L2, 0.1, false},
              StoreShape{2, 1'000, 5, 1, Metric::L2, 0.0, false},
              StoreShape{2, 700'000, 32, 4, Metric::L2, 0.0, false, true},
              StoreShape{2, 80'000, 64, 1, Metric::L2, 0.0, false, true},
              StoreShape{3, 30'000, 8, 3, Metric::InnerProduct, 0.5, true},
              StoreShape{2, 0, 4, 1, Metric::L2, 0.0, false}},
             /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU through the spatial index (dims 1-2, the sphere, k to 128, erased slots, ties, empty stores)") {
  // StoreConfig::spatial_index = Always: every search of a store of one or two stored elements
  // (L2, cosine), or of points on the unit sphere (haversine; cosine at three dims: a grid on
  // each face of a cube, boxes of four elements), at k <= 128 without id ranges builds the tree
  // of boxes and walks it, a warp per query. Stores from empty to 2,000,000 points (a root that is a leaf, partial leaves, up to
  // five levels), erased slots (90% of one store),
  // duplicates, every rank tied (one repeated point: the answer is the k smallest ids, so
  // boxes whose bound equals the k-th must still be opened), k = 1 to 128 (lists of one, two and
  // four entries per lane, the entry pushed out of a full list and across registers), batches of 1 to 4,096
  // and one query at a time (graph replays of the spatial plan).
  constexpr SpatialIndex on = SpatialIndex::Always;
  check_shapes(5280,
               {StoreShape{2, 1'000'003, 16, 1024, Metric::L2, 0.2, false, false, on},
                StoreShape{2, 2'000'000, 32, 4096, Metric::L2, 0.0, false, false, on},
                StoreShape{2, 300'000, 1, 17, Metric::L2, 0.9, true, false, on},
                StoreShape{1, 500'000, 7, 300, Metric::L2, 0.1, true, false, on},
                StoreShape{2, 200'000, 32, 64, Metric::Cosine, 0.3, false, false, on},
                StoreShape{2, 1'000'000, 16, 1024, Metric::Haversine, 0.1, false, false, on},
                StoreShape{2, 300'000, 32, 100, Metric::Haversine, 0.5, true, false, on},
                StoreShape{3, 400'000, 8, 200, Metric::Cosine, 0.2, false, false, on},
                StoreShape{2, 40'000, 12, 30, Metric::Haversine, 0.0, false, true, on},
                StoreShape{2, 1'000'000, 128, 1024, Metric::L2, 0.1, false, false, on},
                StoreShape{2, 200'000, 64, 300, Metric::L2, 0.3, true, false, on},
                StoreShape{2, 300'000, 33, 50, Metric::Haversine, 0.2, false, false, on},
                StoreShape{2, 20'000, 100, 20, Metric::L2, 0.0, false, true, on},
                StoreShape{2, 90, 128, 5, Metric::L2, 0.1, false, false, on},
                StoreShape{2, 100'000, 20, 50, Metric::L2, 0.0, false, true, on},
                StoreShape{2, 5'000, 32, 40, Metric::L2, 0.0, false, true, on},
                StoreShape{2, 33, 32, 8, Metric::L2, 0.1, false, false, on},
                StoreShape{2, 20, 32, 3, Metric::L2, 0.0, false, false, on},
                StoreShape{2, 1, 4, 2, Metric::L2, 0.0, false, false, on},
                StoreShape{2, 0, 8, 2, Metric::L2, 0.0, false, false, on}},
               /*as_batch=*/true, /*each_alone=*/false);
  check_shapes(5281,
               {StoreShape{2, 1'000'000, 16, 6, Metric::L2, 0.1, false, false, on},
                StoreShape{1, 70'000, 32, 3, Metric::L2, 0.0, true, false, on},
                StoreShape{2, 50'000, 5, 4, Metric::L2, 0.0, false, true, on}},
               /*as_batch=*/true, /*each_alone=*/true);
}

TEST_CASE("the spatial index: each path (sanitizer-sized)") {
  // Small enough for compute-sanitizer: a tree of three levels and of one leaf, an empty store,
  // erased slots, ties everywhere (one repeated point), merges by sorting and by insertion, and
  // points on the sphere (boxes of four elements).
  constexpr SpatialIndex on = SpatialIndex::Always;
  check_shapes(5285,
               {StoreShape{2, 20'000, 16, 64, Metric::L2, 0.5, false, false, on},
                StoreShape{2, 2'000, 32, 8, Metric::L2, 0.0, false, true, on},
                StoreShape{1, 3'000, 3, 5, Metric::L2, 0.0, true, false, on},
                StoreShape{2, 10'000, 16, 32, Metric::Haversine, 0.3, false, false, on},
                StoreShape{2, 8'000, 100, 16, Metric::L2, 0.2, false, false, on},
                StoreShape{2, 30, 8, 2, Metric::L2, 0.2, false, false, on},
                StoreShape{2, 0, 4, 1, Metric::L2, 0.0, false, false, on}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("the spatial index on clustered points, points far from the origin, and through publishes (Auto)") {
  // Clustered data (most points in a few tight clusters, some far away, queries anywhere) gives
  // leaves of very different sizes; points near 10^6 with neighbours 10^-2 apart put the ranks'
  // rounding in play. Under Auto the index is built once 1,024 queries have been searched since
  // the last publish: the searches before and after it, and after moves and erases (each publish
  // makes the index stale; the two buffers each keep their own), equal the CPU's.
  auto g = rng(5290);
  for (const bool far : {false, true}) {
    CAPTURE(far);
    Twin t(2, Metric::L2, TargetSpec::none(), 1 << 16, SpatialIndex::Auto);
    std::normal_distribution<float> tight(0.0f, far ? 0.01f : 0.001f);
    std::uniform_real_distribution<float> anywhere(far ? 1e6f - 10.0f : -1.0f, far ? 1e6f + 10.0f : 1.0f);
    std::vector<std::array<float, 2>> centres(5);
    for (auto& c : centres) c = {anywhere(g), anywhere(g)};
    auto point = [&] {
      if (g() % 10 == 0) return std::vector<float>{anywhere(g), anywhere(g)};
      const auto& c = centres[g() % centres.size()];
      return std::vector<float>{c[0] + tight(g), c[1] + tight(g)};
    };
    for (PointId id = 0; id < 300'000; ++id) {
      const auto v = point();
      t.push(Update::insert(id, v));
      t.model.vectors[id] = v;
    }
    t.publish();
    for (int round = 0; round < 6; ++round) {
      CAPTURE(round);
      for (const std::size_t q : {1, 40, 200, 900}) {  // the index is built during each round
        std::vector<float> queries;
        for (std::size_t i = 0; i < q; ++i) {
          const auto v = i % 2 ? point() : std::vector<float>{anywhere(g), anywhere(g)};
          queries.insert(queries.end(), v.begin(), v.end());
        }
        for (const std::size_t k : {1, 16, 32}) {
          CHECK(compare(t.gpu.search(queries, k), t.cpu.search(queries, k), t.model, Metric::L2, queries) == 0);
        }
      }
      for (int i = 0; i < 2000; ++i) {  // moves, erases and inserts
        const PointId id = g() % 300'000;
        if (t.model.vectors.count(id) && g() % 4 == 0) {
          t.push(Update::erase(id));
          t.model.vectors.erase(id);
        } else {
          const auto v = point();
          t.push(t.model.vectors.count(id) ? Update::move(id, v) : Update::insert(id, v));
          t.model.vectors[id] = v;
        }
      }
      t.publish();
    }
  }
}

namespace {

/// Rounds of publishes over a store under the spatial index, each checked against the CPU: drifts
/// (a twentieth of the points moved a little: they stay in their leaves, whose boxes grow), jumps
/// (points moved anywhere: the overflow), erases and inserts (new ids, and ids erased before).
/// Each round's first search finds the index stale: a refit where SpatialTree::refittable allows
/// (each buffer's index sees two rounds of writes, a tenth of the store: under the quarter that a
/// refit takes; the overflow grows by the jumps and inserts and crosses its limit of 2,048 within
/// the rounds, which makes the next one a build), else a build; the searches after it use the
/// index as it is. A build whose search skipped the overflow fails here (checked on an H100).
void check_refits(std::uint64_t seed, Metric metric, std::size_t n, std::size_t rounds, std::size_t jumps,
                  std::size_t churn, SpatialIndex spatial, std::initializer_list<std::size_t> batches) {
  auto g = rng(seed);
  const std::size_t dim = 2;
  Twin t(dim, metric, TargetSpec::none(), 1 << 17, spatial);
  const bool sphere = metric == Metric::Haversine;
  std::normal_distribution<float> step(0.0f, sphere ? 0.05f : 0.002f);
  auto drifted = [&](const std::vector<float>& v) {
    if (!sphere) return std::vector<float>{v[0] + step(g), v[1] + step(g)};
    const float lon = v[1] + step(g);
    return std::vector<float>{std::clamp(v[0] + step(g), -89.9f, 89.9f), lon > 180 ? lon - 360 : lon < -180 ? lon + 360 : lon};
  };
  const auto data = points_for(metric, g, n, dim);
  for (std::size_t i = 0; i < n; ++i) {
    const std::vector<float> v(data.begin() + i * dim, data.begin() + (i + 1) * dim);
    t.push(Update::insert(PointId(i), v));
    t.model.vectors[PointId(i)] = v;
  }
  t.publish();
  PointId next_id = n;
  for (std::size_t round = 0; round < rounds; ++round) {
    CAPTURE(round);
    for (std::size_t i = 0; i < n / 20; ++i) {
      const PointId id = g() % next_id;
      const auto it = t.model.vectors.find(id);
      if (it == t.model.vectors.end()) continue;
      it->second = drifted(it->second);
      t.push(Update::move(id, it->second));
    }
    for (std::size_t i = 0; i < jumps; ++i) {
      const PointId id = g() % next_id;
      if (!t.model.vectors.count(id)) continue;
      const auto v = points_for(metric, g, 1, dim);
      t.push(Update::move(id, v));
      t.model.vectors[id] = v;
    }
    for (std::size_t i = 0; i < churn; ++i) {
      const PointId gone = g() % next_id;
      if (t.model.vectors.erase(gone)) t.push(Update::erase(gone));
      // half new ids, half ids erased before (their slots were freed)
      const PointId id = i % 2 ? next_id++ : g() % next_id;
      if (t.model.vectors.count(id)) continue;
      const auto v = points_for(metric, g, 1, dim);
      t.push(Update::insert(id, v));
      t.model.vectors[id] = v;
    }
    t.publish();
    for (const std::size_t q : batches) {
      CAPTURE(q);
      const auto queries = points_for(metric, g, q, dim);
      for (const std::size_t k : {1, 16, 100}) {
        CAPTURE(k);
        CHECK(compare(t.gpu.search(queries, k), t.cpu.search(queries, k), t.model, metric, queries) == 0);
      }
    }
  }
}

}  // namespace

TEST_CASE("the spatial index refit across publishes: drifts, jumps, erases, inserts (Always and Auto)") {
  check_refits(5300, Metric::L2, 200'000, 6, 500, 300, SpatialIndex::Always, {300, 1});
  check_refits(5301, Metric::Haversine, 100'000, 5, 700, 200, SpatialIndex::Always, {200});
  // Auto: 64 queries at a time, so the scans serve the first after each publish and the index
  // is refit once 128 have waited; k = 100 takes the index from 1,024 queries only.
  check_refits(5302, Metric::L2, 100'000, 4, 300, 300, SpatialIndex::Auto, {64, 64, 1024});
  // 20,000 jumps a buffer: each refit leaves more than SpatialTree::kMaxSearchOverflow in the
  // overflow. The first search ranks it (the refit's figures are not read yet), the second finds
  // the index unusable and builds; each buffer tries a refit again after 8 builds (rounds 18 and 19).
  check_refits(5303, Metric::L2, 200'000, 20, 10'000, 100, SpatialIndex::Always, {8, 8});
}

TEST_CASE("the spatial index refit: each path (sanitizer-sized)") {
  check_refits(5305, Metric::L2, 20'000, 3, 900, 100, SpatialIndex::Always, {40});
  check_refits(5306, Metric::Haversine, 10'000, 2, 900, 100, SpatialIndex::Always, {20});
}

TEST_CASE("GPU equals CPU where large batches over one-chunk stores take the query-resident scan") {
  // Batches of 16+ queries at k <= 128 (queries x k >= 1,024 on large stores, 4,096 on small
  // ones) over stores of at most four stored elements, L2 ranks (haversine and cosine included),
  // after a sample pass: each lane holds 4 queries, the warps of a block share 128 and split its
  // slots, a dot-product screen with a proven margin picks the pairs to rank exactly, each warp
  // keeps a list per query (unsorted until it is full, then replacing its largest entry) and the
  // block merges them. 17 to 4,096 queries (1 to 32 rows of blocks), k = 1 and k = 128, erased
  // slots (half of one store), duplicates (exact ties), a store of one repeated point (every list
  // fills and replaces by id: the answer is the k smallest ids), small and large stores, and two
  // shapes that keep the scan (no sample pass).
  check_shapes(5280,
               {StoreShape{2, 1'000'003, 16, 1024, Metric::L2, 0.1, false},
                StoreShape{2, 300'000, 1, 1100, Metric::L2, 0.2, true},
                StoreShape{1, 300'000, 128, 513, Metric::L2, 0.0, true},
                StoreShape{3, 500'000, 64, 200, Metric::Cosine, 0.3, false},
                StoreShape{2, 400'000, 16, 4096, Metric::Haversine, 0.05, false},
                StoreShape{4, 300'000, 64, 17, Metric::L2, 0.5, true},
                StoreShape{2, 60'000, 64, 64, Metric::L2, 0.0, false, true},
                StoreShape{2, 3'000, 16, 300, Metric::L2, 0.1, false},
                StoreShape{2, 2'000, 100, 300, Metric::L2, 0.1, false},
                StoreShape{2, 0, 8, 20, Metric::L2, 0.0, false}},
               /*as_batch=*/true, /*each_alone=*/false);
}

TEST_CASE("GPU equals CPU where a resident batch exceeds the workspace (chunks of whole rows)") {
  // 30,000 queries at k = 128 over 60,000 x 2: the sample's keys and one block's lists per query
  // (about 21 KB) exceed the 512 MB candidate workspace, so the plan runs the batch in chunks of
  // whole rows of 128 queries, each with its own sample pass.
  check_shapes(5288, {StoreShape{2, 60'000, 128, 30'000, Metric::L2, 0.1, false}}, /*as_batch=*/true,
               /*each_alone=*/false);
}

TEST_CASE("the query-resident scan: lists that fill and replace, and norms that may overflow") {
  auto g = rng(5285);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  auto run = [&](Twin& t, const std::vector<float>& queries, std::size_t k) {
    CHECK(compare(t.gpu.search(queries, k), t.cpu.search(queries, k), t.model, Metric::L2, queries) == 0);
  };
  SUBCASE("points in slot order along a line: each query's neighbours lie in one block's share") {
    // Every query's survivors crowd one block, whose list fills, then replaces its largest entry
    // (k = 16 and 128) and lowers the query's bound.
    Twin t(2, Metric::L2, TargetSpec::none());
    const std::size_t n = 300'000;
    for (std::size_t i = 0; i < n; ++i) {
      const std::vector<float> v{float(i) / float(n), 0.5f};
      t.push(Update::insert(PointId(i), v));
      t.model.vectors[PointId(i)] = v;
    }
    t.publish();
    std::vector<float> queries;
    for (int q = 0; q < 300; ++q) {
      queries.push_back(unit(g));
      queries.push_back(0.5f + 0.01f * unit(g));
    }
    run(t, queries, 16);
    run(t, queries, 128);
  }
  SUBCASE("norms of 10^37 and more: those tiles and queries rank every pair exactly") {
    // Half the points (and 8 of the 64 queries) lie about 4e18 from the origin (within the
    // coordinate bound of streamknn/metric.hpp, 4.6e18 at dim 2), where |x|^2 reaches
    // screen_bounds' `huge` and a float dot product could overflow: the screen is skipped there,
    // and the answers still equal the CPU's (k = 64: 64 x 64 takes the resident scan on this
    // small store).
    Twin t(2, Metric::L2, TargetSpec::none());
    auto point = [&](bool far) {
      return far ? std::vector<float>{4e18f + 1e14f * unit(g), 4e18f + 1e14f * unit(g)} : std::vector<float>{unit(g), unit(g)};
    };
    for (std::size_t i = 0; i < 100'000; ++i) {
      const auto v = point(i % 2 == 1);
      t.push(Update::insert(PointId(i), v));
      t.model.vectors[PointId(i)] = v;
    }
    t.publish();
    std::vector<float> queries;
    for (int q = 0; q < 64; ++q) {
      const auto v = point(q % 8 == 0);
      queries.insert(queries.end(), v.begin(), v.end());
    }
    run(t, queries, 64);
  }
}

TEST_CASE("the query-resident scan keeps every pair within the bound where the norms dwarf the distances") {
  // 2-D points and queries about 10,000 from the origin on both axes, 0.01 apart: |x|^2 is about
  // 2 x 10^8, so fl(|x|^2 - 2 x.q) errs by tens while neighbours lie about 10^-3 apart (squared).
  // Only the screen's proven margin keeps their pairs; the answers equal the CPU's.
  auto g = rng(5287);
  std::normal_distribution<float> noise(0.0f, 0.01f);
  Twin t(2, Metric::L2, TargetSpec::none());
  auto far_point = [&] { return std::vector<float>{10'000.0f + noise(g), 10'000.0f + noise(g)}; };
  for (std::size_t i = 0; i < 40'000; ++i) {
    const auto v = far_point();
    t.push(Update::insert(PointId(i), v));
    t.model.vectors[PointId(i)] = v;
  }
  t.publish();
  std::vector<float> queries;
  for (int q = 0; q < 128; ++q) {
    const auto v = far_point();
    queries.insert(queries.end(), v.begin(), v.end());
  }
  CHECK(compare(t.gpu.search(queries, 32), t.cpu.search(queries, 32), t.model, Metric::L2, queries) == 0);
}

TEST_CASE("the query-resident scan: each path (sanitizer-sized)") {
  // Small enough for compute-sanitizer: 600 queries (five rows of blocks), lists that fill and
  // merges in several rounds (one repeated point: every warp's list holds k), erased slots, a
  // dimension-3 store (float4 slots). Batches of 256+ queries select in blocks of 256 threads
  // (every rank tied in one of them).
  check_shapes(5290,
               {StoreShape{2, 20'000, 64, 64, Metric::L2, 0.1, false},
                StoreShape{2, 30'000, 8, 600, Metric::L2, 0.0, false},
                StoreShape{2, 30'000, 64, 64, Metric::L2, 0.0, false, true},
                StoreShape{2, 30'000, 16, 300, Metric::L2, 0.0, false, true},
                StoreShape{3, 20'000, 16, 256, Metric::Cosine, 0.3, true}},
               /*as_batch=*/true, /*each_alone=*/false);
}
