// Memory faults: running out of memory while the store grows must leave the published state
// unchanged and usable, with the drained updates pending (the strong guarantee of
// ReferenceSet::publish), and a query batch that does not fit must be refused with
// OutOfMemory. The test takes memory away from the library for a while:
//  * CPU backend: a lower RLIMIT_AS (address space) for the process. Sanitizer runtimes map
//    terabytes of shadow memory, so under ASan/TSan these cases are skipped (and say so).
//  * CUDA backend: a cudaMalloc "ballast" that leaves only a little device memory free.
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <optional>

#include "reliability/reliability_support.hpp"

#if defined(STREAMKNN_TEST_CUDA_RUNTIME)
#include <cuda_runtime.h>
#endif

using namespace test;
using namespace reliability;

namespace {

/// While alive, the memory the backend grows into has only about `headroom` bytes left.
class MemoryLimit {
 public:
  /// nullopt (and why) where the limit cannot be applied here.
  static std::optional<MemoryLimit> leave(std::size_t headroom, std::string& why) {
#if defined(STREAMKNN_TEST_CUDA)
#if defined(STREAMKNN_TEST_CUDA_RUNTIME)
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess || free <= headroom) {
      why = "cudaMemGetInfo failed or the device is already full";
      return std::nullopt;
    }
    MemoryLimit limit;
    // Device allocations come in 2 MiB pages: step down until the ballast fits.
    for (std::size_t ballast = free - headroom; ballast > 0; ballast -= std::min<std::size_t>(ballast, 2u << 20)) {
      if (cudaMalloc(&limit.ballast_, ballast) == cudaSuccess) break;
      (void)cudaGetLastError();
      limit.ballast_ = nullptr;
    }
    if (!limit.ballast_) {
      why = "could not allocate the device ballast";
      return std::nullopt;
    }
    return limit;
#else
    why = "this suite was built without the CUDA runtime";
    return std::nullopt;
#endif
#elif defined(STREAMKNN_UNDER_SANITIZER)
    why = "sanitizer runtimes reserve terabytes of address space, so RLIMIT_AS cannot be lowered under them";
    return std::nullopt;
#else
    MemoryLimit limit;
    if (getrlimit(RLIMIT_AS, &limit.saved_) != 0) {
      why = "getrlimit failed";
      return std::nullopt;
    }
    std::size_t pages = 0;
    std::ifstream statm("/proc/self/statm");
    if (!(statm >> pages) || pages == 0) {
      why = "cannot read /proc/self/statm";
      return std::nullopt;
    }
    rlimit lowered = limit.saved_;
    lowered.rlim_cur = pages * std::size_t(sysconf(_SC_PAGESIZE)) + headroom;
    if (limit.saved_.rlim_cur != RLIM_INFINITY && limit.saved_.rlim_cur < lowered.rlim_cur) {
      why = "the address-space limit is already lower";
      return std::nullopt;
    }
    if (setrlimit(RLIMIT_AS, &lowered) != 0) {
      why = "setrlimit failed";
      return std::nullopt;
    }
    limit.active_ = true;
    return limit;
#endif
  }

  MemoryLimit(MemoryLimit&& other) noexcept
      : saved_(other.saved_), active_(std::exchange(other.active_, false)), ballast_(std::exchange(other.ballast_, nullptr)) {}
  MemoryLimit& operator=(MemoryLimit&&) = delete;
  ~MemoryLimit() {
    if (active_) setrlimit(RLIMIT_AS, &saved_);
#if defined(STREAMKNN_TEST_CUDA_RUNTIME)
    if (ballast_) cudaFree(ballast_);
#endif
  }

 private:
  MemoryLimit() = default;
  rlimit saved_{};
  bool active_ = false;
  void* ballast_ = nullptr;
};

std::vector<float> row(std::size_t dim, std::uint64_t id) {
  std::vector<float> v(dim);
  for (std::size_t i = 0; i < dim; ++i) v[i] = float((id * 31 + i * 7) % 97);
  return v;
}

}  // namespace

