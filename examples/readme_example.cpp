#include <cstdio>
#include <streamknn/streamknn.hpp>

int main() {
  using namespace streamknn;
  StoreConfig config;
  config.dim = 2;                                  // (latitude, longitude) in degrees
  config.metric = Metric::Haversine;               // distances in metres
  config.target = TargetSpec::classes(2);          // 0 = car, 1 = van
  ReferenceSet drivers(config);                    // CUDA where a GPU is usable, else CPU

  const float at[3][2] = {{48.8566f, 2.3522f}, {48.8606f, 2.3376f}, {48.8530f, 2.3499f}};
  for (PointId id = 0; id < 3; ++id) drivers.insert(id, at[id], int(id % 2));
  drivers.publish();                               // epoch 1: three drivers visible

  const float eiffel_tower[2] = {48.8584f, 2.2945f};
  drivers.move(1, eiffel_tower);                   // pushes are thread-safe and lock-free
  drivers.erase(7);                                // unknown id: reported, never ignored
  PublishReport report = drivers.publish();        // epoch 2

  const float passenger[2] = {48.8570f, 2.3510f};
  Neighbors near = drivers.search(passenger, 2);   // exact, ordered by (distance, id)
  for (std::size_t j = 0; j < near.k; ++j)
    std::printf("driver %llu at %.0f m\n", (unsigned long long)near.ids[j], near.distances[j]);
  KnnClassifier kind(drivers, 3, Weights::Distance);
  std::printf("epoch %llu, %zu rejected: probably a %s\n", (unsigned long long)report.epoch,
              report.rejected.size(), kind.predict(passenger).labels[0] ? "van" : "car");
}
