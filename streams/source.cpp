#include "streams/source.hpp"

namespace streamknn::streams {

const char* to_string(Task task) noexcept { return task == Task::Classify ? "classify" : "regress"; }

std::string Source::where(std::size_t index, std::optional<std::size_t> column) const {
  std::string place = info().name + ", point " + std::to_string(index);
  if (column) place += ", feature " + std::to_string(*column);
  return place;
}

}  // namespace streamknn::streams
