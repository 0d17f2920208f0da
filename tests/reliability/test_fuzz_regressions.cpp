// Library bugs found by the fuzz harnesses (fuzz/), each reduced to a deterministic test that
// runs on every backend. The input that found each one is kept in the harness's corpus
// (fuzz/corpus/<harness>/regression-*) and replayed by ctest as well.
#include "reliability/reliability_support.hpp"

using namespace test;
using namespace reliability;

TEST_CASE("fuzz regression: a batch that inserts and erases the top slots replays within the other buffer") {
  // fuzz_ops found a heap-buffer-overflow in the CPU backend: a publish replays the previous
  // batch onto the buffer it did not write, after growing that buffer only to the new batch's
  // needs. Slots inserted and erased within the previous batch lie above the high-water mark
  // it leaves behind, so the replay wrote past the end of the buffer.
  StoreConfig c = config_for(3);
  c.capacity_hint = 1;
  ReferenceSet store(c);
  const float far[3] = {50, 50, 50};
  for (int round = 0; round < 4; ++round) {
    CAPTURE(round);
    for (PointId id = 0; id < 64; ++id) {
      const float v[3] = {float(id), float(round), 0};
      store.insert(1000 * (round + 1) + id, v);
    }
    for (PointId id = 0; id < 64; ++id) store.erase(1000 * (round + 1) + id);
    const PublishReport a = store.publish();
    CHECK(a.inserted == 64);
    CHECK(a.erased == 64);
    store.insert(round, far);  // the next publish grows the other buffer to 1 + round slots only
    CHECK(store.publish().inserted == 1);
    CHECK(store.size() == std::size_t(round) + 1);
    const Neighbors n = store.search(far, 8);
    CHECK(n.found(0) == std::size_t(round) + 1);
    for (std::size_t j = 0; j < n.found(0); ++j) CHECK(n.ids[j] <= PointId(round));
  }
}
