// Placeholder main job: a short demonstration of the library (replaced by the runner).
#include <cstdio>
#include <vector>

#include "streamknn/streamknn.hpp"

int main() {
  using namespace streamknn;
  StoreConfig config;
  config.dim = 2;
  config.target = TargetSpec::classes(2);
  ReferenceSet store(config);
  for (PointId id = 0; id < 10; ++id) {
    const float v[2] = {float(id), float(id % 3)};
    store.insert(id, v, static_cast<std::int32_t>(id < 5 ? 0 : 1));
  }
  auto report = store.publish();
  std::printf("backend %s: inserted %zu, epoch %llu\n", store.backend_name().c_str(), report.inserted,
              (unsigned long long)report.epoch);
  const float moved[2] = {100, 100};
  store.move(3, moved);
  store.erase(4);
  store.erase(42);
  report = store.publish();
  std::printf("moved %zu erased %zu rejected %zu (id %llu: %s)\n", report.moved, report.erased, report.rejected.size(),
              (unsigned long long)report.rejected[0].id, to_string(report.rejected[0].reason));
  const float q[2] = {4.2f, 1.0f};
  auto nn = store.search(q, 3);
  for (std::size_t j = 0; j < 3; ++j) std::printf("  neighbour %zu: id %llu at %.3f\n", j, (unsigned long long)nn.ids[j], nn.distances[j]);
  KnnClassifier clf(store, 3);
  auto p = clf.predict_proba(q);
  std::printf("label %d, p = [%.2f %.2f]\n", p.labels[0], p.probabilities[0], p.probabilities[1]);
}
