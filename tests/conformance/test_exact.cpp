// Exact answers against the independent big-integer reference (support/exact_reference.hpp) on
// data built to be hard: exact ties at the k-th place, duplicates, large common offsets, integer
// grids, the reproducer of a float32 tie that came out in the wrong order, every metric, k from 1
// to past the store's size, erased slots and visibility ranges. Ids must match exactly and the
// distances bit for bit (haversine: within one float32 step of the exact value, non-decreasing).
#include "support/exact_reference.hpp"
#include "support/test_support.hpp"

using namespace test;

namespace {

using Points = std::unordered_map<PointId, std::vector<float>>;

void insert_all(ReferenceSet& store, const Points& points) {
  std::vector<PointId> ids;
  for (const auto& [id, v] : points) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (PointId id : ids) {
    while (!store.try_push(Update::insert(id, points.at(id)))) store.publish();
  }
  store.publish();
}

/// Checks every query of a batch against the exact reference; returns the mismatches.
std::size_t check_exact(const ReferenceSet& store, Metric metric, const Points& points, const std::vector<float>& queries,
                        std::size_t k, const std::vector<IdRange>& visible = {}) {
  const std::size_t dim = store.config().dim, nq = queries.size() / dim;
  const Neighbors got = store.search(queries, k, visible);
  std::size_t bad = 0;
  for (std::size_t q = 0; q < nq && bad < 3; ++q) {
    const std::span<const float> qv(queries.data() + q * dim, dim);
    const auto ref = exact_ref::knn(metric, points, qv, k, visible.empty() ? IdRange{} : visible[q]);
    const auto ids = got.ids_of(q);
    const auto dist = got.distances_of(q);
    for (std::size_t j = 0; j < k; ++j) {
      bool ok;
      if (j >= ref.size()) {
        ok = ids[j] == kInvalidId && std::isinf(dist[j]) && dist[j] > 0;
      } else if (metric == Metric::Haversine) {
        ok = ids[j] == ref[j].id && exact_ref::faithful(dist[j], ref[j].metres) && (j == 0 || dist[j] >= dist[j - 1]);
      } else {
        ok = ids[j] == ref[j].id && std::bit_cast<std::uint32_t>(dist[j]) == std::bit_cast<std::uint32_t>(ref[j].distance);
      }
      if (!ok) {
        FAIL_CHECK("query ", q, " position ", j, ": got id ", ids[j], " distance ", dist[j], ", exact reference id ",
                   j < ref.size() ? ref[j].id : kInvalidId, " distance ", j < ref.size() ? ref[j].distance : INFINITY,
                   " (", to_string(metric), ", dim ", dim, ", k ", k, ", ", points.size(), " points)");
        ++bad;
        break;
      }
    }
  }
  return bad;
}

/// Integer grid points in [0, side)^dim, each repeated `copies` times under different ids, plus
/// a common offset: many exact ties at every rank.
Points grid(std::mt19937_64& g, std::size_t n, std::size_t dim, int side, int copies, float offset) {
  Points p;
  std::uniform_int_distribution<int> coord(0, side - 1);
  std::uniform_int_distribution<PointId> gap(1, 3);
  PointId id = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<float> v(dim);
    for (auto& x : v) x = offset + float(coord(g));
    for (int c = 0; c < copies; ++c, id += gap(g)) p[id] = v;
  }
  return p;
}

std::vector<float> grid_queries(std::mt19937_64& g, std::size_t n, std::size_t dim, int side, float offset) {
  std::vector<float> q(n * dim);
  std::uniform_int_distribution<int> coord(0, 2 * side);
  for (auto& x : q) x = offset + 0.5f * float(coord(g)) - 0.25f * float(side);
  return q;
}

}  // namespace

TEST_CASE("exact: the float32 tie reproducer ranks ids 0, 1") {
  ReferenceSet store(config_for(4));
  const Points points{{0, {6.0f, 2.9f, 4.5f, 1.5f}}, {1, {6.3f, 2.7f, 4.9f, 1.8f}}};
  insert_all(store, points);
  const std::vector<float> query{6.0f, 3.0f, 4.8f, 1.8f};
  const Neighbors got = store.search(query, 2);
  CHECK(got.ids[0] == 0);
  CHECK(got.ids[1] == 1);
  CHECK(got.distances[0] == got.distances[1]);
  CHECK(check_exact(store, Metric::L2, points, query, 2) == 0);
}

