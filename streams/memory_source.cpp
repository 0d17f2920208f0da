#include "streams/memory_source.hpp"

#include <algorithm>
#include <stdexcept>

namespace streamknn::streams {

MemorySource::MemorySource(SourceInfo info, std::vector<float> features, std::vector<std::int32_t> labels,
                           std::vector<float> values, Locator locator, std::vector<std::uint32_t> attributes)
    : info_(std::move(info)),
      features_(std::move(features)),
      labels_(std::move(labels)),
      values_(std::move(values)),
      locator_(std::move(locator)),
      attributes_(std::move(attributes)) {
  if (info_.dim == 0 || features_.size() % info_.dim != 0) {
    throw std::logic_error("MemorySource: features do not hold whole rows of dim " + std::to_string(info_.dim));
  }
  size_ = features_.size() / info_.dim;
  const std::size_t targets = info_.task == Task::Classify ? labels_.size() : values_.size();
  const bool fits = info_.has_targets ? targets == size_ : labels_.empty() && values_.empty();
  if (!fits) {
    throw std::logic_error("MemorySource: " + std::to_string(targets) + " targets for " + std::to_string(size_) + " rows");
  }
  if (attributes_.size() != size_ * info_.attribute_names.size()) {
    throw std::logic_error("MemorySource: " + std::to_string(attributes_.size()) + " attribute words for " +
                           std::to_string(size_) + " rows of " + std::to_string(info_.attribute_names.size()));
  }
  info_.length = size_;
}

std::size_t MemorySource::read(std::size_t max, Chunk& out) {
  out.clear();
  const std::size_t n = std::min(max, size_ - next_);
  if (n == 0) return 0;  // the end (the rows may have been moved out by a read of them all)
  if (next_ == 0 && n == size_) {  // everything at once: nothing is read again, so move it out
    out.features = std::move(features_);
    out.labels = std::move(labels_);
    out.values = std::move(values_);
    out.attributes = std::move(attributes_);
    out.size = n;
    next_ = n;
    return n;
  }
  const auto dim = static_cast<std::ptrdiff_t>(info_.dim);
  const auto first = static_cast<std::ptrdiff_t>(next_), last = static_cast<std::ptrdiff_t>(next_ + n);
  out.features.assign(features_.begin() + first * dim, features_.begin() + last * dim);
  if (!info_.has_targets) {
    // no targets to hand out
  } else if (info_.task == Task::Classify) {
    out.labels.assign(labels_.begin() + first, labels_.begin() + last);
  } else {
    out.values.assign(values_.begin() + first, values_.begin() + last);
  }
  const auto words = static_cast<std::ptrdiff_t>(info_.attribute_names.size());
  out.attributes.assign(attributes_.begin() + first * words, attributes_.begin() + last * words);
  out.size = n;
  next_ += n;
  return n;
}

std::string MemorySource::where(std::size_t index, std::optional<std::size_t> column) const {
  return locator_ ? locator_(index, column) : Source::where(index, column);
}

}  // namespace streamknn::streams
