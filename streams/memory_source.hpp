// streams/memory_source.hpp — a source whose points were read whole from a file.
//
// Files are loaded before the stream starts because a class column's labels cannot be numbered
// (and the store cannot be sized for them) before every row has been seen. The locator maps a
// point number and feature column back to the file ("line 17, column 3").
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "streams/source.hpp"

namespace streamknn::streams {

class MemorySource final : public Source {
 public:
  using Locator = std::function<std::string(std::size_t index, std::optional<std::size_t> column)>;

  /// labels (classification) or values (regression) hold one entry per row of features (none
  /// where !info.has_targets); attributes, one row of info.attribute_names.size() words per row
  /// (or none without them). A read of every point at once, as the first read, moves them out.
  MemorySource(SourceInfo info, std::vector<float> features, std::vector<std::int32_t> labels,
               std::vector<float> values, Locator locator, std::vector<std::uint32_t> attributes = {});

  const SourceInfo& info() const noexcept override { return info_; }
  std::size_t read(std::size_t max, Chunk& out) override;
  std::string where(std::size_t index, std::optional<std::size_t> column) const override;
  bool in_memory() const noexcept override { return true; }

 private:
  SourceInfo info_;
  std::vector<float> features_;
  std::vector<std::int32_t> labels_;
  std::vector<float> values_;
  Locator locator_;
  std::vector<std::uint32_t> attributes_;
  std::size_t size_ = 0;
  std::size_t next_ = 0;
};

}  // namespace streamknn::streams
