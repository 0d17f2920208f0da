// store_config (store_config.hpp).
#include "store_config.hpp"

#include "streamknn/error.hpp"
#include "streamknn/metric.hpp"

namespace streamknn::python {

StoreConfig store_config(const char* caller, std::size_t dim, const std::string& metric,
                         std::optional<std::uint32_t> n_classes, std::optional<std::uint32_t> n_outputs,
                         const std::string& backend, std::size_t capacity_hint, std::size_t queue_capacity,
                         std::size_t cpu_threads, std::size_t publish_threads, std::size_t attribute_words) {
  StoreConfig c;
  c.dim = dim;
  c.metric = parse_metric(metric);
  if (n_classes && n_outputs) throw InvalidArgument(std::string(caller) + ": give n_classes or n_outputs, not both");
  if (n_classes) c.target = TargetSpec::classes(*n_classes);
  if (n_outputs) c.target = TargetSpec::outputs(*n_outputs);
  c.backend = parse_backend(backend);
  c.capacity_hint = capacity_hint;
  c.queue_capacity = queue_capacity;
  c.cpu_threads = cpu_threads;
  c.publish_threads = publish_threads;
  c.attribute_words = attribute_words;
  return c;
}

SpatialIndex parse_spatial_index(const char* caller, const std::string& name) {
  if (name == "auto") return SpatialIndex::Auto;
  if (name == "always") return SpatialIndex::Always;
  if (name == "off") return SpatialIndex::Off;
  throw InvalidArgument(std::string(caller) + ": unknown spatial_index '" + name + "' (choose auto, always or off)");
}

ReducedScreen parse_reduced_screen(const char* caller, const std::string& name) {
  if (name == "auto") return ReducedScreen::Auto;
  if (name == "always") return ReducedScreen::Always;
  if (name == "off") return ReducedScreen::Off;
  throw InvalidArgument(std::string(caller) + ": unknown reduced_screen '" + name + "' (choose auto, always or off)");
}

ReducedFormat parse_reduced_format(const char* caller, const std::string& name) {
  if (name == "float16") return ReducedFormat::Float16;
  if (name == "int8") return ReducedFormat::Int8;
  throw InvalidArgument(std::string(caller) + ": unknown reduced_format '" + name + "' (choose float16 or int8)");
}

}  // namespace streamknn::python