TEST_CASE("exact: integer grids with duplicates and offsets, every k") {
  std::size_t salt = 5100;
  for (std::size_t dim : {1, 2, 3, 5, 9, 33}) {
    for (float offset : {0.0f, 1e3f, 1e5f, 1e6f}) {
      auto g = rng(salt++);
      const Points points = grid(g, 120, dim, dim <= 2 ? 6 : 3, 1 + int(salt % 3), offset);
      ReferenceSet store(config_for(dim));
      insert_all(store, points);
      const auto queries = grid_queries(g, 9, dim, dim <= 2 ? 6 : 3, offset);
      for (std::size_t k : {1, 2, 5, 16, 64, 200, 400}) {
        CAPTURE(dim);
        CAPTURE(offset);
        CAPTURE(k);
        CHECK(check_exact(store, Metric::L2, points, queries, k) == 0);
      }
    }
  }
}

TEST_CASE("exact: every metric on tied and offset data, with erased slots and visibility ranges") {
  std::size_t salt = 5200;
  for (Metric metric : {Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::Haversine}) {
    for (std::size_t dim : {2, 3, 12}) {
      if (metric == Metric::Haversine && dim != 2) continue;
      CAPTURE(to_string(metric));
      CAPTURE(dim);
      auto g = rng(salt++);
      Points points;
      if (metric == Metric::Haversine) {
        // A grid of degrees: many points at exactly the same chord from a grid query.
        std::uniform_int_distribution<int> lat(-8, 8), lon(-8, 8);
        for (PointId id = 0; id < 300; ++id) points[id * 2] = {float(lat(g)) * 0.5f, float(lon(g)) * 0.5f};
      } else {
        points = grid(g, 150, dim, 4, 2, metric == Metric::L2 ? 1e4f : 0.0f);
        if (metric == Metric::Cosine) {
          for (auto& [id, v] : points) v[0] += 1.0f;  // never the zero vector
        }
      }
      ReferenceSet store(config_for(dim, metric));
      insert_all(store, points);
      // Erase a third, then search.
      std::vector<PointId> erased;
      for (const auto& [id, v] : points) {
        if (id % 3 == 0) erased.push_back(id);
      }
      for (PointId id : erased) {
        while (!store.try_push(Update::erase(id))) store.publish();
        points.erase(id);
      }
      store.publish();
      std::vector<float> queries;
      if (metric == Metric::Haversine) {
        for (int i = 0; i < 8; ++i) queries.insert(queries.end(), {float(i - 4) * 0.5f, float(3 - i) * 0.5f});
      } else {
        queries = grid_queries(g, 8, dim, 4, metric == Metric::L2 ? 1e4f : 0.0f);
        if (metric == Metric::Cosine) {
          for (std::size_t q = 0; q < 8; ++q) queries[q * dim] = 1.5f + float(q);  // never the zero vector
        }
      }
      for (std::size_t k : {1, 3, 10, 64, 500}) {
        CAPTURE(k);
        CHECK(check_exact(store, metric, points, queries, k) == 0);
      }
      std::vector<IdRange> visible;
      for (std::size_t q = 0; q < 8; ++q) visible.push_back({PointId(q * 20), PointId(q * 20 + 250)});
      CHECK(check_exact(store, metric, points, queries, 7, visible) == 0);
    }
  }
}

TEST_CASE("exact: many duplicates tied at the k-th place go to the smallest ids") {
  // 600 copies of one point and a few nearer ones: the screen's candidates are all tied, so the
  // certificate fails and the answers come from every stored point.
  for (std::size_t dim : {2, 8, 40}) {
    CAPTURE(dim);
    Points points;
    std::vector<float> far(dim, 1.0f), near(dim, 0.25f);
    for (PointId id = 1000; id > 400; --id) points[id] = far;
    points[7] = near;
    points[3] = near;
    ReferenceSet store(config_for(dim));
    insert_all(store, points);
    const std::vector<float> query(dim, 0.0f);
    for (std::size_t k : {1, 2, 3, 5, 64, 700}) {
      CAPTURE(k);
      CHECK(check_exact(store, Metric::L2, points, query, k) == 0);
    }
  }
}

