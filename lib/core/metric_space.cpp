#include "core/metric_space.hpp"

#include <numbers>

namespace streamknn {

float max_coordinate(Metric metric, std::size_t dim) noexcept { return detail::coordinate_bound(metric, dim); }

}  // namespace streamknn

namespace streamknn::detail {

void to_stored_form(Metric metric, std::span<const float> in, float* out) noexcept {
  switch (metric) {
    case Metric::L2:
    case Metric::InnerProduct:
      for (std::size_t i = 0; i < in.size(); ++i) out[i] = in[i];
      return;
    case Metric::Cosine: {
      double norm2 = 0;
      for (float v : in) norm2 += double(v) * double(v);
      const double inv = 1.0 / std::sqrt(norm2);
      for (std::size_t i = 0; i < in.size(); ++i) out[i] = static_cast<float>(in[i] * inv);
      return;
    }
    case Metric::Haversine: {
      constexpr double kRad = std::numbers::pi / 180.0;
      const double lat = in[0] * kRad, lon = in[1] * kRad;
      out[0] = static_cast<float>(std::cos(lat) * std::cos(lon));
      out[1] = static_cast<float>(std::cos(lat) * std::sin(lon));
      out[2] = static_cast<float>(std::sin(lat));
      return;
    }
  }
}

}  // namespace streamknn::detail
