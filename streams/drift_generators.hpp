// streams/drift_generators.hpp — drifting classification streams with a seed.
//
// Both follow MOA's generators (and River's ports of them) so results can be compared with the
// literature: the rotating hyperplane (HyperplaneGenerator) and random RBF with moving
// centroids (RandomRBFGeneratorDrift). Features lie in [0, 1] (RBF points may fall slightly
// outside). A seed fixes the whole stream on every platform (streams/random.hpp), and the
// points do not depend on how reads are chunked.
#pragma once

#include <cstdint>
#include <vector>

#include "streams/random.hpp"
#include "streams/source.hpp"

namespace streamknn::streams {

struct HyperplaneConfig {
  std::size_t dim = 10;
  std::size_t points = 100000;
  double drift = 0.01;      ///< change of each weight per point (MOA's magChange)
  double reversal = 0.1;    ///< probability per point that a weight's drift changes sign (MOA's sigma)
  double noise = 0.05;      ///< probability that a label is flipped
  std::uint64_t seed = 42;
};

/// Label 1 when sum_i w_i x_i >= (sum_i w_i) / 2, else 0; the weights w drift as the stream goes.
class HyperplaneSource final : public Source {
 public:
  explicit HyperplaneSource(const HyperplaneConfig& config);
  const SourceInfo& info() const noexcept override { return info_; }
  std::size_t read(std::size_t max, Chunk& out) override;

 private:
  HyperplaneConfig config_;
  SourceInfo info_;
  Rng rng_;
  std::vector<double> weights_, direction_;
  std::size_t next_ = 0;
};

struct RbfConfig {
  std::size_t dim = 10;
  std::size_t classes = 4;
  std::size_t centroids = 50;
  double speed = 0.001;     ///< distance each centroid moves per point
  std::size_t points = 100000;
  std::uint64_t seed = 42;
};

/// Points drawn around weighted Gaussian centroids, each with a class; every centroid moves in
/// a straight line at `speed` per point, bouncing off the walls of the unit cube.
class RbfDriftSource final : public Source {
 public:
  explicit RbfDriftSource(const RbfConfig& config);
  const SourceInfo& info() const noexcept override { return info_; }
  std::size_t read(std::size_t max, Chunk& out) override;

 private:
  struct Centroid {
    std::vector<double> centre, velocity;
    std::int32_t label = 0;
    double spread = 0;
  };
  RbfConfig config_;
  SourceInfo info_;
  Rng rng_;
  std::vector<Centroid> centroids_;
  std::vector<double> cumulative_weight_;
  std::vector<double> offset_;
  std::size_t next_ = 0;
};

}  // namespace streamknn::streams