TEST_CASE("exact: random data far from the origin, inner product and L2, larger shapes") {
  std::size_t salt = 5300;
  for (Metric metric : {Metric::L2, Metric::InnerProduct}) {
    for (std::size_t dim : {4, 16, 100}) {
      CAPTURE(to_string(metric));
      CAPTURE(dim);
      auto g = rng(salt++);
      Points points;
      const float offset = metric == Metric::L2 ? 3e5f : 0.0f;
      const auto data = uniform(g, 800 * dim, -1, 1);
      for (PointId id = 0; id < 800; ++id) {
        std::vector<float> v(data.begin() + id * dim, data.begin() + (id + 1) * dim);
        for (auto& x : v) x += offset;
        points[id] = v;
      }
      ReferenceSet store(config_for(dim, metric));
      insert_all(store, points);
      auto queries = uniform(g, 30 * dim, -1, 1);
      for (auto& x : queries) x += offset;
      for (std::size_t k : {1, 8, 32}) {
        CAPTURE(k);
        CHECK(check_exact(store, metric, points, queries, k) == 0);
      }
    }
  }
}

TEST_CASE("exact: an origin keeps projected coordinates (metres near 5e5 / 5e6) as precise as centred ones") {
  // UTM-like easting / northing with centimetre detail: float32 resolves half a metre there, so
  // without an origin nearby points collapse; with one the answers are the float64 brute force's.
  auto g = rng(5500);
  std::uniform_real_distribution<double> spread(-500.0, 500.0);
  const std::vector<double> origin{500'000.0, 5'000'000.0};
  StoreConfig config = config_for(2);
  config.origin = origin;
  ReferenceSet store(config);
  std::vector<std::vector<double>> points;
  for (PointId id = 0; id < 2000; ++id) {
    points.push_back({origin[0] + spread(g), origin[1] + spread(g)});
    while (!store.try_push(Update::insert(id, std::span<const double>(points.back())))) store.publish();
  }
  store.publish();
  std::vector<double> queries;
  for (int q = 0; q < 50; ++q) queries.insert(queries.end(), {origin[0] + spread(g), origin[1] + spread(g)});
  const std::size_t k = 8;
  const Neighbors got = store.search(std::span<const double>(queries), k);
  std::size_t same = 0;
  for (std::size_t q = 0; q < 50; ++q) {
    std::vector<std::pair<double, PointId>> all;
    for (PointId id = 0; id < points.size(); ++id) {
      const double dx = points[id][0] - queries[2 * q], dy = points[id][1] - queries[2 * q + 1];
      all.push_back({dx * dx + dy * dy, id});
    }
    std::partial_sort(all.begin(), all.begin() + k, all.end());
    bool equal = true;
    for (std::size_t j = 0; j < k; ++j) equal &= got.ids_of(q)[j] == all[j].second;
    same += equal;
  }
  CHECK(same == 50);
  // The answers equal the exact reference on the stored (shifted, rounded) values, float queries too.
  Points stored;
  for (PointId id = 0; id < points.size(); ++id) {
    stored[id] = {float(points[id][0] - origin[0]), float(points[id][1] - origin[1])};
  }
  std::vector<float> shifted_queries;
  for (std::size_t i = 0; i < queries.size(); ++i) shifted_queries.push_back(float(queries[i] - origin[i % 2]));
  {
    StoreConfig centred = config_for(2);
    ReferenceSet plain(centred);
    insert_all(plain, stored);
    CHECK(check_exact(plain, Metric::L2, stored, shifted_queries, k) == 0);
    const Neighbors a = plain.search(shifted_queries, k);
    CHECK(a.ids == got.ids);
    CHECK(a.distances == got.distances);
  }
  // Float input is shifted too (in double, after the float rounding of the input).
  std::vector<float> float_queries(queries.begin(), queries.end());
  CHECK(store.search(float_queries, k).num_queries == 50);
  // Saved with the store, and restored by load.
  const auto bytes = store.save_bytes();
  const ReferenceSet loaded = ReferenceSet::load_bytes(bytes);
  CHECK(loaded.config().origin == origin);
  const Neighbors again = loaded.search(std::span<const double>(queries), k);
  CHECK(again.ids == got.ids);
  CHECK(again.distances == got.distances);
  // Refused where it does not apply, or malformed.
  StoreConfig ip = config_for(2, Metric::InnerProduct);
  ip.origin = origin;
  CHECK_THROWS_AS(ReferenceSet{ip}, InvalidArgument);
  StoreConfig wrong = config_for(3);
  wrong.origin = origin;
  CHECK_THROWS_AS(ReferenceSet{wrong}, InvalidArgument);
  StoreConfig nan = config_for(2);
  nan.origin = {0.0, std::nan("")};
  CHECK_THROWS_AS(ReferenceSet{nan}, InvalidArgument);
  // A vector that is fine as given but not once shifted is refused by push, with its index.
  const std::vector<double> bad{0.0, std::numeric_limits<double>::infinity()};
  CHECK_THROWS_AS(store.push(Update::insert(99999, std::span<const double>(bad))), InvalidArgument);
}
