// GPU suite (skips without a CUDA device): search_device (streamknn/device.hpp) against search()
// on the same store: random shapes (every metric, D 1..300, K 1..300 and K > size, Q 1..2000,
// erased slots, per-query visible ranges, row strides wider than dim with NaN in the gap, batches
// that take the dense screen or the direct search),
// result buffers poisoned before every call, ordering on the caller's stream (queries written
// and results read by copies queued on that stream around the call, one synchronisation at
// the end), validation on the device (the host path's messages; a refused batch's status not
// leaking into the next call, a batch of several launch chunks), the refusals, and KNN-Q's
// lookup_and_update between searches, and publishes with the legacy default stream held back (the
// store's streams must not depend on it). Built with CUDA (links the CUDA runtime for the buffers).
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "streamknn/device.hpp"
#include "support/test_support.hpp"

using namespace test;

namespace {

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) FAIL(what, ": ", cudaGetErrorString(e));
}

template <class T>
struct Dev {
  explicit Dev(std::size_t n) : n(n) { ok(cudaMalloc(reinterpret_cast<void**>(&p), std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  T* p = nullptr;
  std::size_t n;
};

struct CallerStream {
  CallerStream() { ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~CallerStream() { cudaStreamDestroy(s); }
  cudaStream_t s = nullptr;
};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

StoreConfig gpu_config(std::size_t dim, Metric metric, bool debug) {
  StoreConfig c = config_for(dim, metric);
  c.backend = BackendKind::Cuda;
  c.debug = debug;
  return c;
}

/// search_device with the queries uploaded and the results read back on the caller's stream
/// (pinned host buffers, so the copies are truly asynchronous), compared with search().
void compare(ReferenceSet& store, const std::vector<float>& queries, std::size_t nq, std::size_t k,
             std::size_t stride, const std::vector<IdRange>& visible) {
  const std::size_t dim = store.config().dim;
  const Neighbors want = store.search(queries, k, visible);
  CallerStream cs;
  float* host_q = nullptr;
  float* host_d = nullptr;
  PointId* host_i = nullptr;
  ok(cudaMallocHost(reinterpret_cast<void**>(&host_q), std::max<std::size_t>(1, nq * stride) * 4), "cudaMallocHost");
  ok(cudaMallocHost(reinterpret_cast<void**>(&host_d), std::max<std::size_t>(1, nq * k) * 4), "cudaMallocHost");
  ok(cudaMallocHost(reinterpret_cast<void**>(&host_i), std::max<std::size_t>(1, nq * k) * 8), "cudaMallocHost");
  for (std::size_t q = 0; q < nq; ++q) {
    for (std::size_t d = 0; d < stride; ++d) host_q[q * stride + d] = d < dim ? queries[q * dim + d] : NAN;  // gap: never read
  }
  Dev<float> dq(nq * stride), dd(nq * k);
  Dev<PointId> di(nq * k);
  Dev<IdRange> dv(visible.size());
  ok(cudaMemset(dd.p, 0xA5, nq * k * 4), "poison distances");
  ok(cudaMemset(di.p, 0x5A, nq * k * 8), "poison ids");
  std::fill_n(host_d, nq * k, -7.0f);
  std::fill_n(host_i, nq * k, PointId(12345));
  if (!visible.empty()) ok(cudaMemcpy(dv.p, visible.data(), visible.size() * sizeof(IdRange), cudaMemcpyHostToDevice), "ranges");
  ok(cudaDeviceSynchronize(), "sync");
  ok(cudaMemcpyAsync(dq.p, host_q, nq * stride * 4, cudaMemcpyHostToDevice, cs.s), "queries H2D");
  DeviceQueries in{dq.p, nq, stride, store.config().cuda_device, visible.empty() ? nullptr : dv.p};
  auto ticket = search_device(store, in, k, {dd.p, di.p}, reinterpret_cast<std::uintptr_t>(cs.s));
  ok(cudaMemcpyAsync(host_d, dd.p, nq * k * 4, cudaMemcpyDeviceToHost, cs.s), "distances D2H");
  ok(cudaMemcpyAsync(host_i, di.p, nq * k * 8, cudaMemcpyDeviceToHost, cs.s), "ids D2H");
  ok(cudaStreamSynchronize(cs.s), "caller stream");  // only the caller's stream: ordering did the rest
  CHECK(ticket.get() == want.epoch);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < nq * k; ++i) {
    if (host_i[i] != want.ids[i] || !same_bits(host_d[i], want.distances[i])) {
      if (++wrong <= 5) {
        FAIL_CHECK("entry ", i, " (query ", i / k, "): device (", host_i[i], ", ", host_d[i], ") host (", want.ids[i],
                   ", ", want.distances[i], ")");
      }
    }
  }
  CHECK(wrong == 0);
  cudaFreeHost(host_q);
  cudaFreeHost(host_d);
  cudaFreeHost(host_i);
}

}  // namespace

TEST_CASE("search_device gives search()'s answers on random shapes, ordered on the caller's stream") {
  auto g = rng(8801);
  struct Shape {
    std::size_t points, dim, queries, k;
    Metric metric;
    bool ranges;
  };
  const Shape shapes[] = {
      {1000, 2, 1, 16, Metric::L2, false},      {1000, 2, 2000, 8, Metric::L2, false},
      {500, 3, 17, 600, Metric::L2, false},     // k > size
      {4000, 33, 100, 64, Metric::L2, true},    {3000, 128, 16, 1, Metric::InnerProduct, false},
      {2000, 8, 40, 10, Metric::Cosine, false}, {2000, 2, 64, 12, Metric::Haversine, true},
      {20000, 300, 5, 300, Metric::L2, false},  {1, 1, 3, 4, Metric::L2, false},
      {5000, 100, 24, 20, Metric::L2, false},   // the dense screen (12+ queries, small store, 64+ dims)
      {3000, 64, 12, 50, Metric::Cosine, false},
      {50000, 2, 3, 20, Metric::Haversine, true},  // the direct search (1-4 queries, one chunk, k <= 64)
      {20000, 4, 4, 64, Metric::InnerProduct, true},
  };
  for (const bool debug : {true, false}) {
    for (const Shape& s : shapes) {
      CAPTURE(s.points);
      CAPTURE(s.dim);
      CAPTURE(s.queries);
      CAPTURE(s.k);
      CAPTURE(int(s.metric));
      CAPTURE(debug);
      ReferenceSet store(gpu_config(s.dim, s.metric, debug));
      const auto data = points_for(s.metric, g, s.points, s.dim);
      for (PointId id = 0; id < s.points; ++id) {
        store.insert(id, std::span<const float>(data).subspan(id * s.dim, s.dim));
      }
      store.publish();
      for (PointId id = 0; id < s.points; id += 3 + g() % 5) store.erase(id);  // erased slots
      store.publish();
      auto queries = points_for(s.metric, g, s.queries, s.dim);
      if (s.metric != Metric::Haversine && s.points > 1) {
        std::copy_n(data.begin(), s.dim, queries.begin());  // a query on a stored point (distance 0)
      }
      std::vector<IdRange> visible;
      if (s.ranges) {
        for (std::size_t q = 0; q < s.queries; ++q) {
          const PointId b = g() % s.points;
          visible.push_back({b, b + g() % s.points});
        }
      }
      for (const std::size_t stride : {s.dim, s.dim + 3}) {
        CAPTURE(stride);
        compare(store, queries, s.queries, s.k, stride, visible);
      }
    }
  }
}

TEST_CASE("search_device validates on the device, with the host path's messages") {
  auto g = rng(8802);
  for (const Metric metric : {Metric::L2, Metric::Cosine, Metric::Haversine}) {
    const std::size_t dim = metric == Metric::Haversine ? 2 : 5, nq = 50;
    ReferenceSet store(gpu_config(dim, metric, true));
    const auto data = points_for(metric, g, 100, dim);
    for (PointId id = 0; id < 100; ++id) store.insert(id, std::span<const float>(data).subspan(id * dim, dim));
    store.publish();
    auto queries = points_for(metric, g, nq, dim);
    std::vector<std::vector<float>> bad_rows;
    bad_rows.push_back({NAN});
    bad_rows.push_back({INFINITY});
    if (metric == Metric::Cosine) bad_rows.push_back(std::vector<float>(dim, 0.0f));
    if (metric == Metric::Haversine) bad_rows.push_back({95.0f, 10.0f});
    if (metric == Metric::Haversine) bad_rows.push_back({10.0f, 181.0f});  // longitude
    if (metric == Metric::L2) bad_rows.push_back({1.0f, 3e38f});            // beyond max_coordinate
    for (const auto& bad : bad_rows) {
      auto q = queries;
      std::copy(bad.begin(), bad.end(), q.begin() + 37 * dim);
      std::copy(bad.begin(), bad.end(), q.begin() + 41 * dim);  // the first bad row is named
      const std::string host = message_of<InvalidArgument>([&] { (void)store.search(q, 3); });
      Dev<float> dq(nq * dim), dd(nq * 3);
      Dev<PointId> di(nq * 3);
      ok(cudaMemcpy(dq.p, q.data(), q.size() * 4, cudaMemcpyHostToDevice), "queries");
      auto ticket = search_device(store, {dq.p, nq, 0, 0, nullptr}, 3, {dd.p, di.p}, 0);
      const std::string device = message_of<InvalidArgument>([&] { (void)ticket.get(); });
      CHECK(device.find("query 37") != std::string::npos);
      // Same message but for the entry point's name.
      CHECK(device.substr(device.find(": ")) == host.substr(host.find(": ")));
    }
    // A range with begin > end.
    Dev<float> dq(nq * dim), dd(nq * 3);
    Dev<PointId> di(nq * 3);
    Dev<IdRange> dv(nq);
    std::vector<IdRange> visible(nq);
    visible[9] = {10, 5};
    ok(cudaMemcpy(dq.p, queries.data(), queries.size() * 4, cudaMemcpyHostToDevice), "queries");
    ok(cudaMemcpy(dv.p, visible.data(), nq * sizeof(IdRange), cudaMemcpyHostToDevice), "ranges");
    auto ticket = search_device(store, {dq.p, nq, 0, 0, dv.p}, 3, {dd.p, di.p}, 0);
    CHECK(message_of<InvalidArgument>([&] { (void)ticket.get(); }).find("visible[9] = [10, 5) has begin > end") !=
          std::string::npos);
    // The store keeps working after a refused batch.
    compare(store, queries, nq, 3, dim, {});
  }
}

TEST_CASE("search_device validates long rows: the bad element anywhere in the row, a zero cosine row") {
  // A warp checks a row, 32 elements at a time: a non-finite element past the first 32 (and in
  // the last, partial round) is found, the rows before it are searched as usual, and a cosine
  // row of zeros longer than a warp is refused.
  auto g = rng(8804);
  for (const Metric metric : {Metric::L2, Metric::Cosine}) {
    const std::size_t dim = 300, nq = 9;
    ReferenceSet store(gpu_config(dim, metric, false));
    const auto data = points_for(metric, g, 200, dim);
    for (PointId id = 0; id < 200; ++id) store.insert(id, std::span<const float>(data).subspan(id * dim, dim));
    store.publish();
    const auto queries = points_for(metric, g, nq, dim);
    compare(store, queries, nq, 5, dim, {});
    for (const std::size_t at : {std::size_t(40), std::size_t(299)}) {
      CAPTURE(at);
      auto q = queries;
      q[6 * dim + at] = INFINITY;
      Dev<float> dq(nq * dim), dd(nq * 5);
      Dev<PointId> di(nq * 5);
      ok(cudaMemcpy(dq.p, q.data(), q.size() * 4, cudaMemcpyHostToDevice), "queries");
      auto ticket = search_device(store, {dq.p, nq, 0, 0, nullptr}, 5, {dd.p, di.p}, 0);
      CHECK(message_of<InvalidArgument>([&] { (void)ticket.get(); }).find("query 6") != std::string::npos);
    }
    if (metric == Metric::Cosine) {
      auto q = queries;
      std::fill_n(q.begin() + 3 * dim, dim, 0.0f);
      Dev<float> dq(nq * dim), dd(nq * 5);
      Dev<PointId> di(nq * 5);
      ok(cudaMemcpy(dq.p, q.data(), q.size() * 4, cudaMemcpyHostToDevice), "queries");
      auto ticket = search_device(store, {dq.p, nq, 0, 0, nullptr}, 5, {dd.p, di.p}, 0);
      CHECK(message_of<InvalidArgument>([&] { (void)ticket.get(); }).find("query 3") != std::string::npos);
    }
  }
}

namespace {

/// An L2 store of n uniform points (published every queue_capacity inserts: one thread that
/// pushes more than that between publishes waits for itself).
std::unique_ptr<ReferenceSet> uniform_store(std::mt19937_64& g, std::size_t dim, std::size_t n) {
  auto store = std::make_unique<ReferenceSet>(gpu_config(dim, Metric::L2, false));
  const auto data = uniform(g, n * dim);
  for (PointId id = 0; id < n; ++id) {
    store->insert(id, std::span<const float>(data).subspan(id * dim, dim));
    if ((id + 1) % store->config().queue_capacity == 0) store->publish();
  }
  store->publish();
  return store;
}

/// The batch is refused, naming query `bad` as its first bad row.
void refused_at(Ticket<std::uint64_t>& ticket, std::size_t bad) {
  const std::string message = message_of<InvalidArgument>([&] { (void)ticket.get(); });
  CHECK_MESSAGE(message.find("query " + std::to_string(bad) + "[") != std::string::npos, message);
}

}  // namespace

TEST_CASE("search_device names each batch's own bad query, call after call on the same buffers (graph replays)") {
  // The validation hands its status to the host and resets it for the next batch itself: a
  // refused batch must not leak into the next call on the same buffers (a replayed graph).
  auto g = rng(8806);
  const std::size_t dim = 16, nq = 8, k = 4;
  const auto store = uniform_store(g, dim, 2'000);
  Dev<float> dq(nq * dim), dd(nq * k);
  Dev<PointId> di(nq * k);
  for (int round = 0; round < 10; ++round) {
    CAPTURE(round);
    auto queries = uniform(g, nq * dim);
    const std::size_t bad = round % 2 == 1 ? std::size_t(round) % nq : nq;  // odd rounds refuse one query
    if (bad < nq) queries[bad * dim + 3] = NAN;
    ok(cudaMemcpy(dq.p, queries.data(), queries.size() * 4, cudaMemcpyHostToDevice), "queries");
    auto ticket = search_device(*store, {dq.p, nq, 0, 0, nullptr}, k, {dd.p, di.p}, 0);
    if (bad < nq) {
      refused_at(ticket, bad);
    } else {
      CHECK(ticket.get() == store->epoch());
    }
  }
}

TEST_CASE("search_device names the first bad query of a batch run in several launch chunks") {
  // 1,100 queries of 64 dims over 70,000 slots at k = 8: the dense screen's rows outgrow the
  // workspace budget, so the batch runs in launch chunks (test_gpu_vs_cpu's case of that shape),
  // and the status the chunks' validations build up is handed over by the last.
  auto g = rng(8807);
  const std::size_t dim = 64, nq = 1'100, k = 8;
  const auto store = uniform_store(g, dim, 70'000);
  const auto queries = uniform(g, nq * dim);
  Dev<float> dq(nq * dim), dd(nq * k);
  Dev<PointId> di(nq * k);
  for (const std::vector<std::size_t>& bad :
       {std::vector<std::size_t>{1'050}, std::vector<std::size_t>{20, 1'050}, std::vector<std::size_t>{}}) {
    CAPTURE(bad.size());
    auto q = queries;
    for (const std::size_t b : bad) q[b * dim + 5] = INFINITY;
    ok(cudaMemcpy(dq.p, q.data(), q.size() * 4, cudaMemcpyHostToDevice), "queries");
    auto ticket = search_device(*store, {dq.p, nq, 0, 0, nullptr}, k, {dd.p, di.p}, 0);
    if (!bad.empty()) {
      refused_at(ticket, bad.front());
      continue;
    }
    CHECK(ticket.get() == store->epoch());
    std::vector<PointId> ids(nq * k);
    ok(cudaMemcpy(ids.data(), di.p, nq * k * 8, cudaMemcpyDeviceToHost), "ids");
    CHECK(ids == store->search(q, k).ids);
  }
}

TEST_CASE("search_device on the same buffers, call after call (the captured graph), as the store changes") {
  // A caller that reuses its buffers gets, from the second call with the same plan, a captured
  // graph: its answers must follow the new queries, publishes (the other buffer) and growth.
  auto g = rng(8805);
  for (const std::size_t dim : {std::size_t(2), std::size_t(100)}) {
    CAPTURE(dim);
    ReferenceSet store(gpu_config(dim, Metric::L2, false));
    PointId next = 0;
    auto add = [&](std::size_t n) {
      const auto data = uniform(g, n * dim);
      for (std::size_t i = 0; i < n; ++i) store.insert(next++, std::span<const float>(data).subspan(i * dim, dim));
      store.publish();
    };
    add(3000);
    const std::size_t nq = 8, k = 5;
    Dev<float> dq(nq * dim), dd(nq * k);
    Dev<PointId> di(nq * k);
    std::vector<float> distances(nq * k);
    std::vector<PointId> ids(nq * k);
    for (int round = 0; round < 8; ++round) {
      CAPTURE(round);
      if (round == 4) add(1);      // the other buffer
      if (round == 6) add(60000);  // growth: a larger plan and workspace
      const auto queries = uniform(g, nq * dim);
      ok(cudaMemcpy(dq.p, queries.data(), queries.size() * 4, cudaMemcpyHostToDevice), "queries");
      CHECK(search_device(store, {dq.p, nq, 0, 0, nullptr}, k, {dd.p, di.p}, 0).get() == store.epoch());
      ok(cudaMemcpy(distances.data(), dd.p, nq * k * 4, cudaMemcpyDeviceToHost), "distances");
      ok(cudaMemcpy(ids.data(), di.p, nq * k * 8, cudaMemcpyDeviceToHost), "ids");
      const Neighbors want = store.search(queries, k);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < nq * k; ++i) wrong += ids[i] != want.ids[i] || !same_bits(distances[i], want.distances[i]);
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("search_device refusals and an empty batch") {
  ReferenceSet store(gpu_config(4, Metric::L2, true));
  store.insert(1, std::vector<float>{1, 2, 3, 4});
  store.publish();
  Dev<float> dq(8), dd(8);
  Dev<PointId> di(8);
  CHECK(message_of<InvalidArgument>([&] { (void)search_device(store, {dq.p, 2, 0, 0, nullptr}, 0, {dd.p, di.p}, 0); })
            .find("k=0") != std::string::npos);
  CHECK(message_of<InvalidArgument>([&] { (void)search_device(store, {dq.p, 2, 3, 0, nullptr}, 1, {dd.p, di.p}, 0); })
            .find("row_stride=3") != std::string::npos);
  CHECK(message_of<InvalidArgument>([&] { (void)search_device(store, {dq.p, 2, 0, 7, nullptr}, 1, {dd.p, di.p}, 0); })
            .find("device 7") != std::string::npos);
  CHECK(message_of<InvalidArgument>([&] { (void)search_device(store, {nullptr, 2, 0, 0, nullptr}, 1, {dd.p, di.p}, 0); })
            .find("null") != std::string::npos);
  CHECK(search_device(store, {nullptr, 0, 0, 0, nullptr}, 1, {nullptr, nullptr}, 0).get() == 1);
}

TEST_CASE("search_device and lookup_and_update share snapshots with publishes") {
  auto g = rng(8803);
  StoreConfig c = gpu_config(3, Metric::L2, true);
  c.target = TargetSpec::outputs(4);
  ReferenceSet store(c);
  const auto data = uniform(g, 300 * 3);
  for (PointId id = 0; id < 300; ++id) store.insert(id, std::span<const float>(data).subspan(id * 3, 3), uniform(g, 4));
  store.publish();
  for (int round = 0; round < 6; ++round) {
    const auto states = uniform(g, 32 * 3);
    std::vector<std::int32_t> actions(32);
    for (auto& a : actions) a = std::int32_t(g() % 4);
    const auto targets = uniform(g, 32);
    const QUpdate u = store.lookup_and_update(states, 6, actions, targets, 0.3f);
    CHECK(u.epoch == store.epoch());
    compare(store, states, 32, 6, 3, {});
    store.move(PointId(round), std::span<const float>(data).subspan(0, 3));
    store.publish();
    compare(store, uniform(g, 10 * 3), 10, 9, 3, {});
  }
}

TEST_CASE("publishes keep their order while the legacy default stream is held back") {
  // The store's update stream is non-blocking, so nothing a publish does may run on the legacy
  // default stream and be assumed done: a host function holds that stream for 300 ms while a
  // fresh store reserves its batch buffers, uploads batches and replays them into the other
  // buffer (growing batches: the buffers are replaced, the previous batch copied over). The
  // answers must equal the CPU backend's after every publish.
  auto g = rng(8805);
  StoreConfig gc = gpu_config(20, Metric::L2, false);
  gc.target = TargetSpec::outputs(2);
  StoreConfig cc = gc;
  cc.backend = BackendKind::Cpu;
  ReferenceSet gpu(gc), cpu(cc);
  const cudaHostFn_t hold = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); };
  ok(cudaLaunchHostFunc(nullptr, hold, nullptr), "cudaLaunchHostFunc(legacy default stream)");
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    const std::size_t n = 40 + 200 * std::size_t(round);
    for (std::size_t i = 0; i < n; ++i) {
      const PointId id = PointId(g() % 2000);
      const auto v = uniform(g, 20), t = uniform(g, 2);
      const Update u = g() % 4 == 0 ? Update::move(id, v) : Update::insert(id, v, t);
      while (!gpu.try_push(u)) gpu.publish();
      while (!cpu.try_push(u)) cpu.publish();
    }
    CHECK(gpu.publish().applied == cpu.publish().applied);
    const auto queries = uniform(g, 8 * 20);
    const Neighbors a = gpu.search(queries, 5), b = cpu.search(queries, 5);
    CHECK(a.ids == b.ids);
    CHECK(a.distances == b.distances);
  }
  ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

TEST_CASE("predict_device gives the classifier's and the regressor's answers") {
  auto g = rng(8804);
  for (const bool debug : {true, false}) {
    for (const std::size_t k : {std::size_t(1), std::size_t(7), std::size_t(500)}) {  // 500 > size
      CAPTURE(debug);
      CAPTURE(k);
      const std::size_t dim = 6, n = 400, nq = 150, classes = 5, outputs = 3;
      StoreConfig cc = gpu_config(dim, Metric::L2, debug), rc = cc;
      cc.target = TargetSpec::classes(classes);
      rc.target = TargetSpec::outputs(outputs);
      ReferenceSet labelled(cc), valued(rc);
      auto data = uniform(g, n * dim);
      for (std::size_t i = n / 2; i < n; ++i) std::copy_n(data.begin() + (i - n / 2) * dim, dim, data.begin() + i * dim);  // duplicates: ties, distance 0
      for (PointId id = 0; id < n; ++id) {
        const auto v = std::span<const float>(data).subspan(id * dim, dim);
        labelled.insert(id, v, std::int32_t(g() % classes));
        valued.insert(id, v, uniform(g, outputs, -4, 4));
      }
      labelled.publish();
      valued.publish();
      for (PointId id = 0; id < n; id += 7) {
        labelled.erase(id);
        valued.erase(id);
      }
      labelled.publish();
      valued.publish();
      auto queries = uniform(g, nq * dim);
      std::copy_n(data.begin(), 2 * dim, queries.begin());
      Dev<float> dq(nq * dim), dp(nq * classes), dv(nq * outputs);
      Dev<std::int32_t> dl(nq);
      ok(cudaMemcpy(dq.p, queries.data(), queries.size() * 4, cudaMemcpyHostToDevice), "queries");
      const DeviceQueries in{dq.p, nq, 0, 0, nullptr};
      for (const Weights w : {Weights::Uniform, Weights::Distance}) {
        CAPTURE(int(w));
        KnnClassifier model(labelled, k, w);
        const ClassPredictions want = model.predict_proba(queries);
        ok(cudaMemset(dl.p, 0x5A, nq * 4), "poison");
        ok(cudaMemset(dp.p, 0x5A, nq * classes * 4), "poison");
        CHECK(predict_device(model, in, {dl.p, dp.p}, 0).get() == want.epoch);
        std::vector<std::int32_t> labels(nq);
        std::vector<float> proba(nq * classes);
        ok(cudaMemcpy(labels.data(), dl.p, nq * 4, cudaMemcpyDeviceToHost), "labels");
        ok(cudaMemcpy(proba.data(), dp.p, nq * classes * 4, cudaMemcpyDeviceToHost), "proba");
        CHECK(labels == want.labels);
        CHECK(std::memcmp(proba.data(), want.probabilities.data(), proba.size() * 4) == 0);
        ok(cudaMemset(dl.p, 0x5A, nq * 4), "poison");
        CHECK(predict_device(model, in, {dl.p, nullptr}, 0).get() == want.epoch);  // labels only
        ok(cudaMemcpy(labels.data(), dl.p, nq * 4, cudaMemcpyDeviceToHost), "labels");
        CHECK(labels == want.labels);
      }
      for (const RegressionAggregate a :
           {RegressionAggregate::Mean, RegressionAggregate::WeightedMean, RegressionAggregate::Median}) {
        CAPTURE(int(a));
        KnnRegressor model(valued, k, a);
        const RegressionPredictions want = model.predict(queries);
        ok(cudaMemset(dv.p, 0x5A, nq * outputs * 4), "poison");
        CHECK(predict_device(model, in, dv.p, 0).get() == want.epoch);
        std::vector<float> values(nq * outputs);
        ok(cudaMemcpy(values.data(), dv.p, values.size() * 4, cudaMemcpyDeviceToHost), "values");
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < values.size(); ++i) {
          wrong += !(same_bits(values[i], want.values[i]) || (std::isnan(values[i]) && std::isnan(want.values[i])));
        }
        CHECK(wrong == 0);
      }
      // Labels-only predictions need the labels buffer.
      CHECK(message_of<InvalidArgument>([&] { (void)predict_device(KnnClassifier(labelled, 1), {dq.p, nq, 0, 0, nullptr}, {nullptr, nullptr}, 0); })
                .find("null") != std::string::npos);
    }
  }
}