TEST_CASE("faults: running out of memory while the store grows leaves the published state unchanged and usable") {
  constexpr std::size_t kDim = 256;              // 1 KiB a point
  constexpr std::size_t kStored = 2000, kMore = 60'000;
  StoreConfig config = config_for(kDim, Metric::L2, TargetSpec::classes(3));
  config.capacity_hint = 1024;
  config.queue_capacity = 1 << 16;               // the queue's payload pool is allocated up front
  ReferenceSet store(config);
  for (PointId id = 0; id < kStored; ++id) store.insert(id, row(kDim, id), int(id % 3));
  REQUIRE(store.publish().inserted == kStored);
  std::vector<float> queries;
  for (PointId id = 0; id < kStored; id += 97) {
    const auto v = row(kDim, id);
    queries.insert(queries.end(), v.begin(), v.end());
  }
  const Neighbors before = store.search(queries, 5);
  const std::uint64_t epoch = store.epoch();

  std::size_t refused_publishes = 0;
  {
    std::string why;
    auto limit = MemoryLimit::leave(24u << 20, why);  // ~24 MiB left: the growth needs ~60 MiB
    if (!limit) {
      MESSAGE("skipped: ", why);
      return;
    }
    for (PointId id = kStored; id < kStored + kMore; ++id) store.push(Update::insert(id, row(kDim, id), int(id % 3)));
    for (int attempt = 0; attempt < 3; ++attempt) {  // failing again changes nothing either
      try {
        const PublishReport r = store.publish();
        FAIL_CHECK("publish succeeded with ~24 MiB left for ", kMore, " KiB of new points: ", r.inserted, " inserted");
        break;
      } catch (const OutOfMemory& e) {
        ++refused_publishes;
        if (attempt == 0) MESSAGE("publish refused: ", std::string(e.what()));
      }
      CHECK(store.epoch() == epoch);
      CHECK(store.size() == kStored);
      CHECK(store.pending() == kMore);
      const Neighbors during = store.search(queries, 5);
      CHECK(during.epoch == epoch);
      CHECK(during.ids == before.ids);
      CHECK(during.distances == before.distances);
    }
  }
  // Memory is back: the same updates are applied, once.
  const PublishReport r = store.publish();
  CHECK(r.inserted == kMore);
  CHECK(r.rejected.empty());
  CHECK(r.epoch == epoch + 1);
  CHECK(store.size() == kStored + kMore);
  CHECK(store.pending() == 0);
  for (PointId id : {PointId(0), PointId(kStored), PointId(kStored + kMore / 2), PointId(kStored + kMore - 1)}) {
    const Neighbors n = store.search(row(kDim, id), 1, std::vector<IdRange>{{id, id + 1}});
    CHECK(n.ids[0] == id);
    CHECK(n.distances[0] == 0.0f);
  }
  CHECK(refused_publishes == 3);
}

TEST_CASE("faults: a query batch that does not fit in memory is refused with OutOfMemory and the store stays usable") {
  StoreConfig config = config_for(4);
  ReferenceSet store(config);
  for (PointId id = 0; id < 100; ++id) store.insert(id, row(4, id));
  store.publish();
  std::vector<float> queries(4 * 20'000, 1.0f);  // 20,000 x k=1024: ~250 MB of results
  {
    std::string why;
    auto limit = MemoryLimit::leave(32u << 20, why);
    if (!limit) {
      MESSAGE("skipped: ", why);
      return;
    }
    try {
      const Neighbors n = store.search(queries, 1024);
      // A backend may split the batch; then the answer must be whole.
      CHECK(n.num_queries == 20'000);
      CHECK(n.found(19'999) == 100);
    } catch (const OutOfMemory& e) {
      MESSAGE("refused: ", std::string(e.what()));
      CHECK(std::string(e.what()).find("20000 queries") != std::string::npos);
    } catch (const std::exception& e) {
      FAIL_CHECK("threw something other than OutOfMemory: ", std::string(e.what()));
    }
    const Neighbors small = store.search(row(4, 7), 1);
    CHECK(small.ids[0] == 7);
  }
  store.erase(7);
  CHECK(store.publish().erased == 1);
}

TEST_CASE("faults: running out of memory while a publish resolves its batch keeps every update") {
  // Erases are resolved into the catalogue first; a batch of moves then needs more memory for
  // the batch's vectors than is left. Publish must throw OutOfMemory with nothing applied and
  // apply everything later. (It once failed: Catalog::resolve allocated after the reservation
  // step, so std::bad_alloc escaped half-way; the catalogue had applied the erases, the backend
  // had not, and the retry rejected them as unknown ids while searches still found the erased
  // points. Now every allocation of a publish happens before anything changes.)
  constexpr std::size_t kDim = 256, kPoints = 60'000, kErased = 30'000;
  StoreConfig config = config_for(kDim);
  config.queue_capacity = 1 << 16;
  ReferenceSet store(config);
  for (PointId id = 0; id < kPoints; ++id) {  // in small publishes, so the batch buffers stay small
    store.insert(id, row(kDim, id));
    if (id % 1000 == 999) REQUIRE(store.publish().inserted == 1000);
  }
  store.move(0, row(kDim, 0));
  REQUIRE(store.publish().moved == 1);  // both buffers have grown: the next publish needs no growth
  {
    std::string why;
    auto limit = MemoryLimit::leave(8u << 20, why);
    if (!limit) {
      MESSAGE("skipped: ", why);
      return;
    }
    for (PointId id = 0; id < kErased; ++id) store.erase(id);
    for (PointId id = kErased; id < kPoints; ++id) store.move(id, row(kDim, id + 1));
    CHECK_THROWS_AS(store.publish(), OutOfMemory);
    CHECK(store.size() == kPoints);
    CHECK(store.pending() == kPoints);
  }
  const PublishReport r = store.publish();
  CHECK(r.rejected.empty());
  CHECK(r.erased == kErased);
  CHECK(store.size() == kPoints - kErased);
  CHECK(store.search(row(kDim, 0), 1, std::vector<IdRange>{{0, 1}}).found(0) == 0);
}
